/*
 * selftest.c: libmrlab-ibverbs's own checks, through the public ibverbs API
 * only (built against rdma-core's header and libibverbs, run with the
 * library preloaded, as every program is). Run the server in one lab host
 * and the client in another:
 *
 *	cc -o selftest selftest.c -libverbs
 *	mrlab exec --ibverbs h2 -- ./selftest [-d rocev2_0]
 *	mrlab exec --ibverbs h0 -- ./selftest [-d rocev2_0] 198.18.1.1
 *
 * Each check prints "ok NAME" or "FAIL NAME: why"; the exit status is the
 * number of failures. The server exposes one buffer for WRITE and READ and
 * answers SENDs; the client drives the error cases: QP state errors, bad
 * lkey and rkey (the QP goes to ERROR as on a NIC), posting on a QP in
 * ERROR (flushed), modify to ERROR with receives posted (flushed), the
 * verbs the lab's NIC does not have (EOPNOTSUPP), and rnr_retry (a
 * count, or 7 for forever, against a receive posted late).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PORT 18600
#define SIZE 65536
#define NQP 6 /* 4 and 5: the RNR checks */

static int fails;
static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static char *buf;

static void check(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(int ok, const char *name, const char *fmt, ...) {
	if (ok) {
		printf("ok %s\n", name);
		return;
	}
	va_list ap;
	va_start(ap, fmt);
	printf("FAIL %s: ", name);
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fails++;
}

struct dest { uint32_t qpn[NQP]; uint64_t addr; uint32_t rkey; union ibv_gid gid; };

static struct ibv_qp *new_qp(void) {
	struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
	return ibv_create_qp(pd, &a);
}

static int to_init(struct ibv_qp *qp) {
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int to_rts(struct ibv_qp *qp, union ibv_gid *gid, uint32_t qpn, int rnr_retry) {
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = qpn, .max_dest_rd_atomic = 1,
				.min_rnr_timer = 12, .ah_attr = {.is_global = 1, .port_num = 1, .grh = {.dgid = *gid, .hop_limit = 1}}};
	int e = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (e)
		return e;
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = rnr_retry;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					 IBV_QP_MAX_QP_RD_ATOMIC);
}

/* wait polls until a completion arrives (30 s at most). */
static int wait(struct ibv_wc *wc) {
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 30)
			return 0;
	}
}

static int post(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t id, uint32_t lkey, uint64_t raddr, uint32_t rkey) {
	struct ibv_sge sge = {(uintptr_t)buf, 4096, lkey};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {raddr, rkey}}, *bad;
	return ibv_post_send(qp, &wr, &bad);
}

