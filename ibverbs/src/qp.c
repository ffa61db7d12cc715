/*
 * qp.c: RC queue pairs: creation, the state machine, posting (classic and
 * ibv_wr_* through struct ibv_qp_ex).
 *
 * Connections. ibverbs programs exchange (GID, QPN) out of band and then
 * move both QPs to RTR with the peer's values; the lab's NIC connects by
 * (address, port). Each QP claims a port on its host's NIC when it is
 * created (LISTEN) and that port is its QPN, so a peer's (GID, QPN) is an
 * (address, port) to dial. At RTR the side with the smaller (address, QPN)
 * dials the other's port (CONNECT) and the other ACCEPTs on its own;
 * neither waits: the lab accepts a dial into the port's backlog at once,
 * whichever side gets to RTR first (ibv_rc_pingpong's server moves to RTR
 * before its client knows the server's QPN). Requests posted after RTS
 * wait in the lab's queue until the connection is up, as on a NIC.
 */
#include "mrv.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

int mrv_nflush;

static const unsigned supported_ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
				      IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ;

static void qpx_init(struct mrv_qp *p);

/* staging registers the QP's inline buffer: SEND_INLINE data is copied
 * there, since the program's own buffer need not be registered. */
static int staging(struct mrv_qp *p, uint32_t pd) {
	p->inl_size = ((size_t)p->sq.entries * MRV_MAX_INLINE + 4095) & ~(size_t)4095;
	int fd = memfd_create("mrlab-ibverbs-inline", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return errno;
	if (ftruncate(fd, (off_t)p->inl_size) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
		close(fd);
		return errno;
	}
	p->inl = mmap(NULL, p->inl_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p->inl == MAP_FAILED) {
		p->inl = NULL;
		close(fd);
		return ENOMEM;
	}
	struct mv_reg_mr q = {pd, MV_ACCESS_LOCAL_WRITE, 0, p->inl_size};
	struct mv_reg_mr_reply r;
	uint32_t st = mrv_call(MV_REG_MR, &q, sizeof q, fd, &r, sizeof r, NULL);
	close(fd);
	if (st != MV_OK)
		return mrv_errno(st);
	p->inl_addr = r.addr;
	p->inl_lkey = r.lkey;
	return 0;
}

/* teardown frees what create got, in reverse; called with the lock held. */
static void teardown(struct mrv_qp *p) {
	if (p->listener) {
		struct mv_handle r = {p->listener, 0};
		mrv_call(MV_STOP_LISTEN, &r, sizeof r, -1, NULL, 0, NULL);
	}
	if (p->h && !p->lab_gone) {
		struct mv_handle r = {p->h, 0};
		mrv_call(MV_DESTROY_QP, &r, sizeof r, -1, NULL, 0, NULL);
	}
	if (p->inl_lkey) {
		struct mv_handle r = {p->inl_lkey, 0};
		mrv_call(MV_DEREG_MR, &r, sizeof r, -1, NULL, 0, NULL);
	}
	if (p->inl)
		munmap(p->inl, p->inl_size);
	if (p->rings)
		munmap(p->rings, p->rings_size);
	if (p->flush)
		mrv_nflush--;
	mrv_qps[p->idx] = NULL;
	free(p->sslots);
	free(p->rslots);
	free(p);
}

static struct ibv_qp *create(struct ibv_pd *pd, struct ibv_qp_init_attr_ex *a, int ex) {
	struct mv_hello_reply *h = &mrv_s.hello;
	if (a->qp_type != IBV_QPT_RC || a->srq) {
		/* UC, UD, XRC, raw packet and SRQs: the lab's NIC has RC only */
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!a->send_cq || !a->recv_cq || a->cap.max_send_wr > h->max_wr || a->cap.max_recv_wr > h->max_wr ||
	    a->cap.max_send_sge > h->max_sge || a->cap.max_recv_sge > h->max_sge || a->cap.max_inline_data > MRV_MAX_INLINE) {
		errno = EINVAL;
		return NULL;
	}
	struct mrv_qp *p = calloc(1, sizeof *p);
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	struct mrv_device *d = mrv_dev_of(pd->context);
	p->transport = d->transport;
	pthread_mutex_lock(&mrv_s.mu);
	int e = ENOMEM;
	for (uint32_t i = 0; i < MRV_MAX_QPS; i++)
		if (!mrv_qps[i]) {
			p->idx = i;
			mrv_qps[i] = p;
			e = 0;
			break;
		}
	if (e) {
		pthread_mutex_unlock(&mrv_s.mu);
		free(p);
		errno = e;
		return NULL;
	}
	struct mv_create_qp q = {((struct mrv_pd *)pd)->h, ((struct mrv_cq *)a->send_cq)->h, ((struct mrv_cq *)a->recv_cq)->h,
				 (uint8_t)p->transport, {0}, a->cap.max_send_wr ? a->cap.max_send_wr : 1,
				 a->cap.max_recv_wr ? a->cap.max_recv_wr : 1};
	struct mv_create_qp_reply r;
	int fds[2] = {-1, -1};
	uint32_t st = mrv_call(MV_CREATE_QP, &q, sizeof q, -1, &r, sizeof r, fds);
	if (st != MV_OK) {
		e = mrv_errno(st);
		goto fail;
	}
	p->h = r.qp;
	p->rings_size = r.size;
	p->rings = mrv_map(fds[0], r.size);
	if (!p->rings)
		goto fail;
	p->sq = (struct mv_ring){(uint8_t *)p->rings + r.sq_offset, r.sq_entries, sizeof(struct mv_wqe)};
	p->rq = (struct mv_ring){(uint8_t *)p->rings + r.rq_offset, r.rq_entries, sizeof(struct mv_wqe)};
	p->sslots = calloc(r.sq_entries, sizeof *p->sslots);
	p->rslots = calloc(r.rq_entries, sizeof *p->rslots);
	if (!p->sslots || !p->rslots)
		goto fail;
	if ((e = staging(p, q.pd)) != 0)
		goto fail;
	/* The QPN: a port of this host's NIC. */
	static uint32_t tries;
	uint32_t span = 65536 - MRV_PORT_FIRST;
	st = MV_BUSY;
	for (int i = 0; i < 256 && st == MV_BUSY; i++) {
		uint32_t port = MRV_PORT_FIRST + ((uint32_t)getpid() * 7919u + tries++ * 40503u) % span;
		struct mv_listen l = {q.pd, (uint16_t)port, 1};
		struct mv_handle lr;
		st = mrv_call(MV_LISTEN, &l, sizeof l, -1, &lr, sizeof lr, NULL);
		if (st == MV_OK) {
			p->listener = lr.handle;
			p->qpx.qp_base.qp_num = port;
		}
	}
	if (st != MV_OK) {
		e = mrv_errno(st);
		goto fail;
	}
	pthread_mutex_unlock(&mrv_s.mu);

	struct ibv_qp *b = &p->qpx.qp_base;
	b->context = pd->context;
	b->qp_context = a->qp_context;
	b->pd = pd;
	b->send_cq = a->send_cq;
	b->recv_cq = a->recv_cq;
	b->handle = p->h;
	b->state = IBV_QPS_RESET;
	b->qp_type = IBV_QPT_RC;
	pthread_mutex_init(&b->mutex, NULL);
	pthread_cond_init(&b->cond, NULL);
	p->sig_all = a->sq_sig_all;
	p->ex = ex;
	a->cap.max_send_wr = r.sq_entries;
	a->cap.max_recv_wr = r.rq_entries;
	a->cap.max_send_sge = a->cap.max_recv_sge = h->max_sge;
	a->cap.max_inline_data = MRV_MAX_INLINE;
	p->attr.cap = a->cap;
	p->attr.qp_state = p->attr.cur_qp_state = IBV_QPS_RESET;
	p->attr.path_mtu = p->attr.path_mtu ? p->attr.path_mtu : IBV_MTU_1024;
	qpx_init(p);
	mrv_log("QP %u created (%s)", b->qp_num, p->transport == MV_TRANSPORT_METAROCE ? "MetaRoCE" : "RoCEv2");
	return b;
fail:
	teardown(p);
	pthread_mutex_unlock(&mrv_s.mu);
	errno = e ? e : ENOMEM;
	return NULL;
}

struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) {
	struct ibv_qp_init_attr_ex x = {0};
	memcpy(&x, a, sizeof *a);
	x.comp_mask = IBV_QP_INIT_ATTR_PD;
	x.pd = pd;
	struct ibv_qp *q = create(pd, &x, 0);
	if (q)
		a->cap = x.cap;
	return q;
}
MRV_EXPORT(create_qp, ibv_create_qp, "IBVERBS_1.1");

