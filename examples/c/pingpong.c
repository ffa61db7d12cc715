/*
 * pingpong.c: a client of examples/pingpong's server, in C, speaking the
 * verbs endpoint ABI directly (mrlab_verbs.h, docs/verbs-abi.md). It bounces
 * SIZE bytes off the server N times with SEND/RECV and checks every echoed
 * byte.
 *
 *	cc -O2 -o pingpong-c pingpong.c
 *	sudo mrlab exec h4 -- pingpong --listen
 *	sudo mrlab exec h0 -- ./pingpong-c 198.18.1.1 18516 64 1000
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "mrlab_verbs.h"

static int sock, dbfd = -1;
static uint8_t *dbpage;
static uint32_t seq, rang;
static struct sockaddr_un sa = {.sun_family = AF_UNIX};
static socklen_t salen;

static void die(const char *what) {
	fprintf(stderr, "pingpong-c: %s\n", what);
	exit(1);
}

/* gone reports why the endpoint closed the session and exits: if nothing
 * listens on its name any more, the lab process is gone (the kernel closed
 * its sockets when it exited or was killed). */
static void gone(void) {
	const char *stopped = "the lab stopped: its verbs endpoint in this host is gone (the lab process exited or was killed)";
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		die("the endpoint closed this session");
	if (connect(s, (struct sockaddr *)&sa, salen) < 0)
		die(stopped);
	/* A dying lab's kernel closes its descriptors one by one: its listener
	 * may take this probe just before it goes, then hang up on it. A live
	 * endpoint keeps the probe open, waiting for its HELLO. */
	struct pollfd p = {s, POLLIN | POLLRDHUP, 0};
	if (poll(&p, 1, 200) > 0)
		die(stopped);
	die("the endpoint closed this session (the lab is stopping, or it refused this process)");
}

/* check_endpoint returns while the endpoint still serves this client. A
 * client that spins on its rings calls it about once a millisecond: the
 * lab's death shows only on the control socket (EOF), never in the
 * shared rings, which simply stop moving. An event-driven client polls
 * the socket together with the CQ's eventfd instead. */
static void check_endpoint(void) {
	struct pollfd p = {sock, POLLIN | POLLRDHUP, 0};
	if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)))
		gone();
}

/* call sends one request (with fd_in if >= 0) and reads its reply into
 * body; received descriptors go to fds. It returns the reply's status. */
