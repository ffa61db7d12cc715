/*
 * session.c: the endpoint session, devices, contexts and queries.
 *
 * A process holds one session with its host's verbs endpoint (the abstract
 * socket "\0mrlab-verbs" of the network namespace it runs in), opened by
 * the first ibv_get_device_list. The host's NIC appears as one device per
 * transport it speaks: metaroce0 first (so programs that take the first
 * device use MetaRoCE), then rocev2_0.
 */
#include "mrv.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct mrv_session mrv_s = {.sock = -1, .dbfd = -1, .mu = PTHREAD_MUTEX_INITIALIZER};
struct mrv_qp *mrv_qps[MRV_MAX_QPS];

static struct mrv_device devs[2];
static int ndevs = -1;

void mrv_log(const char *fmt, ...) {
	static int on = -1;
	if (on < 0) {
		const char *v = getenv("MRLAB_IBVERBS_DEBUG");
		on = v && *v && strcmp(v, "0") != 0;
	}
	if (!on)
		return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "mrlab-ibverbs: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* mrv_errno maps an endpoint status to the errno a provider would give. */
int mrv_errno(uint32_t code) {
	switch (code) {
	case MV_OK: return 0;
	case MV_NO_OBJECT: case MV_INVALID: return EINVAL;
	case MV_LIMIT: return ENOMEM;
	case MV_BUSY: return EBUSY;
	case MV_CONN_FAILED: return ECONNREFUSED;
	case MV_BAD_MEMORY: return EFAULT;
	case MV_NO_TRANSPORT: return EOPNOTSUPP;
	case MV_NOT_PERMITTED: return EPERM;
	default: return EIO;
	}
}

void *mrv_map(int fd, size_t size) {
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

static int sendreq(uint16_t op, uint32_t seq, const void *req, uint32_t len, int fd_in) {
	uint8_t msg[MV_MAX_MESSAGE];
	struct mv_hdr h = {op, 0, seq, 0, len};
	memcpy(msg, &h, sizeof h);
	if (len)
		memcpy(msg + sizeof h, req, len);
	struct iovec iov = {msg, sizeof h + len};
	union { struct cmsghdr c; char buf[CMSG_SPACE(sizeof(int))]; } ctl;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	if (fd_in >= 0) {
		memset(&ctl, 0, sizeof ctl);
		m.msg_control = ctl.buf;
		m.msg_controllen = sizeof ctl.buf;
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd_in, sizeof(int));
	}
	return sendmsg(mrv_s.sock, &m, MSG_NOSIGNAL) < 0 ? -1 : 0;
}

/* settle records the outcome of a CONNECT or ACCEPT sent earlier. */
static void settle(struct mv_hdr *h, const uint8_t *body) {
	for (int i = 0; i < MRV_MAX_QPS; i++) {
		struct mrv_qp *q = mrv_qps[i];
		if (!q || q->pend_seq != h->seq)
			continue;
		q->pend_seq = 0;
		if (h->status != MV_OK)
			mrv_log("QP %u: connection failed: %.*s", q->qpx.qp_base.qp_num, (int)h->len, body);
		else
			mrv_log("QP %u: connected", q->qpx.qp_base.qp_num);
		return;
	}
}

uint32_t mrv_send(uint16_t op, const void *req, uint32_t len) {
	uint32_t seq = ++mrv_s.seq;
	if (sendreq(op, seq, req, len, -1) < 0)
		return 0;
	return seq;
}

uint32_t mrv_call(uint16_t op, const void *req, uint32_t len, int fd_in, void *body, uint32_t cap, int fds[2]) {
	uint32_t seq = ++mrv_s.seq;
	if (mrv_s.sock < 0 || mrv_is_dead())
		return MV_SHUTDOWN;
	if (sendreq(op, seq, req, len, fd_in) < 0) {
		if (mrv_s.up)
			mrv_lost();
		return MV_SHUTDOWN;
	}
	for (;;) {
		uint8_t msg[MV_MAX_MESSAGE];
		union { struct cmsghdr c; char buf[CMSG_SPACE(2 * sizeof(int))]; } ctl;
		struct iovec iov = {msg, sizeof msg};
		struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
		ssize_t n = recvmsg(mrv_s.sock, &m, MSG_CMSG_CLOEXEC);
		if (n < (ssize_t)sizeof(struct mv_hdr)) {
			if (n < 0 && errno == EINTR)
				continue;
			mrv_log("the lab's verbs endpoint hung up");
			if (mrv_s.up)
				mrv_lost();
			return MV_SHUTDOWN;
		}
		struct mv_hdr h;
		memcpy(&h, msg, sizeof h);
		int got[2] = {-1, -1}, ngot = 0;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				ngot = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
				if (ngot > 2)
					ngot = 2;
				memcpy(got, CMSG_DATA(c), ngot * sizeof(int));
			}
		if (h.seq != seq) {
			settle(&h, msg + sizeof h);
			for (int i = 0; i < ngot; i++)
				close(got[i]);
			continue;
		}
		if (h.status != MV_OK)
			mrv_log("op %#x failed (%u): %.*s", op, h.status, (int)h.len, msg + sizeof h);
		else if (body)
			memcpy(body, msg + sizeof h, h.len < cap ? h.len : cap);
		for (int i = 0; i < ngot; i++) {
			if (fds)
				fds[i] = got[i];
			else
				close(got[i]);
		}
		return h.status;
	}
}