static void local_checks(void) {
	struct ibv_qp *qp = new_qp();
	check(qp != NULL, "create RC QP", "errno %d", errno);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR};
	check(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, "RESET to RTR refused", "-");
	struct ibv_sge sge = {(uintptr_t)buf, 8, mr->lkey};
	struct ibv_recv_wr rw = {.sg_list = &sge, .num_sge = 1}, *rbad;
	check(ibv_post_recv(qp, &rw, &rbad) == EINVAL, "post_recv in RESET refused", "-");
	check(to_init(qp) == 0, "RESET to INIT", "-");
	check(post(qp, IBV_WR_SEND, 1, mr->lkey, 0, 0) == EINVAL, "post_send in INIT refused", "-");
	check(ibv_post_recv(qp, &rw, &rbad) == 0, "post_recv in INIT", "-");
	a.qp_state = IBV_QPS_RTS;
	check(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, "INIT to RTS refused", "-");
	a.qp_state = IBV_QPS_ERR;
	check(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "INIT to ERROR", "-");
	struct ibv_wc wc;
	check(wait(&wc) == 1 && wc.status == IBV_WC_WR_FLUSH_ERR && wc.opcode == IBV_WC_RECV, "receive flushed on ERROR",
	      "status %d opcode %d", wc.status, wc.opcode);
	check(ibv_destroy_qp(qp) == 0, "destroy QP", "-");

	struct ibv_qp_init_attr ud = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD, .cap = {1, 1, 1, 1, 0}};
	errno = 0;
	check(!ibv_create_qp(pd, &ud) && errno == EOPNOTSUPP, "UD QP refused with EOPNOTSUPP", "errno %d", errno);
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
	errno = 0;
	check(!ibv_create_srq(pd, &sa) && errno == EOPNOTSUPP, "SRQ refused with EOPNOTSUPP", "errno %d", errno);
	errno = 0;
	check(!ibv_reg_mr(pd, buf, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC) && errno == EOPNOTSUPP,
	      "atomic access refused with EOPNOTSUPP", "errno %d", errno);
	struct ibv_qp_init_attr_ex x = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .cap = {4, 4, 1, 1, 0},
					.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
					.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD};
	errno = 0;
	check(!ibv_create_qp_ex(ctx, &x) && errno == EOPNOTSUPP, "atomic send ops refused with EOPNOTSUPP", "errno %d", errno);
	struct ibv_cq_init_attr_ex cx = {.cqe = 4};
	errno = 0;
	check(!ibv_create_cq_ex(ctx, &cx) && errno == EOPNOTSUPP, "ibv_create_cq_ex refused with EOPNOTSUPP", "errno %d", errno);
	/* The QP limit: max_qp QPs, then ENOMEM (not a crash); all destroyed. */
	struct ibv_device_attr da;
	check(ibv_query_device(ctx, &da) == 0 && da.max_qp >= 128, "max_qp at least 128", "max_qp %d", da.max_qp);
	struct ibv_cq *bigcq = ibv_create_cq(ctx, 2 * da.max_qp + 16, NULL, NULL, 0);
	struct ibv_qp **many = calloc(da.max_qp + 1, sizeof *many);
	int made = 0;
	errno = 0;
	while (bigcq && made <= da.max_qp) {
		struct ibv_qp_init_attr ma = {.send_cq = bigcq, .recv_cq = bigcq, .qp_type = IBV_QPT_RC,
					      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
		if (!(many[made] = ibv_create_qp(pd, &ma)))
			break;
		made++;
	}
	check(made == da.max_qp && errno == ENOMEM, "QP past max_qp refused with ENOMEM", "made %d of max_qp %d, errno %d", made,
	      da.max_qp, errno);
	int destroyed = 0;
	for (int i = 0; i < made; i++)
		destroyed += ibv_destroy_qp(many[i]) == 0;
	check(destroyed == made && bigcq && ibv_destroy_cq(bigcq) == 0, "QPs at the limit destroyed", "%d of %d", destroyed, made);
	free(many);
	union ibv_gid g;
	check(ibv_query_gid(ctx, 1, 1, &g) != 0, "GID index 1 absent", "-");
	check(ibv_query_gid(ctx, 1, 0, &g) == 0 && g.raw[10] == 0xff && g.raw[11] == 0xff, "GID 0 IPv4-mapped", "-");
}

static int tcp(const char *host) {
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(PORT)};
	if (!host) {
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(s, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(s, 1) < 0)
			return -1;
		int c = accept(s, NULL, NULL);
		close(s);
		return c;
	}
	inet_pton(AF_INET, host, &sa.sin_addr);
	for (int i = 0; i < 600; i++) { /* 60 s: the server may start late on a loaded machine */
		if (connect(s, (struct sockaddr *)&sa, sizeof sa) == 0)
			return s;
		usleep(100000);
	}
	return -1;
}

