/*
 * mrv.h: internals of libmrlab-ibverbs, a libibverbs-compatible library over
 * a live mrlab lab host's verbs endpoint (docs/verbs-abi.md). It is preloaded
 * in front of rdma-core's libibverbs.so.1 (LD_PRELOAD): its public entry
 * points carry libibverbs' symbol versions and take precedence, while the
 * real library still supplies the private symbols (IBVERBS_PRIVATE_34) that
 * perftest's libmlx5/libefa need. README.md says what is implemented.
 */
#ifndef MRV_H
#define MRV_H

#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <infiniband/verbs.h>

#include "mrlab_verbs.h" /* generated from internal/verbsabi: go generate ./internal/verbsabi */

#define MRV_EXPORT(local, name, ver) __asm__(".symver " #local "," #name "@@" ver)

#define MRV_MAX_INLINE 512 /* bytes of inline data per work request */
#define MRV_MAX_QPS 1024   /* QP table: a completion's wr_id names its QP */
#define MRV_PORT_FIRST 0x4000

/* The session: one endpoint connection per process, shared by devices. */
struct mrv_session {
	int sock, dbfd;
	uint8_t *dbpage;
	uint32_t seq, rang;
	struct mv_hello_reply hello;
	pthread_mutex_t mu;
	int up;                  /* HELLO answered: a hang-up is the session's loss */
	struct sockaddr_un addr; /* the endpoint's name, dialed again by death.c */
	socklen_t addrlen;
};

struct mrv_device {
	struct ibv_device dev;
	int transport; /* MV_TRANSPORT_METAROCE or MV_TRANSPORT_ROCEV2 */
	uint64_t guid;  /* network order */
};

#define MRV_ASYNC_QUEUE 16 /* port events a context holds for ibv_get_async_event */

struct mrv_context {
	struct verbs_context vctx; /* ibv_context is its last member */
	struct mrv_device *dev;
	struct mrv_context *next; /* death.c's list */
	/* Port events not yet read (port.c); guarded by death.c's lock. */
	uint8_t evq[MRV_ASYNC_QUEUE];
	unsigned evhead, evtail;
};

struct mrv_pd { struct ibv_pd pd; uint32_t h; };
struct mrv_mr { struct ibv_mr mr; uint64_t start, end; struct mrv_mr *next; };

struct mrv_cq {
	struct ibv_cq cq;
	uint32_t h, cons;
	struct mv_ring ring;
	size_t size;
	int evfd;
	struct mrv_cq *next; /* death.c's list */
};

struct mrv_slot { uint64_t wr_id; uint8_t signaled, opcode; };

struct mrv_qp {
	struct ibv_qp_ex qpx; /* ibv_qp is its first member */
	uint32_t h, idx, listener, ex;
	int transport;
	struct mv_ring sq, rq;
	void *rings;
	size_t rings_size;
	uint32_t sq_prod, rq_prod, sq_done, rq_done, wr_prod;
	struct mrv_slot *sslots, *rslots;
	uint8_t *inl;         /* inline staging: one MRV_MAX_INLINE slot per send entry */
	size_t inl_size;
	uint64_t inl_addr;    /* the staging region's address on the NIC */
	uint32_t inl_lkey;
	struct mv_wqe *cur;   /* ibv_wr_*: the request being built */
	int wr_err;
	int sig_all;
	uint32_t remote_qpn;
	uint8_t remote_ip[4];
	struct ibv_qp_attr attr; /* as last modified, for ibv_query_qp */
	uint32_t pend_seq;       /* pending CONNECT or ACCEPT */
	int flush;               /* locally in ERROR: flush outstanding work */
	int lab_gone;            /* the lab's QP was destroyed (modify to ERROR) */
	struct mv_wqe scratch;   /* where requests posted in ERROR are built */
};

extern int mrv_nflush; /* QPs with flush set */

extern struct mrv_session mrv_s;
extern struct mrv_qp *mrv_qps[MRV_MAX_QPS];

int mrv_open_session(void);
/* mrv_call sends a request (with fd_in if >= 0) and waits for its reply:
 * it returns the ABI status (0 OK) and fills body and fds. Replies to other
 * requests (CONNECT, ACCEPT) that arrive meanwhile are consumed. */
uint32_t mrv_call(uint16_t op, const void *req, uint32_t len, int fd_in, void *body, uint32_t cap, int fds[2]);
/* mrv_send sends a request whose reply comes later; it returns its seq. */
uint32_t mrv_send(uint16_t op, const void *req, uint32_t len);
int mrv_errno(uint32_t code);
void mrv_doorbell(void);
void mrv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *mrv_map(int fd, size_t size);

struct mrv_device *mrv_dev_of(struct ibv_context *c);
int mrv_query_device(struct ibv_context *c, struct ibv_device_attr *a);
int mrv_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a, size_t len);
int mrv_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
			struct ibv_device_attr_ex *a, size_t size);

/* queue.c: the data path, installed in every context's ops. */
int mrv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int mrv_req_notify_cq(struct ibv_cq *cq, int solicited);
int mrv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int mrv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
struct ibv_qp *mrv_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *a);
int mrv_unsupported(void);

/* death.c: the lab's death (or the session's loss). mrv_dead is set once
 * the session is lost; mrv_lost decides why, says so on stderr once, sets
 * it and wakes every CQ's and context's eventfd. */
extern int mrv_dead;
int mrv_is_dead(void);
void mrv_lost(void);
int mrv_start_watch(int sock);
void mrv_wake_fd(int fd);
void mrv_track_cq(struct mrv_cq *q, int add);
void mrv_track_context(struct mrv_context *x, int add);
/* Queue an asynchronous event on every open context and wake its
 * async_fd; pop one (0 if none) for ibv_get_async_event. */
void mrv_post_async_all(enum ibv_event_type t);
int mrv_pop_async(struct mrv_context *x, enum ibv_event_type *t);

/* port.c: the port's state follows the host's links (the doorbell page's
 * ports_up word); a thread turns changes into port events. */
int mrv_port_active(void);
int mrv_start_portwatch(void);

#endif