struct ibv_qp *mrv_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *a) {
	(void)c;
	if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd) {
		errno = EINVAL;
		return NULL;
	}
	int ex = 0;
	if (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		if (a->send_ops_flags & ~(uint64_t)supported_ops) {
			/* atomics, memory windows, local invalidate, TSO */
			errno = EOPNOTSUPP;
			return NULL;
		}
		ex = 1;
	}
	if (a->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS) ||
	    ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return create(a->pd, a, ex);
}

struct ibv_qp_ex *qp_to_qp_ex(struct ibv_qp *qp) {
	struct mrv_qp *p = (struct mrv_qp *)qp;
	return p->ex ? &p->qpx : NULL;
}
MRV_EXPORT(qp_to_qp_ex, ibv_qp_to_qp_ex, "IBVERBS_1.6");

static void start_flush(struct mrv_qp *p) {
	if (!p->lab_gone) {
		struct mv_handle r = {p->h, 0};
		mrv_call(MV_DESTROY_QP, &r, sizeof r, -1, NULL, 0, NULL);
		p->lab_gone = 1;
	}
	if (!p->flush) {
		p->flush = 1;
		mrv_nflush++;
	}
}

/* remote_ip finds the peer's IPv4 address: from an IPv4-mapped GID, or,
 * without a GRH, from a LID (the low 16 bits; see query_port). */