int main(int argc, char **argv) {
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0]) {
		fprintf(stderr, "selftest: no device\n");
		return 100;
	}
	struct ibv_device *dev = l[0];
	if (argc > 2 && strcmp(argv[1], "-d") == 0) { /* -d DEVICE: another than the first */
		for (dev = NULL; *l; l++)
			if (strcmp(ibv_get_device_name(*l), argv[2]) == 0)
				dev = *l;
		if (!dev) {
			fprintf(stderr, "selftest: no device %s\n", argv[2]);
			return 100;
		}
		argc -= 2;
		argv += 2;
	}
	ctx = ibv_open_device(dev);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	buf = malloc(SIZE + 100) + 100; /* not page-aligned, as malloc gives */
	memset(buf, 0x5a, SIZE);
	mr = ibv_reg_mr(pd, buf, SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!ctx || !pd || !cq || !mr) {
		fprintf(stderr, "selftest: setup failed: errno %d\n", errno);
		return 100;
	}
	check(buf[0] == 0x5a && buf[SIZE - 1] == 0x5a, "registration keeps the buffer's bytes", "-");
	int client = argc > 1;
	if (client)
		local_checks();

	struct ibv_qp *qp[NQP];
	struct dest me = {.addr = (uintptr_t)buf, .rkey = mr->rkey}, peer;
	ibv_query_gid(ctx, 1, 0, &me.gid);
	for (int i = 0; i < NQP; i++) {
		qp[i] = new_qp();
		to_init(qp[i]);
		me.qpn[i] = qp[i]->qp_num;
	}
	/* The server's receives for the client's SENDs, posted before RTR. */
	struct ibv_sge rsge = {(uintptr_t)buf + 8192, 4096, mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 77, .sg_list = &rsge, .num_sge = 1}, *rbad;
	if (!client)
		ibv_post_recv(qp[0], &rw, &rbad);
	int s = tcp(client ? argv[1] : NULL);
	if (s < 0 || write(s, &me, sizeof me) != sizeof me || read(s, &peer, sizeof peer) != sizeof peer) {
		fprintf(stderr, "selftest: exchange failed\n");
		return 100;
	}
	for (int i = 0; i < NQP; i++)
		check(to_rts(qp[i], &peer.gid, peer.qpn[i], i == 5 ? 1 : 7) == 0, "INIT to RTR to RTS", "-");
	struct ibv_wc wc;
	char c;
	if (!client) {
		/* Serve: the client's SEND lands; wait for its "done". */
		check(wait(&wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 77 && wc.byte_len == 4096 &&
			      wc.opcode == IBV_WC_RECV && (unsigned char)buf[8192] == 0xc3,
		      "SEND received", "status %d byte_len %u", wc.status, wc.byte_len);
		/* RNR: the client SENDs on QP 4 (rnr_retry 7, forever) and
		 * says so; its receive is posted a second later, thousands of
		 * RNR timers on. QP 5 (rnr_retry 1) never gets one. */
		check(read(s, &c, 1) == 1 && c == 'L', "client's late SEND posted", "-");
		usleep(1000000);
		struct ibv_recv_wr late = {.wr_id = 78, .sg_list = &rsge, .num_sge = 1};
		check(ibv_post_recv(qp[4], &late, &rbad) == 0 && wait(&wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 78,
		      "receive posted 1 s late gets the SEND (rnr_retry 7)", "status %d wr_id %llu", wc.status,
		      (unsigned long long)wc.wr_id);
		check(read(s, &c, 1) == 1, "client done", "-");
		check((unsigned char)buf[0] == 0xa5 && (unsigned char)buf[4095] == 0xa5, "client's WRITE landed", "bytes %#x %#x",
		      (unsigned char)buf[0], (unsigned char)buf[4095]);
		return fails;
	}
	/* WRITE, READ and SEND that work. */
	memset(buf, 0xa5, 4096);
	check(post(qp[0], IBV_WR_RDMA_WRITE, 1, mr->lkey, peer.addr, peer.rkey) == 0 && wait(&wc) == 1 &&
		      wc.status == IBV_WC_SUCCESS && wc.wr_id == 1 && wc.opcode == IBV_WC_RDMA_WRITE,
	      "WRITE", "status %d", wc.status);
	memset(buf, 0, 4096);
	check(post(qp[0], IBV_WR_RDMA_READ, 2, mr->lkey, peer.addr + 4096, peer.rkey) == 0 && wait(&wc) == 1 &&
		      wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ && (unsigned char)buf[0] == 0x5a,
	      "READ brings the peer's bytes", "status %d byte %#x", wc.status, (unsigned char)buf[0]);
	memset(buf, 0xc3, 4096);
	check(post(qp[0], IBV_WR_SEND, 3, mr->lkey, 0, 0) == 0 && wait(&wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      wc.opcode == IBV_WC_SEND,
	      "SEND", "status %d", wc.status);
	/* A bad lkey: local protection error, the QP in ERROR; a later post
	 * is flushed. */
	check(post(qp[1], IBV_WR_RDMA_WRITE, 4, mr->lkey ^ 0x5500, peer.addr, peer.rkey) == 0 && wait(&wc) == 1 &&
		      wc.status == IBV_WC_LOC_PROT_ERR && wc.wr_id == 4,
	      "bad lkey: IBV_WC_LOC_PROT_ERR", "status %d", wc.status);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	check(ibv_query_qp(qp[1], &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_ERR, "QP in ERROR after the error",
	      "state %d", qa.qp_state);
	check(post(qp[1], IBV_WR_RDMA_WRITE, 5, mr->lkey, peer.addr, peer.rkey) == 0 && wait(&wc) == 1 &&
		      wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 5,
	      "post on a QP in ERROR: flushed", "status %d", wc.status);
	/* A bad rkey, and a range past the peer's region: remote access errors. */
	check(post(qp[2], IBV_WR_RDMA_WRITE, 6, mr->lkey, peer.addr, peer.rkey ^ 0x5500) == 0 && wait(&wc) == 1 &&
		      wc.status == IBV_WC_REM_ACCESS_ERR && wc.wr_id == 6,
	      "bad rkey: IBV_WC_REM_ACCESS_ERR", "status %d", wc.status);
	check(post(qp[3], IBV_WR_RDMA_WRITE, 7, mr->lkey, peer.addr + SIZE - 100, peer.rkey) == 0 && wait(&wc) == 1 &&
		      wc.status == IBV_WC_REM_ACCESS_ERR,
	      "WRITE past the peer's region: IBV_WC_REM_ACCESS_ERR", "status %d", wc.status);
	/* An unsupported opcode is refused at post time. */
	check(post(qp[0], IBV_WR_ATOMIC_FETCH_AND_ADD, 8, mr->lkey, peer.addr, peer.rkey) == EINVAL, "atomic post refused", "-");
	/* RNR as ibv_modify_qp sets it: rnr_retry 1 fails once the peer
	 * refuses twice; 7 waits as long as it takes. */
	check(post(qp[5], IBV_WR_SEND, 9, mr->lkey, 0, 0) == 0 && wait(&wc) == 1 && wc.status == IBV_WC_RNR_RETRY_EXC_ERR &&
		      wc.wr_id == 9,
	      "rnr_retry 1, no receive: IBV_WC_RNR_RETRY_EXC_ERR", "status %d wr_id %llu", wc.status, (unsigned long long)wc.wr_id);
	c = 'L';
	check(post(qp[4], IBV_WR_SEND, 10, mr->lkey, 0, 0) == 0 && write(s, &c, 1) == 1 && wait(&wc) == 1 &&
		      wc.status == IBV_WC_SUCCESS && wc.wr_id == 10,
	      "rnr_retry 7: SEND waits for a receive posted 1 s late", "status %d wr_id %llu", wc.status,
	      (unsigned long long)wc.wr_id);
	c = 1;
	check(write(s, &c, 1) == 1, "told the server", "-");
	return fails;
}