void mrv_doorbell(void) {
	uint32_t w = mv_load(mrv_s.dbpage, MV_NEED_WAKEUP);
	if (w != 0 && w != __atomic_load_n(&mrv_s.rang, __ATOMIC_RELAXED)) {
		uint64_t one = 1;
		__atomic_store_n(&mrv_s.rang, w, __ATOMIC_RELAXED);
		if (write(mrv_s.dbfd, &one, sizeof one) < 0) {
			/* EAGAIN: a wakeup is pending already */
		}
	}
}

int mrv_open_session(void) {
	if (mrv_s.sock >= 0)
		return 0;
	const char *name = getenv("MRLAB_VERBS_ENDPOINT");
	if (!name || !*name)
		name = MV_SOCKET_NAME;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t nl = strlen(name);
	if (nl + 1 > sizeof sa.sun_path)
		return ENAMETOOLONG;
	memcpy(sa.sun_path + 1, name, nl);
	mrv_s.addr = sa;
	mrv_s.addrlen = offsetof(struct sockaddr_un, sun_path) + 1 + nl;
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return errno;
	if (connect(s, (struct sockaddr *)&sa, mrv_s.addrlen) < 0) {
		int e = errno;
		close(s);
		mrv_log("no verbs endpoint in this network namespace (run the program in a lab host: mrlab exec --ibverbs HOST -- ...)");
		return e;
	}
	mrv_s.sock = s;
	struct mv_hello hello = {MV_VERSION, 0, {0}};
	extern char *program_invocation_short_name;
	snprintf(hello.name, sizeof hello.name, "%s", program_invocation_short_name);
	int fds[2] = {-1, -1};
	uint32_t st = mrv_call(MV_HELLO, &hello, sizeof hello, -1, &mrv_s.hello, sizeof mrv_s.hello, fds);
	if (st != MV_OK || fds[0] < 0 || fds[1] < 0) {
		close(s);
		mrv_s.sock = -1;
		return st == MV_OK ? EPROTO : mrv_errno(st);
	}
	mrv_s.dbpage = mrv_map(fds[0], 4096);
	mrv_s.dbfd = fds[1];
	if (!mrv_s.dbpage || *mv_word(mrv_s.dbpage, 0) != MV_DOORBELL_MAGIC) {
		close(s);
		mrv_s.sock = -1;
		return EPROTO;
	}
	mrv_s.up = 1;
	int e = mrv_start_watch(s);
	if (!e)
		e = mrv_start_portwatch();
	if (e)
		mrv_log("no thread to watch for the lab's death or its links: %s", strerror(e));
	return 0;
}

static void add_dev(int transport, const char *name) {
	struct mrv_device *d = &devs[ndevs++];
	memset(d, 0, sizeof *d);
	d->transport = transport;
	d->dev.node_type = IBV_NODE_CA;
	d->dev.transport_type = IBV_TRANSPORT_IB;
	snprintf(d->dev.name, sizeof d->dev.name, "%s", name);
	snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "uverbs_%s", name);
	snprintf(d->dev.dev_path, sizeof d->dev.dev_path, "/sys/class/infiniband_verbs/uverbs_%s", name);
	snprintf(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "/sys/class/infiniband/%s", name);
	/* EUI-64 style: 02:<transport>:ff:fe + the host's IPv4 address. */
	const uint8_t *a = mrv_s.hello.addr;
	uint64_t g = 0x0200fffe00000000ULL | (uint64_t)transport << 48 |
		     (uint64_t)a[0] << 24 | (uint64_t)a[1] << 16 | (uint64_t)a[2] << 8 | a[3];
	d->guid = htobe64(g);
}