static int remote_ip(const struct ibv_ah_attr *ah, uint8_t ip[4]) {
	if (ah->is_global) {
		const uint8_t *g = ah->grh.dgid.raw;
		static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		if (memcmp(g, prefix, 12) != 0)
			return EINVAL;
		memcpy(ip, g + 12, 4);
		return 0;
	}
	if (!ah->dlid)
		return EINVAL;
	ip[0] = mrv_s.hello.addr[0];
	ip[1] = mrv_s.hello.addr[1];
	ip[2] = (uint8_t)(ah->dlid >> 8);
	ip[3] = (uint8_t)ah->dlid;
	return 0;
}

static int connect_qp(struct mrv_qp *p, const struct ibv_qp_attr *a) {
	int e = remote_ip(&a->ah_attr, p->remote_ip);
	if (e) {
		mrv_log("QP %u to RTR: the address vector names no IPv4 host (want an IPv4-mapped GID or a LID)", p->qpx.qp_base.qp_num);
		return e;
	}
	p->remote_qpn = a->dest_qp_num;
	int c = memcmp(mrv_s.hello.addr, p->remote_ip, 4);
	if (c == 0) {
		mrv_log("QP %u to RTR: the peer is this host; the lab connects hosts only", p->qpx.qp_base.qp_num);
		return EINVAL;
	}
	if (a->dest_qp_num == 0 || a->dest_qp_num > 0xffff)
		return EINVAL;
	if (c < 0) {
		struct mv_connect q = {p->h, {0}, (uint16_t)a->dest_qp_num, {0}};
		memcpy(q.addr, p->remote_ip, 4);
		p->pend_seq = mrv_send(MV_CONNECT, &q, sizeof q);
	} else {
		struct mv_accept q = {p->listener, p->h};
		p->pend_seq = mrv_send(MV_ACCEPT, &q, sizeof q);
	}
	mrv_log("QP %u to RTR: %s %u.%u.%u.%u QP %u", p->qpx.qp_base.qp_num, c < 0 ? "dialing" : "accepting",
		p->remote_ip[0], p->remote_ip[1], p->remote_ip[2], p->remote_ip[3], a->dest_qp_num);
	return p->pend_seq ? 0 : EIO;
}

