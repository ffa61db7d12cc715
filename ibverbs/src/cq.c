/*
 * cq.c: completion queues and completion channels.
 *
 * A CQ is the lab's CQ ring, polled with loads and stores. The lab reports
 * every work request's completion; completions of unsignaled send requests
 * that succeeded are dropped here, as a NIC never reports them. A
 * completion channel is an epoll descriptor over its CQs' eventfds, so the
 * channel's fd becomes readable when any of its CQs has an event, as the
 * kernel's does.
 */
#include "mrv.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

/* The lab's CQ must have room for every entry of the queues using it (the
 * ABI's rule); the program's CQ may be smaller, as ibverbs allows, so the
 * lab's is as large as the lab allows. */
#define LAB_CQE 65536

struct ibv_comp_channel *create_comp_channel(struct ibv_context *c) {
	struct ibv_comp_channel *ch = calloc(1, sizeof *ch);
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	ch->fd = epoll_create1(EPOLL_CLOEXEC);
	if (ch->fd < 0) {
		free(ch);
		return NULL;
	}
	ch->context = c;
	return ch;
}
MRV_EXPORT(create_comp_channel, ibv_create_comp_channel, "IBVERBS_1.0");

int destroy_comp_channel(struct ibv_comp_channel *ch) {
	if (ch->refcnt)
		return EBUSY;
	close(ch->fd);
	free(ch);
	return 0;
}
MRV_EXPORT(destroy_comp_channel, ibv_destroy_comp_channel, "IBVERBS_1.0");

struct ibv_cq *create_cq(struct ibv_context *c, int cqe, void *cq_context, struct ibv_comp_channel *ch, int vec) {
	if (cqe < 1 || (uint32_t)cqe > mrv_s.hello.max_cqe || vec != 0) {
		errno = EINVAL;
		return NULL;
	}
	struct mrv_cq *q = calloc(1, sizeof *q);
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	uint32_t n = LAB_CQE < mrv_s.hello.max_cqe ? LAB_CQE : mrv_s.hello.max_cqe;
	struct mv_create_cq r = {n, 0};
	struct mv_create_cq_reply rr;
	int fds[2] = {-1, -1};
	pthread_mutex_lock(&mrv_s.mu);
	uint32_t st = mrv_call(MV_CREATE_CQ, &r, sizeof r, -1, &rr, sizeof rr, fds);
	pthread_mutex_unlock(&mrv_s.mu);
	if (st != MV_OK) {
		free(q);
		errno = mrv_errno(st);
		return NULL;
	}
	q->h = rr.cq;
	q->size = rr.size;
	q->ring = (struct mv_ring){mrv_map(fds[0], rr.size), rr.entries, sizeof(struct mv_cqe)};
	q->evfd = fds[1];
	if (!q->ring.mem) {
		close(q->evfd);
		free(q);
		errno = ENOMEM;
		return NULL;
	}
	if (ch) {
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = q};
		if (epoll_ctl(ch->fd, EPOLL_CTL_ADD, q->evfd, &ev) < 0) {
			int e = errno;
			munmap(q->ring.mem, q->size);
			close(q->evfd);
			free(q);
			errno = e;
			return NULL;
		}
		__atomic_add_fetch(&ch->refcnt, 1, __ATOMIC_SEQ_CST);
	}
	q->cq.context = c;
	q->cq.channel = ch;
	q->cq.cq_context = cq_context;
	q->cq.handle = q->h;
	q->cq.cqe = cqe;
	pthread_mutex_init(&q->cq.mutex, NULL);
	pthread_cond_init(&q->cq.cond, NULL);
	mrv_track_cq(q, 1);
	return &q->cq;
}
MRV_EXPORT(create_cq, ibv_create_cq, "IBVERBS_1.1");