struct ibv_device **get_device_list(int *num) {
	pthread_mutex_lock(&mrv_s.mu);
	if (ndevs < 0 && mrv_open_session() == 0) {
		ndevs = 0;
		if (mrv_s.hello.transports & (1u << MV_TRANSPORT_METAROCE))
			add_dev(MV_TRANSPORT_METAROCE, "metaroce0");
		if (mrv_s.hello.transports & (1u << MV_TRANSPORT_ROCEV2))
			add_dev(MV_TRANSPORT_ROCEV2, "rocev2_0");
	}
	int n = ndevs < 0 ? 0 : ndevs;
	pthread_mutex_unlock(&mrv_s.mu);
	struct ibv_device **l = calloc(n + 1, sizeof *l);
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	for (int i = 0; i < n; i++)
		l[i] = &devs[i].dev;
	if (num)
		*num = n;
	return l;
}
MRV_EXPORT(get_device_list, ibv_get_device_list, "IBVERBS_1.1");

void free_device_list(struct ibv_device **l) { free(l); }
MRV_EXPORT(free_device_list, ibv_free_device_list, "IBVERBS_1.1");

const char *get_device_name(struct ibv_device *d) { return d->name; }
MRV_EXPORT(get_device_name, ibv_get_device_name, "IBVERBS_1.1");

__be64 get_device_guid(struct ibv_device *d) { return ((struct mrv_device *)d)->guid; }
MRV_EXPORT(get_device_guid, ibv_get_device_guid, "IBVERBS_1.1");

int get_device_index(struct ibv_device *d) { return (int)((struct mrv_device *)d - devs); }
MRV_EXPORT(get_device_index, ibv_get_device_index, "IBVERBS_1.9");

struct mrv_device *mrv_dev_of(struct ibv_context *c) { return ((struct mrv_context *)verbs_get_ctx(c))->dev; }

int mrv_unsupported(void) { return EOPNOTSUPP; }

struct ibv_context *open_device(struct ibv_device *d) {
	if (d < &devs[0].dev || d > &devs[1].dev) {
		errno = ENODEV;
		return NULL;
	}
	struct mrv_context *x = calloc(1, sizeof *x);
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	x->dev = (struct mrv_device *)d;
	struct verbs_context *v = &x->vctx;
	struct ibv_context *c = &v->context;
	v->sz = sizeof *v;
	c->abi_compat = __VERBS_ABI_IS_EXTENDED;
	c->device = d;
	c->cmd_fd = -1;
	/* Readable once the lab died: get_async_event then reports
	 * IBV_EVENT_DEVICE_FATAL (death.c). Blocking unless the program sets
	 * O_NONBLOCK, as the kernel's. */
	c->async_fd = eventfd(0, EFD_CLOEXEC);
	c->num_comp_vectors = 1;
	pthread_mutex_init(&c->mutex, NULL);
	c->ops.poll_cq = mrv_poll_cq;
	c->ops.req_notify_cq = mrv_req_notify_cq;
	c->ops.post_send = mrv_post_send;
	c->ops.post_recv = mrv_post_recv;
	c->ops.alloc_mw = (void *)mrv_unsupported;
	c->ops.bind_mw = (void *)mrv_unsupported;
	c->ops.dealloc_mw = (void *)mrv_unsupported;
	c->ops.post_srq_recv = (void *)mrv_unsupported;
	v->query_port = mrv_query_port;
	v->query_device_ex = mrv_query_device_ex;
	v->create_qp_ex = mrv_create_qp_ex;
	/* Left NULL, so verbs.h's inline wrappers fail with EOPNOTSUPP (or
	 * ENOSYS): create_cq_ex, create_srq_ex, open_xrcd, create_flow,
	 * alloc_dm, create_wq, ... */
	mrv_track_context(x, 1);
	return c;
}
MRV_EXPORT(open_device, ibv_open_device, "IBVERBS_1.1");

