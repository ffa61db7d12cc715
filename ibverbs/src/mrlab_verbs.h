/*
 * mrlab_verbs.h: the verbs endpoint ABI of a live mrlab lab host, version 1,
 * for C clients (docs/verbs-abi.md is the specification; this header is it
 * in C). Little-endian hosts only, as the ABI is.
 *
 * A client connects a SOCK_SEQPACKET socket to the abstract address
 * "\0mrlab-verbs" in the host's network namespace, sends HELLO, and then
 * creates objects with the control messages below. Work and completion
 * queues are rings in shared memory (struct mv_ring_hdr); posting and
 * polling are atomic loads and stores.
 */
#ifndef MRLAB_VERBS_H
#define MRLAB_VERBS_H

#include <stdint.h>

#define MV_VERSION 1
#define MV_SOCKET_NAME "mrlab-verbs"
#define MV_MAX_MESSAGE 4096
#define MV_REPLY_BIT 0x8000

enum mv_op {
	MV_HELLO = 0x01, MV_ALLOC_PD, MV_DEALLOC_PD, MV_REG_MR, MV_DEREG_MR, MV_CREATE_CQ, MV_DESTROY_CQ,
	MV_CREATE_QP, MV_DESTROY_QP, MV_CONNECT, MV_LISTEN, MV_ACCEPT, MV_STOP_LISTEN, MV_CANCEL,
	MV_WATCH, MV_UNWATCH, MV_QUERY_QP,
};

enum mv_code {
	MV_OK, MV_MALFORMED, MV_VERSION_MISMATCH, MV_NOT_PERMITTED, MV_NO_OBJECT, MV_INVALID, MV_LIMIT,
	MV_BUSY, MV_CONN_FAILED, MV_CANCELED, MV_BAD_MEMORY, MV_SHUTDOWN, MV_NO_TRANSPORT,
};

enum { MV_ACCESS_LOCAL_WRITE = 1, MV_ACCESS_REMOTE_WRITE = 2, MV_ACCESS_REMOTE_READ = 4 };
enum { MV_TRANSPORT_DEFAULT = 0, MV_TRANSPORT_METAROCE = 1, MV_TRANSPORT_ROCEV2 = 2 };
enum { MV_QP_RESET, MV_QP_CONNECTING, MV_QP_ESTABLISHED, MV_QP_CLOSED, MV_QP_ERROR };

/* Work request and completion opcodes. */
enum {
	MV_WR_WRITE = 1, MV_WR_WRITE_IMM, MV_WR_SEND, MV_WR_SEND_IMM, MV_WR_READ,
	MV_WC_RECV, MV_WC_RECV_IMM,
};

/* Completion statuses. */
enum {
	MV_WC_SUCCESS, MV_WC_LOC_PROT, MV_WC_REM_ACCESS, MV_WC_REM_INVALID_REQ, MV_WC_RNR_RETRY_EXC,
	MV_WC_RETRY_EXC, MV_WC_FLUSHED, MV_WC_LOC_LEN, MV_WC_LOC_QP_OP, MV_WC_GENERAL,
};

struct mv_hdr {
	uint16_t op;
	uint16_t flags;
	uint32_t seq;
	uint32_t status;
	uint32_t len;
};