/* set_rnr hands the lab the QP's RNR policy: rnr_retry (7: forever) for
 * its requester, min_rnr_timer for its RoCEv2 responder's RNR NAKs. Both
 * go at RTR to RTS (where IB requires rnr_retry; min_rnr_timer came at
 * RTR), and either when a later modify changes it. */
static int set_rnr(struct mrv_qp *p, enum ibv_qp_state cur, enum ibv_qp_state next, int mask) {
	struct mv_set_rnr r = {.qp = p->h, .rnr_retry = p->attr.rnr_retry, .min_rnr_timer = p->attr.min_rnr_timer};
	if (mask & IBV_QP_RNR_RETRY) r.mask |= MV_RNR_SET_RETRY;
	if (mask & IBV_QP_MIN_RNR_TIMER) r.mask |= MV_RNR_SET_TIMER;
	if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS)
		r.mask = MV_RNR_SET_RETRY | MV_RNR_SET_TIMER;
	if (!r.mask || p->flush || p->lab_gone || next == IBV_QPS_ERR)
		return 0;
	pthread_mutex_lock(&mrv_s.mu);
	uint32_t code = mrv_call(MV_SET_RNR, &r, sizeof r, -1, NULL, 0, NULL);
	pthread_mutex_unlock(&mrv_s.mu);
	if (code) {
		mrv_log("QP %u: SET_RNR failed: code %u", p->qpx.qp_base.qp_num, code);
		return mrv_errno(code);
	}
	return 0;
}

int modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
	struct mrv_qp *p = (struct mrv_qp *)qp;
	enum ibv_qp_state cur = (mask & IBV_QP_CUR_STATE) ? a->cur_qp_state : qp->state;
	enum ibv_qp_state next = (mask & IBV_QP_STATE) ? a->qp_state : cur;
	int ok;
	switch (next) {
	case IBV_QPS_INIT: ok = cur == IBV_QPS_RESET || cur == IBV_QPS_INIT; break;
	case IBV_QPS_RTR: ok = cur == IBV_QPS_INIT && (mask & (IBV_QP_AV | IBV_QP_DEST_QPN)) == (IBV_QP_AV | IBV_QP_DEST_QPN); break;
	case IBV_QPS_RTS: ok = cur == IBV_QPS_RTR || cur == IBV_QPS_RTS || cur == IBV_QPS_SQD; break;
	case IBV_QPS_ERR: ok = 1; break;
	case IBV_QPS_RESET: ok = cur == IBV_QPS_RESET; break; /* a used QP cannot be reset here: EINVAL below */
	default: ok = 0; /* SQD, SQE */
	}
	if (!ok || cur != qp->state) {
		mrv_log("QP %u: modify from %d to %d (mask %#x) refused", qp->qp_num, cur, next, mask);
		return EINVAL;
	}
	if ((mask & IBV_QP_PORT) && a->port_num != 1)
		return EINVAL;
	if ((mask & IBV_QP_ACCESS_FLAGS) &&
	    (a->qp_access_flags & ~(unsigned)(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)))
		return EOPNOTSUPP; /* remote atomics */
	if (((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > MV_RNR_RETRY_FOREVER) ||
	    ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > MV_MAX_RNR_TIMER))
		return EINVAL; /* 3 and 5 bits, as in the IB QP context */
	int e = 0;
	pthread_mutex_lock(&mrv_s.mu);
	if (next == IBV_QPS_RTR && cur == IBV_QPS_INIT)
		e = connect_qp(p, a);
	else if (next == IBV_QPS_ERR)
		start_flush(p);
	pthread_mutex_unlock(&mrv_s.mu);
	if (e)
		return e;
	/* Keep what was set, for ibv_query_qp. */
	struct ibv_qp_attr *s = &p->attr;
	if (mask & IBV_QP_ACCESS_FLAGS) s->qp_access_flags = a->qp_access_flags;
	if (mask & IBV_QP_PKEY_INDEX) s->pkey_index = a->pkey_index;
	if (mask & IBV_QP_PORT) s->port_num = a->port_num;
	if (mask & IBV_QP_AV) s->ah_attr = a->ah_attr;
	if (mask & IBV_QP_PATH_MTU) s->path_mtu = a->path_mtu;
	if (mask & IBV_QP_TIMEOUT) s->timeout = a->timeout;
	if (mask & IBV_QP_RETRY_CNT) s->retry_cnt = a->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY) s->rnr_retry = a->rnr_retry;
	if (mask & IBV_QP_RQ_PSN) s->rq_psn = a->rq_psn;
	if (mask & IBV_QP_SQ_PSN) s->sq_psn = a->sq_psn;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC) s->max_rd_atomic = a->max_rd_atomic;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) s->max_dest_rd_atomic = a->max_dest_rd_atomic;
	if (mask & IBV_QP_MIN_RNR_TIMER) s->min_rnr_timer = a->min_rnr_timer;
	if (mask & IBV_QP_DEST_QPN) s->dest_qp_num = a->dest_qp_num;
	if ((e = set_rnr(p, cur, next, mask)))
		return e;
	s->qp_state = s->cur_qp_state = next;
	qp->state = next;
	if (next != cur && next == IBV_QPS_RTS)
		mrv_log("QP %u in RTS", qp->qp_num);
	return 0;
}
MRV_EXPORT(modify_qp, ibv_modify_qp, "IBVERBS_1.1");