int close_device(struct ibv_context *c) {
	mrv_track_context((struct mrv_context *)verbs_get_ctx(c), 0);
	if (c->async_fd >= 0)
		close(c->async_fd);
	free(verbs_get_ctx(c));
	return 0;
}
MRV_EXPORT(close_device, ibv_close_device, "IBVERBS_1.1");

/* Asynchronous events: IBV_EVENT_PORT_ERR and IBV_EVENT_PORT_ACTIVE as
 * the host's links go down and come back (port.c), and
 * IBV_EVENT_DEVICE_FATAL once the lab died (death.c). rdma-core's own
 * ibv_get_async_event would read a kernel event record and call the
 * provider's ops, which this context has not. */
int get_async_event(struct ibv_context *c, struct ibv_async_event *ev) {
	struct mrv_context *x = (struct mrv_context *)verbs_get_ctx(c);
	enum ibv_event_type t;
	for (;;) {
		uint64_t v;
		ssize_t n = read(c->async_fd, &v, sizeof v);
		if (n < 0 && errno == EINTR)
			continue;
		if (n != sizeof v)
			return -1; /* EAGAIN on an O_NONBLOCK fd with nothing to read */
		if (mrv_pop_async(x, &t))
			break;
		if (mrv_is_dead()) {
			t = IBV_EVENT_DEVICE_FATAL;
			break;
		}
	}
	memset(ev, 0, sizeof *ev);
	ev->event_type = t;
	ev->element.port_num = t == IBV_EVENT_DEVICE_FATAL ? 0 : 1;
	return 0;
}
MRV_EXPORT(get_async_event, ibv_get_async_event, "IBVERBS_1.1");

void ack_async_event(struct ibv_async_event *ev) { (void)ev; }
MRV_EXPORT(ack_async_event, ibv_ack_async_event, "IBVERBS_1.1");

int mrv_query_device(struct ibv_context *c, struct ibv_device_attr *a) {
	struct mv_hello_reply *h = &mrv_s.hello;
	struct mrv_device *d = mrv_dev_of(c);
	memset(a, 0, sizeof *a);
	snprintf(a->fw_ver, sizeof a->fw_ver, "mrlab-%s", d->transport == MV_TRANSPORT_METAROCE ? "metaroce" : "rocev2");
	a->node_guid = d->guid;
	a->sys_image_guid = d->guid;
	a->max_mr_size = h->max_mr_bytes;
	a->page_size_cap = 4096;
	a->vendor_id = 0;
	a->hw_ver = 1;
	/* Each QP holds one of the endpoint's listeners (its QPN is that
	 * port), so the smaller limit is the QP limit. */
	a->max_qp = h->max_qps < h->max_listeners ? h->max_qps : h->max_listeners;
	if (a->max_qp > MRV_MAX_QPS)
		a->max_qp = MRV_MAX_QPS;
	a->max_qp_wr = h->max_wr;
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT;
	a->max_sge = h->max_sge;
	a->max_sge_rd = h->max_sge;
	a->max_cq = h->max_cqs;
	a->max_cqe = h->max_cqe;
	a->max_mr = h->max_mrs;
	a->max_pd = h->max_pds;
	a->max_qp_rd_atom = 16;
	a->max_qp_init_rd_atom = 16;
	a->max_res_rd_atom = 16 * h->max_qps;
	a->atomic_cap = IBV_ATOMIC_NONE;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 15;
	a->phys_port_cnt = 1;
	return 0;
}
MRV_EXPORT(mrv_query_device, ibv_query_device, "IBVERBS_1.1");

int mrv_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
			struct ibv_device_attr_ex *a, size_t size) {
	if (in && in->comp_mask)
		return EINVAL;
	if (size < sizeof a->orig_attr)
		return EINVAL;
	memset(a, 0, size < sizeof *a ? size : sizeof *a);
	mrv_query_device(c, &a->orig_attr);
	return 0;
}

static enum ibv_mtu mtu_enum(uint32_t mtu) {
	if (mtu >= 4096) return IBV_MTU_4096;
	if (mtu >= 2048) return IBV_MTU_2048;
	if (mtu >= 1024) return IBV_MTU_1024;
	if (mtu >= 512) return IBV_MTU_512;
	return IBV_MTU_256;
}