struct mv_hello { uint32_t version, reserved; char name[32]; };
struct mv_hello_reply {
	uint32_t version, client_id;
	uint8_t addr[4];
	uint32_t path_mtu, ports, reserved;
	uint64_t line_rate;
	char host[32];
	uint32_t max_mrs, max_qps, max_cqs, max_cqe, max_wr, max_sge, max_listeners, max_backlog;
	uint64_t max_mr_bytes;
	uint32_t transports, max_pds;
};
struct mv_handle { uint32_t handle, reserved; };  /* ALLOC_PD reply; DEALLOC_PD, DESTROY_*, DEREG_MR, STOP_LISTEN, CANCEL requests */
struct mv_reg_mr { uint32_t pd, access; uint64_t offset, length; };
struct mv_reg_mr_reply { uint32_t lkey, rkey; uint64_t addr; };
struct mv_create_cq { uint32_t entries, reserved; };
struct mv_create_cq_reply { uint32_t cq, entries; uint64_t size; };
struct mv_create_qp { uint32_t pd, send_cq, recv_cq; uint8_t transport, reserved[3]; uint32_t max_send, max_recv; };
struct mv_create_qp_reply { uint32_t qp, sq_entries, rq_entries, reserved; uint64_t sq_offset, rq_offset, size; };
struct mv_connect { uint32_t qp; uint8_t addr[4]; uint16_t port; uint8_t reserved[6]; };
struct mv_connect_reply { uint32_t conn_id; uint8_t peer[4]; uint16_t port; uint8_t transport, reserved[5]; };
struct mv_listen { uint32_t pd; uint16_t port, backlog; };
struct mv_accept { uint32_t listener, qp; };
struct mv_unwatch_reply {
	uint64_t lab_ns, wall_ns, max_late_ns, events, events_late;
	uint8_t lagging, reserved[3];
	uint32_t limit_ppm;
};

/* Shared memory. */
#define MV_RING_HDR 256
#define MV_PRODUCER 0
#define MV_CONSUMER 64
#define MV_FLAG 128        /* send ring: QP state; CQ ring: armed */
#define MV_CQ_OVERRUN 192
#define MV_NEED_WAKEUP 64  /* in the doorbell page */
#define MV_DOORBELL_MAGIC 0x4256524dU

struct mv_sge { uint64_t addr; uint32_t length, lkey; };
struct mv_wqe {
	uint64_t wr_id;
	uint8_t opcode, num_sge;
	uint16_t stream;
	uint32_t imm;
	uint64_t remote_addr;
	uint32_t rkey, reserved;
	struct mv_sge sge[4];
	uint8_t reserved2[32];
};
struct mv_cqe {
	uint64_t wr_id;
	uint32_t qp;
	uint8_t opcode, status;
	uint16_t flags;
	uint32_t byte_len, imm;
	uint16_t stream;
	uint8_t reserved[6];
};

_Static_assert(sizeof(struct mv_hdr) == 16, "header");
_Static_assert(sizeof(struct mv_hello) == 40, "HELLO");
_Static_assert(sizeof(struct mv_hello_reply) == 112, "HELLO reply");
_Static_assert(sizeof(struct mv_reg_mr) == 24, "REG_MR");
_Static_assert(sizeof(struct mv_create_qp) == 24, "CREATE_QP");
_Static_assert(sizeof(struct mv_create_qp_reply) == 40, "CREATE_QP reply");
_Static_assert(sizeof(struct mv_connect) == 16, "CONNECT");
struct mv_query_qp_reply {
	uint32_t state, conn_id;
	uint8_t transport, reserved[7];
	uint64_t tx_packets, rx_packets, retransmits, timeouts, ecn_echoes, ce_received;
};
_Static_assert(sizeof(struct mv_unwatch_reply) == 48, "UNWATCH reply");
_Static_assert(sizeof(struct mv_query_qp_reply) == 64, "QUERY_QP reply");
_Static_assert(sizeof(struct mv_wqe) == 128, "WQE");
_Static_assert(sizeof(struct mv_cqe) == 32, "CQE");

/* A ring: mem points at its header; entries is a power of two. */
struct mv_ring { uint8_t *mem; uint32_t entries, esize; };

static inline uint32_t *mv_word(uint8_t *mem, int off) { return (uint32_t *)(mem + off); }
static inline uint32_t mv_load(uint8_t *mem, int off) { return __atomic_load_n(mv_word(mem, off), __ATOMIC_SEQ_CST); }
static inline void mv_store(uint8_t *mem, int off, uint32_t v) { __atomic_store_n(mv_word(mem, off), v, __ATOMIC_SEQ_CST); }
static inline void *mv_entry(struct mv_ring *r, uint32_t i) {
	return r->mem + MV_RING_HDR + (i & (r->entries - 1)) * r->esize;
}

#endif