int query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init) {
	(void)mask;
	struct mrv_qp *p = (struct mrv_qp *)qp;
	uint32_t lab = mv_load(p->sq.mem, MV_FLAG);
	if (!p->lab_gone && (lab == MV_QP_ERROR || lab == MV_QP_CLOSED))
		qp->state = p->attr.qp_state = IBV_QPS_ERR;
	*a = p->attr;
	a->cur_qp_state = a->qp_state;
	memset(init, 0, sizeof *init);
	init->qp_context = qp->qp_context;
	init->send_cq = qp->send_cq;
	init->recv_cq = qp->recv_cq;
	init->cap = p->attr.cap;
	init->qp_type = IBV_QPT_RC;
	init->sq_sig_all = p->sig_all;
	return 0;
}
MRV_EXPORT(query_qp, ibv_query_qp, "IBVERBS_1.1");

/* linger lets the lab's clock run on before a connected QP closes: the
 * lab's transports drop an acknowledgement they still hold back (MetaRoCE
 * holds one for up to AckEvery = 4 packets' time) when the connection
 * closes, and the peer would then see its last request flushed where a
 * NIC, which acknowledges at once, completes it. The wait is in lab time
 * (WATCH/UNWATCH intervals), so a lab that lags behind the wall clock
 * still gets there: 16 full packets at the port's line rate, at least
 * 1 ms, and at most 5 s of wall time. */
static void linger(void) {
	struct mv_hello_reply *h = &mrv_s.hello;
	uint64_t want = 1000000;
	if (h->line_rate) {
		uint64_t pkt = 16ULL * (h->path_mtu + 100) * 8 * 1000000000ULL / h->line_rate;
		if (pkt > want)
			want = pkt;
	}
	uint64_t lab = 0;
	for (int i = 0; i < 5000 && lab < want; i++) {
		struct mv_handle w, u = {0, 0};
		struct mv_unwatch_reply r;
		if (mrv_call(MV_WATCH, NULL, 0, -1, &w, sizeof w, NULL) != MV_OK)
			return;
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
		u.handle = w.handle;
		if (mrv_call(MV_UNWATCH, &u, sizeof u, -1, &r, sizeof r, NULL) != MV_OK)
			return;
		lab += r.lab_ns;
	}
}

int destroy_qp(struct ibv_qp *qp) {
	struct mrv_qp *p = (struct mrv_qp *)qp;
	if (!p->lab_gone && mv_load(p->sq.mem, MV_FLAG) == MV_QP_ESTABLISHED) {
		pthread_mutex_lock(&mrv_s.mu);
		linger();
		pthread_mutex_unlock(&mrv_s.mu);
	}
	pthread_mutex_lock(&mrv_s.mu);
	teardown((struct mrv_qp *)qp);
	pthread_mutex_unlock(&mrv_s.mu);
	return 0;
}
MRV_EXPORT(destroy_qp, ibv_destroy_qp, "IBVERBS_1.1");