int destroy_cq(struct ibv_cq *cq) {
	struct mrv_cq *q = (struct mrv_cq *)cq;
	struct mv_handle r = {q->h, 0};
	pthread_mutex_lock(&mrv_s.mu);
	uint32_t st = mrv_call(MV_DESTROY_CQ, &r, sizeof r, -1, NULL, 0, NULL);
	pthread_mutex_unlock(&mrv_s.mu);
	if (st != MV_OK && !mrv_is_dead()) /* a dead lab holds nothing */
		return mrv_errno(st);
	mrv_track_cq(q, 0);
	if (cq->channel) {
		epoll_ctl(cq->channel->fd, EPOLL_CTL_DEL, q->evfd, NULL);
		__atomic_sub_fetch(&cq->channel->refcnt, 1, __ATOMIC_SEQ_CST);
	}
	munmap(q->ring.mem, q->size);
	close(q->evfd);
	free(q);
	return 0;
}
MRV_EXPORT(destroy_cq, ibv_destroy_cq, "IBVERBS_1.1");

int get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx) {
	int nonblock = fcntl(ch->fd, F_GETFL) & O_NONBLOCK;
	for (;;) {
		if (mrv_is_dead()) {
			errno = EIO; /* the lab stopped (death.c) */
			return -1;
		}
		struct epoll_event ev;
		int n = epoll_wait(ch->fd, &ev, 1, nonblock ? 0 : -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0) {
			errno = EAGAIN;
			return -1;
		}
		struct mrv_cq *q = ev.data.ptr;
		uint64_t v;
		if (read(q->evfd, &v, sizeof v) != sizeof v)
			continue; /* another thread took it */
		if (mrv_is_dead()) {
			errno = EIO;
			return -1;
		}
		*cq = &q->cq;
		*ctx = q->cq.cq_context;
		return 0;
	}
}
MRV_EXPORT(get_cq_event, ibv_get_cq_event, "IBVERBS_1.1");

void ack_cq_events(struct ibv_cq *cq, unsigned n) {
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += n;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}
MRV_EXPORT(ack_cq_events, ibv_ack_cq_events, "IBVERBS_1.1");

int mrv_req_notify_cq(struct ibv_cq *cq, int solicited) {
	(void)solicited; /* every completion is an event: a superset, as allowed */
	struct mrv_cq *q = (struct mrv_cq *)cq;
	mv_store(q->ring.mem, MV_FLAG, 1);
	/* Completions the lab published before it saw the arm would raise no
	 * event: raise one ourselves. A spurious event is harmless (programs
	 * poll after each). */
	if (mv_load(q->ring.mem, MV_PRODUCER) != q->cons) {
		uint64_t one = 1;
		if (write(q->evfd, &one, sizeof one) < 0) {
			/* EAGAIN: an event is pending already */
		}
	}
	return 0;
}

static const enum ibv_wc_status statuses[] = {
	IBV_WC_SUCCESS, IBV_WC_LOC_PROT_ERR, IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR, IBV_WC_RNR_RETRY_EXC_ERR,
	IBV_WC_RETRY_EXC_ERR, IBV_WC_WR_FLUSH_ERR, IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_QP_OP_ERR, IBV_WC_GENERAL_ERR,
};

static enum ibv_wc_opcode wc_opcode(uint8_t op) {
	switch (op) {
	case MV_WR_WRITE: case MV_WR_WRITE_IMM: return IBV_WC_RDMA_WRITE;
	case MV_WR_SEND: case MV_WR_SEND_IMM: return IBV_WC_SEND;
	case MV_WR_READ: return IBV_WC_RDMA_READ;
	case MV_WC_RECV_IMM: return IBV_WC_RECV_RDMA_WITH_IMM;
	default: return IBV_WC_RECV;
	}
}

/* flush_one reports one flushed request of a QP that was moved to ERROR
 * (qp.c): its work the lab no longer holds. 0 when there is none. */
static int flush_one(struct mrv_cq *q, struct ibv_wc *wc) {
	if (!mrv_nflush)
		return 0;
	for (int i = 0; i < MRV_MAX_QPS; i++) {
		struct mrv_qp *p = mrv_qps[i];
		if (!p || !p->flush)
			continue;
		struct mrv_slot *s;
		if ((struct mrv_cq *)p->qpx.qp_base.send_cq == q && p->sq_done != p->sq_prod) {
			s = &p->sslots[p->sq_done++ & (p->sq.entries - 1)];
		} else if ((struct mrv_cq *)p->qpx.qp_base.recv_cq == q && p->rq_done != p->rq_prod) {
			s = &p->rslots[p->rq_done++ & (p->rq.entries - 1)];
			s->opcode = MV_WC_RECV;
		} else {
			continue;
		}
		memset(wc, 0, sizeof *wc);
		wc->wr_id = s->wr_id;
		wc->status = IBV_WC_WR_FLUSH_ERR;
		wc->opcode = wc_opcode(s->opcode);
		wc->qp_num = p->qpx.qp_base.qp_num;
		return 1;
	}
	return 0;
}