int mrv_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *out, size_t len) {
	(void)c;
	if (port != 1)
		return EINVAL;
	struct mv_hello_reply *h = &mrv_s.hello;
	struct ibv_port_attr a = {0};
	int up = mrv_port_active(); /* the host's links: DOWN once every plane's is down */
	a.state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
	a.max_mtu = IBV_MTU_4096;
	a.active_mtu = mtu_enum(h->path_mtu);
	a.gid_tbl_len = 1;
	a.port_cap_flags = IBV_PORT_CM_SUP;
	a.max_msg_sz = 1u << 31;
	a.pkey_tbl_len = 1;
	/* A LID for programs that address peers by LID (ibv_rc_pingpong
	 * without -g): the low 16 bits of the host's IPv4 address. */
	a.lid = (uint16_t)(h->addr[2] << 8 | h->addr[3]);
	a.max_vl_num = 1;
	a.active_width = 2; /* 4X */
	/* IB speed codes per lane: 1 2.5G, 2 5G, 4 10G, 16 14G, 32 25G, 64 50G, 128 100G */
	double lane = (double)h->line_rate / 4e9;
	a.active_speed = lane >= 100 ? 128 : lane >= 50 ? 64 : lane >= 25 ? 32 : lane >= 14 ? 16 : lane >= 10 ? 4 : lane >= 5 ? 2 : 1;
	a.phys_state = up ? 5 : 3; /* LinkUp, or Disabled */
	a.link_layer = IBV_LINK_LAYER_ETHERNET;
	memcpy(out, &a, len < sizeof a ? len : sizeof a);
	return 0;
}

int query_port_compat(struct ibv_context *c, uint8_t port, struct ibv_port_attr *out) {
	/* The exported ibv_query_port takes rdma-core's older, shorter struct:
	 * write up to link_layer only. */
	return mrv_query_port(c, port, out, offsetof(struct ibv_port_attr, link_layer) + 1);
}
MRV_EXPORT(query_port_compat, ibv_query_port, "IBVERBS_1.1");

static void gid_of(union ibv_gid *g) {
	memset(g, 0, sizeof *g);
	g->raw[10] = g->raw[11] = 0xff;
	memcpy(&g->raw[12], mrv_s.hello.addr, 4);
}

int query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *g) {
	(void)c;
	if (port != 1 || index != 0) {
		errno = EINVAL;
		return -1;
	}
	gid_of(g);
	return 0;
}
MRV_EXPORT(query_gid, ibv_query_gid, "IBVERBS_1.1");

int query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index, struct ibv_gid_entry *e, uint32_t flags,
			size_t size) {
	(void)c;
	if (flags)
		return EINVAL;
	if (port != 1 || index != 0)
		return ENODATA;
	if (size < sizeof *e)
		return EINVAL;
	memset(e, 0, sizeof *e);
	gid_of(&e->gid);
	e->gid_index = 0;
	e->port_num = 1;
	e->gid_type = IBV_GID_TYPE_ROCE_V2;
	e->ndev_ifindex = 0;
	return 0;
}
MRV_EXPORT(query_gid_ex, _ibv_query_gid_ex, "IBVERBS_1.11");

ssize_t query_gid_table(struct ibv_context *c, struct ibv_gid_entry *e, size_t max, uint32_t flags, size_t size) {
	if (max < 1)
		return -EINVAL;
	int r = query_gid_ex(c, 1, 0, e, flags, size);
	return r ? -r : 1;
}
MRV_EXPORT(query_gid_table, _ibv_query_gid_table, "IBVERBS_1.11");

/* ibv_query_gid_type is private to rdma-core (ibv_devinfo uses it): 1 is
 * IBV_GID_TYPE_SYSFS_ROCE_V2. */
int query_gid_type(struct ibv_context *c, uint8_t port, unsigned int index, int *type) {
	(void)c;
	if (port != 1 || index != 0) {
		errno = EINVAL;
		return -1;
	}
	*type = 1;
	return 0;
}
MRV_EXPORT(query_gid_type, ibv_query_gid_type, "IBVERBS_PRIVATE_34");

int query_pkey(struct ibv_context *c, uint8_t port, int index, __be16 *pkey) {
	(void)c;
	if (port != 1 || index != 0)
		return EINVAL;
	*pkey = htobe16(0xffff);
	return 0;
}
MRV_EXPORT(query_pkey, ibv_query_pkey, "IBVERBS_1.1");