/* Posting. A request's wr_id in the lab is (QP index, queue position), so a
 * completion finds its QP and its slot (the program's wr_id, signaled). */

static struct mv_wqe *begin(struct mrv_qp *p, uint64_t wr_id, unsigned flags, uint8_t op) {
	if (p->wr_prod - p->sq_done >= p->sq.entries)
		return NULL;
	uint32_t pos = p->wr_prod++;
	struct mv_wqe *w = p->flush ? &p->scratch : mv_entry(&p->sq, pos);
	memset(w, 0, sizeof *w);
	w->wr_id = (uint64_t)p->idx << 32 | pos;
	w->opcode = op;
	struct mrv_slot *s = &p->sslots[pos & (p->sq.entries - 1)];
	s->wr_id = wr_id;
	s->signaled = p->sig_all || (flags & IBV_SEND_SIGNALED);
	s->opcode = op;
	return w;
}

static void publish(struct mrv_qp *p) {
	if (p->sq_prod == p->wr_prod)
		return;
	p->sq_prod = p->wr_prod;
	if (!p->flush) {
		mv_store(p->sq.mem, MV_PRODUCER, p->sq_prod);
		mrv_doorbell();
	}
}

/* inline_copy copies the request's data to the QP's staging slot. */
static int inline_copy(struct mrv_qp *p, struct mv_wqe *w, const struct ibv_data_buf *b, size_t n) {
	uint32_t pos = (uint32_t)w->wr_id & (p->sq.entries - 1);
	uint8_t *dst = p->inl + (size_t)pos * MRV_MAX_INLINE;
	size_t len = 0;
	for (size_t i = 0; i < n; i++) {
		if (b[i].length > MRV_MAX_INLINE - len)
			return EINVAL;
		memcpy(dst + len, b[i].addr, b[i].length);
		len += b[i].length;
	}
	w->num_sge = 1;
	w->sge[0] = (struct mv_sge){p->inl_addr + (uint64_t)pos * MRV_MAX_INLINE, (uint32_t)len, p->inl_lkey};
	return 0;
}

static uint8_t lab_op(enum ibv_wr_opcode op) {
	switch (op) {
	case IBV_WR_RDMA_WRITE: return MV_WR_WRITE;
	case IBV_WR_RDMA_WRITE_WITH_IMM: return MV_WR_WRITE_IMM;
	case IBV_WR_SEND: return MV_WR_SEND;
	case IBV_WR_SEND_WITH_IMM: return MV_WR_SEND_IMM;
	case IBV_WR_RDMA_READ: return MV_WR_READ;
	default: return 0; /* atomics, invalidate, bind, TSO */
	}
}

/* can_send reports whether the QP takes send requests: in RTS, and in
 * ERROR, where they are flushed here (the lab's QP is let go at the first
 * post after an error, so nothing it does later can complete them). */
static int can_send(struct ibv_qp *qp) {
	struct mrv_qp *p = (struct mrv_qp *)qp;
	if (qp->state == IBV_QPS_ERR && !p->flush) {
		pthread_mutex_lock(&mrv_s.mu);
		start_flush(p);
		pthread_mutex_unlock(&mrv_s.mu);
	}
	return qp->state == IBV_QPS_RTS || qp->state == IBV_QPS_ERR;
}