int mrv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
	struct mrv_cq *q = (struct mrv_cq *)cq;
	if (mrv_is_dead()) {
		errno = EIO; /* the lab stopped: nothing more will complete */
		return -1;
	}
	uint32_t prod = mv_load(q->ring.mem, MV_PRODUCER), cons = q->cons;
	int got = 0;
	while (got < n && cons != prod) {
		struct mv_cqe e;
		memcpy(&e, mv_entry(&q->ring, cons), sizeof e);
		cons++;
		uint32_t idx = (uint32_t)(e.wr_id >> 32), pos = (uint32_t)e.wr_id;
		struct mrv_qp *p = idx < MRV_MAX_QPS ? mrv_qps[idx] : NULL;
		if (!p || p->h != e.qp)
			continue; /* a destroyed QP's */
		struct mrv_slot *s;
		int recv = e.opcode == MV_WC_RECV || e.opcode == MV_WC_RECV_IMM;
		/* The lab flushes a connection's receives when its peer closes;
		 * an RC NIC does not (the peer's QP going away moves nothing
		 * here to ERROR), and a program still polling for its last
		 * completions (ibv_rc_pingpong) would fail on them. They stay
		 * posted, and are flushed here (flush_one) if the QP enters
		 * ERROR. */
		if (recv && e.status == MV_WC_FLUSHED && p->qpx.qp_base.state != IBV_QPS_ERR)
			continue;
		if (recv) {
			s = &p->rslots[pos & (p->rq.entries - 1)];
			p->rq_done++;
		} else {
			s = &p->sslots[pos & (p->sq.entries - 1)];
			p->sq_done++;
		}
		if (e.status == MV_WC_SUCCESS && !recv && !s->signaled)
			continue;
		struct ibv_wc *w = &wc[got++];
		memset(w, 0, sizeof *w);
		w->wr_id = s->wr_id;
		w->status = e.status < sizeof statuses / sizeof statuses[0] ? statuses[e.status] : IBV_WC_GENERAL_ERR;
		w->opcode = wc_opcode(e.opcode);
		w->byte_len = e.byte_len;
		w->qp_num = p->qpx.qp_base.qp_num;
		w->src_qp = p->remote_qpn;
		if (e.flags & 1) {
			w->imm_data = e.imm; /* passed through as the sender's __be32 */
			w->wc_flags |= IBV_WC_WITH_IMM;
		}
		w->pkey_index = 0;
		if (e.status != MV_WC_SUCCESS) {
			static const char *const names[] = {"", "local protection error (IBV_WC_LOC_PROT_ERR)",
				"remote access error (IBV_WC_REM_ACCESS_ERR)", "remote invalid request (IBV_WC_REM_INV_REQ_ERR)",
				"RNR retry counter exceeded (IBV_WC_RNR_RETRY_EXC_ERR)",
				"transport retry counter exceeded (IBV_WC_RETRY_EXC_ERR)", "flushed (IBV_WC_WR_FLUSH_ERR)",
				"local length error (IBV_WC_LOC_LEN_ERR)", "local QP operation error (IBV_WC_LOC_QP_OP_ERR)",
				"general error (IBV_WC_GENERAL_ERR)"};
			mrv_log("QP %u: work request %llu failed: %s", w->qp_num, (unsigned long long)w->wr_id,
				e.status < sizeof names / sizeof names[0] ? names[e.status] : "unknown status");
			w->vendor_err = e.status;
			p->qpx.qp_base.state = IBV_QPS_ERR;
			p->attr.qp_state = IBV_QPS_ERR;
		}
	}
	if (cons != q->cons) {
		q->cons = cons;
		mv_store(q->ring.mem, MV_CONSUMER, cons);
	}
	while (got < n && cons == prod && flush_one(q, &wc[got]))
		got++;
	return got;
}