int get_pkey_index(struct ibv_context *c, uint8_t port, __be16 pkey) {
	(void)c;
	return port == 1 && pkey == htobe16(0xffff) ? 0 : -EINVAL;
}
MRV_EXPORT(get_pkey_index, ibv_get_pkey_index, "IBVERBS_1.5");

/* Address handles are for UD QPs, which the lab does not have. */
struct ibv_ah *create_ah(struct ibv_pd *pd, struct ibv_ah_attr *a) {
	(void)pd, (void)a;
	errno = EOPNOTSUPP;
	return NULL;
}
MRV_EXPORT(create_ah, ibv_create_ah, "IBVERBS_1.1");

struct ibv_ah *create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port) {
	(void)pd, (void)wc, (void)grh, (void)port;
	errno = EOPNOTSUPP;
	return NULL;
}
MRV_EXPORT(create_ah_from_wc, ibv_create_ah_from_wc, "IBVERBS_1.1");

int destroy_ah(struct ibv_ah *ah) { (void)ah; return EINVAL; }
MRV_EXPORT(destroy_ah, ibv_destroy_ah, "IBVERBS_1.1");

int attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) {
	(void)qp, (void)gid, (void)lid;
	return EOPNOTSUPP;
}
MRV_EXPORT(attach_mcast, ibv_attach_mcast, "IBVERBS_1.1");
MRV_EXPORT(attach_mcast, ibv_detach_mcast, "IBVERBS_1.1");

struct ibv_srq *create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a) {
	(void)pd, (void)a;
	errno = EOPNOTSUPP;
	return NULL;
}
MRV_EXPORT(create_srq, ibv_create_srq, "IBVERBS_1.1");

int destroy_srq(struct ibv_srq *s) { (void)s; return EINVAL; }
MRV_EXPORT(destroy_srq, ibv_destroy_srq, "IBVERBS_1.1");

int modify_srq(struct ibv_srq *s, struct ibv_srq_attr *a, int mask) {
	(void)s, (void)a, (void)mask;
	return EOPNOTSUPP;
}
MRV_EXPORT(modify_srq, ibv_modify_srq, "IBVERBS_1.1");
MRV_EXPORT(modify_srq, ibv_query_srq, "IBVERBS_1.1");

int resize_cq(struct ibv_cq *cq, int cqe) {
	(void)cq, (void)cqe;
	return EOPNOTSUPP;
}
MRV_EXPORT(resize_cq, ibv_resize_cq, "IBVERBS_1.1");

int rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len, int access) {
	(void)mr, (void)flags, (void)pd, (void)addr, (void)len, (void)access;
	errno = EOPNOTSUPP;
	return IBV_REREG_MR_ERR_INPUT;
}
MRV_EXPORT(rereg_mr, ibv_rereg_mr, "IBVERBS_1.1");

/* Protection domains. */
struct ibv_pd *alloc_pd(struct ibv_context *c) {
	struct mrv_pd *p = calloc(1, sizeof *p);
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	struct mv_handle r;
	pthread_mutex_lock(&mrv_s.mu);
	uint32_t st = mrv_call(MV_ALLOC_PD, NULL, 0, -1, &r, sizeof r, NULL);
	pthread_mutex_unlock(&mrv_s.mu);
	if (st != MV_OK) {
		free(p);
		errno = mrv_errno(st);
		return NULL;
	}
	p->h = r.handle;
	p->pd.context = c;
	p->pd.handle = r.handle;
	return &p->pd;
}
MRV_EXPORT(alloc_pd, ibv_alloc_pd, "IBVERBS_1.1");

int dealloc_pd(struct ibv_pd *pd) {
	struct mrv_pd *p = (struct mrv_pd *)pd;
	struct mv_handle r = {p->h, 0};
	pthread_mutex_lock(&mrv_s.mu);
	uint32_t st = mrv_call(MV_DEALLOC_PD, &r, sizeof r, -1, NULL, 0, NULL);
	pthread_mutex_unlock(&mrv_s.mu);
	if (st != MV_OK)
		return mrv_errno(st);
	free(p);
	return 0;
}
MRV_EXPORT(dealloc_pd, ibv_dealloc_pd, "IBVERBS_1.1");