int mrv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
	struct mrv_qp *p = (struct mrv_qp *)qp;
	int e = 0;
	if (mrv_is_dead())
		e = EIO; /* the lab stopped (death.c) */
	else if (!can_send(qp))
		e = EINVAL;
	for (; wr && !e; wr = wr->next) {
		uint8_t op = lab_op(wr->opcode);
		struct mv_wqe *w;
		if (!op || wr->num_sge < 0 || (!(wr->send_flags & IBV_SEND_INLINE) && wr->num_sge > 4)) {
			e = EINVAL;
			break;
		}
		if (!(w = begin(p, wr->wr_id, wr->send_flags, op))) {
			e = ENOMEM;
			break;
		}
		w->imm = wr->imm_data;
		w->remote_addr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
		if ((wr->send_flags & IBV_SEND_INLINE) && op != MV_WR_READ) {
			struct ibv_data_buf b[16];
			if (wr->num_sge > 16) {
				e = EINVAL;
			} else {
				for (int i = 0; i < wr->num_sge; i++)
					b[i] = (struct ibv_data_buf){(void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length};
				e = inline_copy(p, w, b, (size_t)wr->num_sge);
			}
			if (e) {
				p->wr_prod--;
				break;
			}
		} else {
			w->num_sge = (uint8_t)wr->num_sge;
			for (int i = 0; i < wr->num_sge; i++)
				w->sge[i] = (struct mv_sge){wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
		}
	}
	publish(p);
	if (e && bad)
		*bad = wr;
	return e;
}

int mrv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
	struct mrv_qp *p = (struct mrv_qp *)qp;
	int e = mrv_is_dead() ? EIO : qp->state == IBV_QPS_RESET ? EINVAL : 0;
	if (qp->state == IBV_QPS_ERR)
		can_send(qp); /* flush here from now on */
	uint32_t prod = p->rq_prod;
	for (; wr && !e; wr = wr->next) {
		if (wr->num_sge < 0 || wr->num_sge > 4) {
			e = EINVAL;
			break;
		}
		if (prod - p->rq_done >= p->rq.entries) {
			e = ENOMEM;
			break;
		}
		uint32_t pos = prod++;
		struct mrv_slot *s = &p->rslots[pos & (p->rq.entries - 1)];
		s->wr_id = wr->wr_id;
		s->signaled = 1;
		s->opcode = MV_WC_RECV;
		if (p->flush)
			continue;
		struct mv_wqe *w = mv_entry(&p->rq, pos);
		memset(w, 0, sizeof *w);
		w->wr_id = (uint64_t)p->idx << 32 | pos;
		w->num_sge = (uint8_t)wr->num_sge;
		for (int i = 0; i < wr->num_sge; i++)
			w->sge[i] = (struct mv_sge){wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
	}
	if (prod != p->rq_prod) {
		p->rq_prod = prod;
		if (!p->flush) {
			mv_store(p->rq.mem, MV_PRODUCER, prod);
			mrv_doorbell();
		}
	}
	if (e && bad)
		*bad = wr;
	return e;
}

/* The extended posting API (ibv_wr_*): requests are built in the ring and
 * published together by wr_complete. */

#define QP(x) ((struct mrv_qp *)(x))

static void wr_start(struct ibv_qp_ex *x) {
	QP(x)->wr_err = can_send(&x->qp_base) ? 0 : EINVAL;
	QP(x)->cur = NULL;
	QP(x)->wr_prod = QP(x)->sq_prod;
}

static void wr_op(struct ibv_qp_ex *x, uint8_t op, uint32_t rkey, uint64_t raddr, __be32 imm) {
	struct mrv_qp *p = QP(x);
	if (p->wr_err)
		return;
	p->cur = begin(p, x->wr_id, x->wr_flags, op);
	if (!p->cur) {
		p->wr_err = ENOMEM;
		return;
	}
	p->cur->rkey = rkey;
	p->cur->remote_addr = raddr;
	p->cur->imm = imm;
}

static void wr_rdma_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr) { wr_op(x, MV_WR_WRITE, rkey, raddr, 0); }
static void wr_rdma_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr, __be32 imm) {
	wr_op(x, MV_WR_WRITE_IMM, rkey, raddr, imm);
}
static void wr_rdma_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr) { wr_op(x, MV_WR_READ, rkey, raddr, 0); }
static void wr_send(struct ibv_qp_ex *x) { wr_op(x, MV_WR_SEND, 0, 0, 0); }
static void wr_send_imm(struct ibv_qp_ex *x, __be32 imm) { wr_op(x, MV_WR_SEND_IMM, 0, 0, imm); }