static uint32_t call(uint16_t op, const void *req, uint32_t len, int fd_in, void *body, uint32_t cap, int *fds) {
	uint8_t msg[MV_MAX_MESSAGE];
	struct mv_hdr h = {op, 0, ++seq, 0, len};
	memcpy(msg, &h, sizeof h);
	memcpy(msg + sizeof h, req, len);
	struct iovec iov = {msg, sizeof h + len};
	union { struct cmsghdr c; char buf[CMSG_SPACE(2 * sizeof(int))]; } ctl;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	if (fd_in >= 0) {
		m.msg_control = ctl.buf;
		m.msg_controllen = CMSG_SPACE(sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd_in, sizeof(int));
	}
	if (sendmsg(sock, &m, MSG_NOSIGNAL) < 0) {
		if (errno == EPIPE || errno == ECONNRESET)
			gone();
		die("sendmsg");
	}
	iov.iov_len = sizeof msg;
	m.msg_control = ctl.buf;
	m.msg_controllen = sizeof ctl.buf;
	ssize_t n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
	if (n == 0)
		gone();
	if (n < (ssize_t)sizeof h)
		die("the endpoint sent a short reply");
	memcpy(&h, msg, sizeof h);
	if (h.seq != seq || h.op != (op | MV_REPLY_BIT))
		die("unexpected reply");
	if (h.status != MV_OK) {
		fprintf(stderr, "pingpong-c: op %d failed (%u): %.*s\n", op, h.status, (int)h.len, msg + sizeof h);
		exit(1);
	}
	memcpy(body, msg + sizeof h, h.len < cap ? h.len : cap);
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c && fds; c = CMSG_NXTHDR(&m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			memcpy(fds, CMSG_DATA(c), c->cmsg_len - CMSG_LEN(0));
	return h.status;
}

static uint8_t *map(int fd, size_t size) {
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		die("mmap");
	close(fd);
	return p;
}

/* doorbell tells the lab about new work while its loop sleeps. */
static void doorbell(void) {
	uint32_t w = mv_load(dbpage, MV_NEED_WAKEUP);
	if (w != 0 && w != rang) {
		uint64_t one = 1;
		rang = w;
		if (write(dbfd, &one, sizeof one) < 0 && errno != EAGAIN)
			die("doorbell");
	}
}

static struct mv_ring sq, rq, cq;
static uint32_t sq_prod, rq_prod, cq_cons;

static void post(struct mv_ring *r, uint32_t *prod, struct mv_wqe *w) {
	memcpy(mv_entry(r, *prod), w, sizeof *w);
	mv_store(r->mem, MV_PRODUCER, ++*prod);
	doorbell();
}

static double now_us(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* next_recv polls the CQ until a receive completes, checking that the lab
 * still runs once a millisecond while nothing arrives. */
static struct mv_cqe next_recv(void) {
	for (;;) {
		double checked = now_us();
		while (mv_load(cq.mem, MV_PRODUCER) == cq_cons) {
			sched_yield();
			double t = now_us();
			if (t - checked >= 1000) {
				check_endpoint();
				checked = t;
			}
		}
		struct mv_cqe e;
		memcpy(&e, mv_entry(&cq, cq_cons), sizeof e);
		mv_store(cq.mem, MV_CONSUMER, ++cq_cons);
		if (e.status != MV_WC_SUCCESS) {
			fprintf(stderr, "pingpong-c: opcode %d completed with status %d\n", e.opcode, e.status);
			exit(1);
		}
		if (e.opcode == MV_WC_RECV || e.opcode == MV_WC_RECV_IMM)
			return e;
	}
}


static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv) {
	if (argc != 5)
		die("usage: pingpong-c ADDR PORT SIZE N");
	struct mv_connect conn = {0};
	if (inet_pton(AF_INET, argv[1], conn.addr) != 1)
		die("bad address");
	conn.port = (uint16_t)atoi(argv[2]);
	uint32_t size = (uint32_t)atoi(argv[3]), n = (uint32_t)atoi(argv[4]);
	if (size < 1 || size > 2048 || n < 1)
		die("SIZE must be 1..2048, N at least 1");

	const char *name = getenv("MRLAB_VERBS_ENDPOINT");
	if (!name || !*name)
		name = MV_SOCKET_NAME;
	size_t nl = strlen(name);
	if (nl + 1 > sizeof sa.sun_path)
		die("endpoint name too long");
	memcpy(sa.sun_path + 1, name, nl); /* abstract: leading NUL */
	salen = offsetof(struct sockaddr_un, sun_path) + 1 + nl;
	sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (sock < 0 || connect(sock, (struct sockaddr *)&sa, salen) < 0)
		die("no verbs endpoint here: run in a lab host (mrlab exec HOST -- ...)");

	struct mv_hello hello = {MV_VERSION, 0, "pingpong-c"};
	struct mv_hello_reply hr;
	int fds[2] = {-1, -1};
	call(MV_HELLO, &hello, sizeof hello, -1, &hr, sizeof hr, fds);
	dbpage = map(fds[0], 4096);
	dbfd = fds[1];
	if (*mv_word(dbpage, 0) != MV_DOORBELL_MAGIC)
		die("bad doorbell page");

	struct mv_handle pd;
	call(MV_ALLOC_PD, NULL, 0, -1, &pd, sizeof pd, NULL);

	/* Registered memory: [0,40) our hello, [64,104) the server's, then
	 * SIZE bytes to send at 4096 and SIZE bytes landing at 6144. */
	int mfd = memfd_create("pingpong-c", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (mfd < 0 || ftruncate(mfd, 8192) < 0 || fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) < 0)
		die("memfd");
	uint8_t *mem = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (mem == MAP_FAILED)
		die("mmap");
	struct mv_reg_mr reg = {pd.handle, MV_ACCESS_LOCAL_WRITE | MV_ACCESS_REMOTE_WRITE, 0, 8192};
	struct mv_reg_mr_reply mr;
	call(MV_REG_MR, &reg, sizeof reg, mfd, &mr, sizeof mr, NULL);
	close(mfd);

	struct mv_create_cq ccq = {32, 0};
	struct mv_create_cq_reply cr;
	call(MV_CREATE_CQ, &ccq, sizeof ccq, -1, &cr, sizeof cr, fds);
	cq = (struct mv_ring){map(fds[0], cr.size), cr.entries, sizeof(struct mv_cqe)};
	close(fds[1]); /* the CQ's event channel: this client polls */

	struct mv_create_qp cqp = {pd.handle, cr.cq, cr.cq, MV_TRANSPORT_DEFAULT, {0}, 8, 8};
	struct mv_create_qp_reply qr;
	call(MV_CREATE_QP, &cqp, sizeof cqp, -1, &qr, sizeof qr, fds);
	uint8_t *qmem = map(fds[0], qr.size);
	sq = (struct mv_ring){qmem + qr.sq_offset, qr.sq_entries, sizeof(struct mv_wqe)};
	rq = (struct mv_ring){qmem + qr.rq_offset, qr.rq_entries, sizeof(struct mv_wqe)};

	/* Receives first: the server's hello, then two landing buffers. */
	struct mv_wqe w = {.num_sge = 1, .sge = {{mr.addr + 64, 40, mr.lkey}}};
	post(&rq, &rq_prod, &w);
	struct mv_wqe land = {.wr_id = 1, .num_sge = 1, .sge = {{mr.addr + 6144, size, mr.lkey}}};
	post(&rq, &rq_prod, &land);
	post(&rq, &rq_prod, &land);

	conn.qp = qr.qp;
	struct mv_connect_reply connr;
	call(MV_CONNECT, &conn, sizeof conn, -1, &connr, sizeof connr, NULL);

	/* Our hello: magic, SEND mode, size, n. */
	uint32_t magic = 0x50504e47, mode = 0;
	uint64_t sz = size, cnt = n;
	memset(mem, 0, 40);
	memcpy(mem, &magic, 4);
	memcpy(mem + 4, &mode, 4);
	memcpy(mem + 8, &sz, 8);
	memcpy(mem + 16, &cnt, 8);
	struct mv_wqe hs = {.opcode = MV_WR_SEND, .num_sge = 1, .sge = {{mr.addr, 40, mr.lkey}}};
	post(&sq, &sq_prod, &hs);
	next_recv(); /* the server's hello */

	double *lat = calloc(n, sizeof *lat);
	struct mv_wqe ping = {.opcode = MV_WR_SEND, .num_sge = 1, .sge = {{mr.addr + 4096, size, mr.lkey}}};
	for (uint32_t i = 0; i < n; i++) {
		for (uint32_t j = 0; j < size; j++)
			mem[4096 + j] = (uint8_t)(i * 131 + j * 7 + 1);
		double t0 = now_us();
		ping.wr_id = i;
		post(&sq, &sq_prod, &ping);
		struct mv_cqe e = next_recv();
		lat[i] = (now_us() - t0) / 2;
		post(&rq, &rq_prod, &land);
		if (e.byte_len != size)
			die("echo of the wrong length");
		for (uint32_t j = 0; j < size; j++)
			if (mem[6144 + j] != (uint8_t)(i * 131 + j * 7 + 1))
				die("the echo differs from what was sent");
	}
	qsort(lat, n, sizeof *lat, cmp);
	printf("pingpong-c: %u round trips of %u bytes with %s (%d.%d.%d.%d), one-way min %.2f us, median %.2f us\n",
	       n, size, hr.host, hr.addr[0], hr.addr[1], hr.addr[2], hr.addr[3], lat[0], lat[n / 2]);
	printf("data verified: %u round trips, every echoed byte checked\n", n);
	return 0;
}