static void wr_bad(struct ibv_qp_ex *x) {
	if (!QP(x)->wr_err)
		QP(x)->wr_err = EOPNOTSUPP;
}
static void wr_atomic_cmp_swp(struct ibv_qp_ex *x, uint32_t a, uint64_t b, uint64_t c, uint64_t d) {
	(void)a, (void)b, (void)c, (void)d;
	wr_bad(x);
}
static void wr_atomic_fetch_add(struct ibv_qp_ex *x, uint32_t a, uint64_t b, uint64_t c) { (void)a, (void)b, (void)c; wr_bad(x); }
static void wr_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *a, uint32_t b, const struct ibv_mw_bind_info *c) {
	(void)a, (void)b, (void)c;
	wr_bad(x);
}
static void wr_local_inv(struct ibv_qp_ex *x, uint32_t a) { (void)a; wr_bad(x); }
static void wr_send_inv(struct ibv_qp_ex *x, uint32_t a) { (void)a; wr_bad(x); }
static void wr_send_tso(struct ibv_qp_ex *x, void *a, uint16_t b, uint16_t c) { (void)a, (void)b, (void)c; wr_bad(x); }
static void wr_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *a, uint32_t b, uint32_t c) { (void)a, (void)b, (void)c; wr_bad(x); }
static void wr_set_xrc_srqn(struct ibv_qp_ex *x, uint32_t a) { (void)a; wr_bad(x); }
static void wr_atomic_write(struct ibv_qp_ex *x, uint32_t a, uint64_t b, const void *c) { (void)a, (void)b, (void)c; wr_bad(x); }

static void wr_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t len) {
	struct mrv_qp *p = QP(x);
	if (p->wr_err || !p->cur)
		return;
	p->cur->num_sge = 1;
	p->cur->sge[0] = (struct mv_sge){addr, len, lkey};
}

static void wr_set_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *l) {
	struct mrv_qp *p = QP(x);
	if (p->wr_err || !p->cur)
		return;
	if (n > 4) {
		p->wr_err = EINVAL;
		return;
	}
	p->cur->num_sge = (uint8_t)n;
	for (size_t i = 0; i < n; i++)
		p->cur->sge[i] = (struct mv_sge){l[i].addr, l[i].length, l[i].lkey};
}

static void wr_set_inline_data_list(struct ibv_qp_ex *x, size_t n, const struct ibv_data_buf *b) {
	struct mrv_qp *p = QP(x);
	if (p->wr_err || !p->cur)
		return;
	p->wr_err = inline_copy(p, p->cur, b, n);
}

static void wr_set_inline_data(struct ibv_qp_ex *x, void *addr, size_t len) {
	struct ibv_data_buf b = {addr, len};
	wr_set_inline_data_list(x, 1, &b);
}

static int wr_complete(struct ibv_qp_ex *x) {
	struct mrv_qp *p = QP(x);
	if (mrv_is_dead() && !p->wr_err)
		p->wr_err = EIO;
	if (p->wr_err) {
		p->wr_prod = p->sq_prod;
		return p->wr_err;
	}
	publish(p);
	return 0;
}

static void wr_abort(struct ibv_qp_ex *x) { QP(x)->wr_prod = QP(x)->sq_prod; }

static void qpx_init(struct mrv_qp *p) {
	struct ibv_qp_ex *x = &p->qpx;
	x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	x->wr_atomic_fetch_add = wr_atomic_fetch_add;
	x->wr_bind_mw = wr_bind_mw;
	x->wr_local_inv = wr_local_inv;
	x->wr_rdma_read = wr_rdma_read;
	x->wr_rdma_write = wr_rdma_write;
	x->wr_rdma_write_imm = wr_rdma_write_imm;
	x->wr_send = wr_send;
	x->wr_send_imm = wr_send_imm;
	x->wr_send_inv = wr_send_inv;
	x->wr_send_tso = wr_send_tso;
	x->wr_set_ud_addr = wr_set_ud_addr;
	x->wr_set_xrc_srqn = wr_set_xrc_srqn;
	x->wr_set_inline_data = wr_set_inline_data;
	x->wr_set_inline_data_list = wr_set_inline_data_list;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	x->wr_atomic_write = wr_atomic_write;
}
