package verbsabi

//go:generate go run gen_cheader.go ../../examples/c/mrlab_verbs.h ../../ibverbs/src/mrlab_verbs.h

import (
	"bytes"
	"fmt"
	"strings"
)

// CHeaderPaths returns the checked-in copies of CHeader's output, relative to
// the repository's root: the C example's and the ibverbs library's (which
// mrlab embeds and builds from its own folder, so it cannot include the
// example's). `go generate ./internal/verbsabi` writes both;
// TestCHeaderUpToDate fails when either differs from CHeader.
func CHeaderPaths() []string {
	return []string{"examples/c/mrlab_verbs.h", "ibverbs/src/mrlab_verbs.h"}
}

// cField is one member of a C struct of the ABI. typ is a key of cTypes;
// n > 0 makes it an array of n.
type cField struct {
	typ, name string
	n         int
}

// cTypes are the C types the ABI's structs use: their spelling, size and
// alignment (x86-64 and aarch64 agree on these).
var cTypes = map[string]struct {
	c           string
	size, align int
}{
	"u8": {"uint8_t", 1, 1}, "u16": {"uint16_t", 2, 2}, "u32": {"uint32_t", 4, 4}, "u64": {"uint64_t", 8, 8},
	"char": {"char", 1, 1}, "sge": {"struct mv_sge", 16, 8},
}

// cBinding ties a C struct to the Go encoder of one message (or entry):
// kind "req" or "reply" with op, "wqe", "cqe" or "hdr"; fields maps a C
// member to the Go field (a dotted path in Request, Reply, WQE or CQE)
// that AppendRequest, AppendReply, PutWQE or PutCQE writes at its offset
// ("" for a member the encoder always writes 0, as reserved ones).
// TestCHeaderLayout checks every one.
type cBinding struct {
	kind   string
	op     Op
	fields map[string]string
}

// cStruct is a struct of the ABI as C declares it.
type cStruct struct {
	name     string
	comment  string
	fields   []cField
	bindings []cBinding
}

func cf(typ string, names ...string) []cField {
	var fs []cField
	for _, n := range names {
		fs = append(fs, cField{typ: typ, name: n})
	}
	return fs
}

func carr(typ, name string, n int) []cField { return []cField{{typ: typ, name: name, n: n}} }

func cfields(groups ...[]cField) []cField {
	var fs []cField
	for _, g := range groups {
		fs = append(fs, g...)
	}
	return fs
}

func creq(op Op, m map[string]string) cBinding   { return cBinding{"req", op, m} }
func creply(op Op, m map[string]string) cBinding { return cBinding{"reply", op, m} }

// cStructs are the ABI's structs in the order the header declares them.
var cStructs = []cStruct{
	{name: "mv_hdr", comment: "every control message's header", fields: cfields(cf("u16", "op", "flags"), cf("u32", "seq", "status", "len")),
		bindings: []cBinding{{kind: "hdr", fields: map[string]string{"op": "Op", "flags": "", "seq": "Seq", "status": "Status", "len": "Len"}}}},
	{name: "mv_hello", fields: cfields(cf("u32", "version", "reserved"), carr("char", "name", NameSize)),
		bindings: []cBinding{creq(OpHello, map[string]string{"version": "Version", "name": "Name"})}},
	{name: "mv_hello_reply", fields: cfields(cf("u32", "version", "client_id"), carr("u8", "addr", 4),
		cf("u32", "path_mtu", "ports", "reserved"), cf("u64", "line_rate"), carr("char", "host", NameSize),
		cf("u32", "max_mrs", "max_qps", "max_cqs", "max_cqe", "max_wr", "max_sge", "max_listeners", "max_backlog"),
		cf("u64", "max_mr_bytes"), cf("u32", "transports", "max_pds")),
		bindings: []cBinding{creply(OpHello, map[string]string{"version": "Version", "client_id": "ClientID",
			"addr": "HostAddr", "path_mtu": "PathMTU", "ports": "Ports", "line_rate": "LineRate", "host": "Host",
			"max_mrs": "Limits.MaxMRs", "max_qps": "Limits.MaxQPs", "max_cqs": "Limits.MaxCQs",
			"max_cqe": "Limits.MaxCQE", "max_wr": "Limits.MaxWR", "max_sge": "Limits.MaxSGE",
			"max_listeners": "Limits.MaxListeners", "max_backlog": "Limits.MaxBacklog",
			"max_mr_bytes": "Limits.MaxMRBytes", "transports": "Transports", "max_pds": "Limits.MaxPDs"})}},
	{name: "mv_handle", comment: "ALLOC_PD, LISTEN and WATCH replies; DEALLOC_PD, DEREG_MR, DESTROY_*, QUERY_QP, STOP_LISTEN, CANCEL and UNWATCH requests",
		fields: cf("u32", "handle", "reserved"),
		bindings: []cBinding{
			creq(OpDeallocPD, map[string]string{"handle": "PD"}), creq(OpDeregMR, map[string]string{"handle": "Key"}),
			creq(OpDestroyCQ, map[string]string{"handle": "CQ"}), creq(OpDestroyQP, map[string]string{"handle": "QP"}),
			creq(OpQueryQP, map[string]string{"handle": "QP"}), creq(OpStopListen, map[string]string{"handle": "Listener"}),
			creq(OpCancel, map[string]string{"handle": "Target"}), creq(OpUnwatch, map[string]string{"handle": "Watch"}),
			creply(OpAllocPD, map[string]string{"handle": "Handle"}), creply(OpListen, map[string]string{"handle": "Handle"}),
			creply(OpWatch, map[string]string{"handle": "Handle"}),
		}},
	{name: "mv_reg_mr", fields: cfields(cf("u32", "pd", "access"), cf("u64", "offset", "length")),
		bindings: []cBinding{creq(OpRegMR, map[string]string{"pd": "PD", "access": "Access", "offset": "Offset", "length": "Length"})}},
	{name: "mv_reg_mr_at", comment: "REG_MR with the region's address chosen by the client (its iova)",
		fields: cfields(cf("u32", "pd", "access"), cf("u64", "offset", "length", "iova")),
		bindings: []cBinding{creq(OpRegMRAt, map[string]string{"pd": "PD", "access": "Access", "offset": "Offset",
			"length": "Length", "iova": "IOVA"})}},
	{name: "mv_reg_mr_reply", comment: "REG_MR and REG_MR_AT replies", fields: cfields(cf("u32", "lkey", "rkey"), cf("u64", "addr")),
		bindings: []cBinding{
			creply(OpRegMR, map[string]string{"lkey": "LKey", "rkey": "RKey", "addr": "MRAddr"}),
			creply(OpRegMRAt, map[string]string{"lkey": "LKey", "rkey": "RKey", "addr": "MRAddr"}),
		}},
	{name: "mv_create_cq", fields: cf("u32", "entries", "reserved"),
		bindings: []cBinding{creq(OpCreateCQ, map[string]string{"entries": "Entries"})}},
	{name: "mv_create_cq_reply", fields: cfields(cf("u32", "cq", "entries"), cf("u64", "size")),
		bindings: []cBinding{creply(OpCreateCQ, map[string]string{"cq": "Handle", "entries": "Entries", "size": "Size"})}},
	{name: "mv_create_qp", fields: cfields(cf("u32", "pd", "send_cq", "recv_cq"), cf("u8", "transport"), carr("u8", "reserved", 3),
		cf("u32", "max_send", "max_recv")),
		bindings: []cBinding{creq(OpCreateQP, map[string]string{"pd": "PD", "send_cq": "SendCQ", "recv_cq": "RecvCQ",
			"transport": "Trans", "max_send": "MaxSend", "max_recv": "MaxRecv"})}},
	{name: "mv_create_qp_reply", fields: cfields(cf("u32", "qp", "sq_entries", "rq_entries", "reserved"),
		cf("u64", "sq_offset", "rq_offset", "size")),
		bindings: []cBinding{creply(OpCreateQP, map[string]string{"qp": "Handle", "sq_entries": "SQEntries",
			"rq_entries": "RQEntries", "sq_offset": "SQOffset", "rq_offset": "RQOffset", "size": "Size"})}},
	{name: "mv_connect", fields: cfields(cf("u32", "qp"), carr("u8", "addr", 4), cf("u16", "port"), carr("u8", "reserved", 6)),
		bindings: []cBinding{creq(OpConnect, map[string]string{"qp": "QP", "addr": "Addr", "port": "Port"})}},
	{name: "mv_connect_reply", comment: "CONNECT and ACCEPT replies",
		fields: cfields(cf("u32", "conn_id"), carr("u8", "peer", 4), cf("u16", "port"), cf("u8", "transport"), carr("u8", "reserved", 5)),
		bindings: []cBinding{
			creply(OpConnect, map[string]string{"conn_id": "ConnID", "peer": "Peer", "port": "Port", "transport": "Trans"}),
			creply(OpAccept, map[string]string{"conn_id": "ConnID", "peer": "Peer", "port": "Port", "transport": "Trans"}),
		}},
	{name: "mv_listen", fields: cfields(cf("u32", "pd"), cf("u16", "port", "backlog")),
		bindings: []cBinding{creq(OpListen, map[string]string{"pd": "PD", "port": "Port", "backlog": "Backlog"})}},
	{name: "mv_accept", fields: cf("u32", "listener", "qp"),
		bindings: []cBinding{creq(OpAccept, map[string]string{"listener": "Listener", "qp": "QP"})}},
	{name: "mv_set_rnr", comment: "SET_RNR: mask says which of rnr_retry (MV_RNR_SET_RETRY) and min_rnr_timer (MV_RNR_SET_TIMER) to apply",
		fields: cfields(cf("u32", "qp"), cf("u8", "rnr_retry", "min_rnr_timer", "mask", "reserved")),
		bindings: []cBinding{creq(OpSetRNR, map[string]string{"qp": "QP", "rnr_retry": "RNRRetry",
			"min_rnr_timer": "RNRTimer", "mask": "RNRMask"})}},
	{name: "mv_unwatch_reply", fields: cfields(cf("u64", "lab_ns", "wall_ns", "max_late_ns", "events", "events_late"),
		cf("u8", "lagging", "loop_starved"), carr("u8", "reserved", 2), cf("u32", "limit_ppm")),
		bindings: []cBinding{creply(OpUnwatch, map[string]string{"lab_ns": "LabNs", "wall_ns": "WallNs",
			"max_late_ns": "MaxLateNs", "events": "Events", "events_late": "EventsLate", "lagging": "Lagging", "loop_starved": "LoopStarved",
			"limit_ppm": "LimitPPM"})}},
	{name: "mv_query_qp_reply", fields: cfields(cf("u32", "state", "conn_id"), cf("u8", "transport"), carr("u8", "reserved", 7),
		cf("u64", "tx_packets", "rx_packets", "retransmits", "timeouts", "ecn_echoes", "ce_received")),
		bindings: []cBinding{creply(OpQueryQP, map[string]string{"state": "QPState", "conn_id": "ConnID",
			"transport": "Trans", "tx_packets": "TxPackets", "rx_packets": "RxPackets", "retransmits": "Retransmits",
			"timeouts": "Timeouts", "ecn_echoes": "ECNEchoes", "ce_received": "CEReceived"})}},
	{name: "mv_sge", comment: "shared memory: one scatter-gather element", fields: cfields(cf("u64", "addr"), cf("u32", "length", "lkey")),
		bindings: []cBinding{{kind: "sge", fields: map[string]string{"addr": "Addr", "length": "Len", "lkey": "LKey"}}}},
	{name: "mv_wqe", comment: "a send or receive work queue entry", fields: cfields(cf("u64", "wr_id"), cf("u8", "opcode", "num_sge"),
		cf("u16", "stream"), cf("u32", "imm"), cf("u64", "remote_addr"), cf("u32", "rkey", "reserved"), carr("sge", "sge", MaxSGE),
		carr("u8", "reserved2", 32)),
		bindings: []cBinding{{kind: "wqe", fields: map[string]string{"wr_id": "ID", "opcode": "Opcode", "num_sge": "NumSGE",
			"stream": "Stream", "imm": "Imm", "remote_addr": "RemoteAddr", "rkey": "RKey"}}}},
	{name: "mv_cqe", comment: "a completion queue entry", fields: cfields(cf("u64", "wr_id"), cf("u32", "qp"), cf("u8", "opcode", "status"),
		cf("u16", "flags"), cf("u32", "byte_len", "imm"), cf("u16", "stream"), carr("u8", "reserved", 6)),
		bindings: []cBinding{{kind: "cqe", fields: map[string]string{"wr_id": "ID", "qp": "QP", "opcode": "Opcode",
			"status": "Status", "flags": "Flags", "byte_len": "Bytes", "imm": "Imm", "stream": "Stream"}}}},
}

// layout returns each member's offset and the struct's size under the C
// rules (each member at a multiple of its alignment, the size a multiple
// of the largest).
func (s *cStruct) layout() (offs []int, size int) {
	maxAlign := 1
	for _, fl := range s.fields {
		t := cTypes[fl.typ]
		size = (size + t.align - 1) &^ (t.align - 1)
		offs = append(offs, size)
		n := max(fl.n, 1)
		size += n * t.size
		maxAlign = max(maxAlign, t.align)
	}
	return offs, (size + maxAlign - 1) &^ (maxAlign - 1)
}

// goSize is the size the Go encoders give the struct's message or entry.
func (b cBinding) goSize() int {
	switch b.kind {
	case "req":
		return reqLayout[b.op].size
	case "reply":
		return replyLayout[b.op].size
	case "wqe":
		return WQESize
	case "cqe":
		return CQESize
	case "hdr":
		return HeaderSize
	case "sge":
		return 16
	}
	return -1
}

// cConst is a named value of the header.
type cConst struct {
	name  string
	value uint64
}

// opCNames are the C names of the ops, indexed by Op.
var opCNames = func() []string {
	names := make([]string, len(opNames))
	for i, n := range opNames {
		if n != "" {
			names[i] = "MV_" + n
		}
	}
	return names
}()

// codeCNames are the C names of the status codes, indexed by Code.
var codeCNames = [numCodes]string{"MV_OK", "MV_MALFORMED", "MV_VERSION_MISMATCH", "MV_NOT_PERMITTED", "MV_NO_OBJECT",
	"MV_INVALID", "MV_LIMIT", "MV_BUSY", "MV_CONN_FAILED", "MV_CANCELED", "MV_BAD_MEMORY", "MV_SHUTDOWN", "MV_NO_TRANSPORT"}

// statusCNames are the C names of the completion statuses, by value.
var statusCNames = [NumStatuses]string{"MV_WC_SUCCESS", "MV_WC_LOC_PROT", "MV_WC_REM_ACCESS", "MV_WC_REM_INVALID_REQ",
	"MV_WC_RNR_RETRY_EXC", "MV_WC_RETRY_EXC", "MV_WC_FLUSHED", "MV_WC_LOC_LEN", "MV_WC_LOC_QP_OP", "MV_WC_GENERAL"}

const cPreamble = `/* Code generated by "go generate ./internal/verbsabi" from the Go package
 * internal/verbsabi (cheader.go); DO NOT EDIT. Both checked-in copies
 * (examples/c/ and ibverbs/src/) are this file; a test fails when either
 * differs from what the Go package generates. */
/*
 * mrlab_verbs.h: the verbs endpoint ABI of a live mrlab lab host, version %d,
 * for C clients (docs/verbs-abi.md is the specification; this header is it
 * in C). Little-endian hosts only, as the ABI is.
 *
 * A client connects a SOCK_SEQPACKET socket to the abstract address
 * "\0%s" in the host's network namespace, sends HELLO, and then
 * creates objects with the control messages below. Work and completion
 * queues are rings in shared memory (a MV_RING_HDR-byte header, then the
 * entries); posting and polling are atomic loads and stores.
 */
#ifndef MRLAB_VERBS_H
#define MRLAB_VERBS_H

#include <stdint.h>

`

const cTrailer = `
/* A ring: mem points at its header; entries is a power of two. */
struct mv_ring { uint8_t *mem; uint32_t entries, esize; };

static inline uint32_t *mv_word(uint8_t *mem, int off) { return (uint32_t *)(mem + off); }
static inline uint32_t mv_load(uint8_t *mem, int off) { return __atomic_load_n(mv_word(mem, off), __ATOMIC_SEQ_CST); }
static inline void mv_store(uint8_t *mem, int off, uint32_t v) { __atomic_store_n(mv_word(mem, off), v, __ATOMIC_SEQ_CST); }
static inline void *mv_entry(struct mv_ring *r, uint32_t i) {
	return r->mem + MV_RING_HDR + (i & (r->entries - 1)) * r->esize;
}

#endif
`

// CHeader returns mrlab_verbs.h, the ABI in C, generated from this
// package's constants and its encoders' layouts. It fails if a struct's C
// layout does not have the size the Go encoder gives its message.
func CHeader() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, cPreamble, Version, SocketName)
	fmt.Fprintf(&b, "#define MV_VERSION %d\n#define MV_SOCKET_NAME %q\n#define MV_MAX_MESSAGE %d\n", Version, SocketName, MaxMessage)
	fmt.Fprintf(&b, "#define MV_MAX_ERROR_TEXT %d\n#define MV_REPLY_BIT %#x\n\n", MaxErrorText, ReplyBit)

	var ops []cConst
	for i, n := range opCNames {
		if n != "" {
			ops = append(ops, cConst{n, uint64(i)})
		}
	}
	writeEnum(&b, "mv_op", "Control operations (a reply's op is the request's | MV_REPLY_BIT).", ops, true)
	var codes []cConst
	for i, n := range codeCNames {
		codes = append(codes, cConst{n, uint64(i)})
	}
	writeEnum(&b, "mv_code", "A reply's status.", codes, false)
	writeEnum(&b, "", "Access flags in REG_MR (ibv_access_flags' values).", []cConst{
		{"MV_ACCESS_LOCAL_WRITE", AccessLocalWrite}, {"MV_ACCESS_REMOTE_WRITE", AccessRemoteWrite},
		{"MV_ACCESS_REMOTE_READ", AccessRemoteRead}}, false)
	writeEnum(&b, "", "Transports in CREATE_QP (0: the lab's default) and HELLO's transport mask (1 << t).", []cConst{
		{"MV_TRANSPORT_DEFAULT", 0}, {"MV_TRANSPORT_METAROCE", TransportMetaRoCE}, {"MV_TRANSPORT_ROCEV2", TransportRoCEv2}}, false)
	writeEnum(&b, "", "SET_RNR's mask, and its limits.", []cConst{{"MV_RNR_SET_RETRY", RNRSetRetry},
		{"MV_RNR_SET_TIMER", RNRSetTimer}, {"MV_RNR_RETRY_FOREVER", RNRRetryForever}, {"MV_MAX_RNR_TIMER", MaxRNRTimer}}, false)
	writeEnum(&b, "", "QP states, in the send ring's MV_FLAG word.", []cConst{
		{"MV_QP_RESET", QPReset}, {"MV_QP_CONNECTING", QPConnecting}, {"MV_QP_ESTABLISHED", QPEstablished},
		{"MV_QP_CLOSED", QPClosed}, {"MV_QP_ERROR", QPError}}, false)
	writeEnum(&b, "", "Work request and completion opcodes.", []cConst{
		{"MV_WR_WRITE", OpcodeWrite}, {"MV_WR_WRITE_IMM", OpcodeWriteImm}, {"MV_WR_SEND", OpcodeSend},
		{"MV_WR_SEND_IMM", OpcodeSendImm}, {"MV_WR_READ", OpcodeRead}, {"MV_WC_RECV", OpcodeRecv},
		{"MV_WC_RECV_IMM", OpcodeRecvImm}}, false)
	var sts []cConst
	for i, n := range statusCNames {
		sts = append(sts, cConst{n, uint64(i)})
	}
	writeEnum(&b, "", "Completion statuses.", sts, false)
	writeEnum(&b, "", "Entries.", []cConst{{"MV_MAX_SGE", MaxSGE}, {"MV_CQE_FLAG_IMM", uint64(CQEFlagImm)},
		{"MV_WQE_SIZE", WQESize}, {"MV_CQE_SIZE", CQESize}}, false)

	b.WriteString("/* Shared memory: ring header offsets, the doorbell page. */\n")
	for _, c := range []cConst{{"MV_PAGE_SIZE", PageSize}, {"MV_RING_HDR", RingHeaderSize}, {"MV_PRODUCER", ProducerOff},
		{"MV_CONSUMER", ConsumerOff}, {"MV_FLAG", FlagOff}, {"MV_CQ_OVERRUN", CQOverrunOff}, {"MV_NEED_WAKEUP", NeedWakeupOff}, {"MV_PORTS_UP", PortsUpOff}} {
		fmt.Fprintf(&b, "#define %s %d\n", c.name, c.value)
	}
	fmt.Fprintf(&b, "#define MV_DOORBELL_MAGIC %#xU\n#define MV_PORTS_VALID %#xU\n\n", DoorbellMagic, PortsValid)

	b.WriteString("/* Control message bodies, and the shared-memory entries. */\n")
	for i := range cStructs {
		s := &cStructs[i]
		_, size := s.layout()
		for _, bd := range s.bindings {
			if g := bd.goSize(); g != size {
				return nil, fmt.Errorf("generating mrlab_verbs.h: struct %s is %d bytes in C, the Go encoder of %s %v writes %d", s.name, size, bd.kind, bd.op, g)
			}
		}
		if s.comment != "" {
			fmt.Fprintf(&b, "/* %s */\n", s.comment)
		}
		b.WriteString(cStructDecl(s))
		fmt.Fprintf(&b, "_Static_assert(sizeof(struct %s) == %d, %q);\n", s.name, size, s.name)
	}
	b.WriteString(cTrailer)
	return b.Bytes(), nil
}

// writeEnum writes an enum of explicit values (hex when hex is set).
func writeEnum(b *bytes.Buffer, name, comment string, cs []cConst, hex bool) {
	fmt.Fprintf(b, "/* %s */\nenum ", comment)
	if name != "" {
		b.WriteString(name + " ")
	}
	b.WriteString("{\n")
	line := "\t"
	for _, c := range cs {
		item := fmt.Sprintf("%s = %d,", c.name, c.value)
		if hex {
			item = fmt.Sprintf("%s = 0x%02x,", c.name, c.value)
		}
		if len(line)+len(item) > 100 {
			b.WriteString(strings.TrimRight(line, " ") + "\n")
			line = "\t"
		}
		line += item + " "
	}
	b.WriteString(strings.TrimRight(line, " ") + "\n};\n\n")
}

// cStructDecl declares s on one line per run of members of one type,
// joining runs while a line stays short.
func cStructDecl(s *cStruct) string {
	var parts []string
	for i := 0; i < len(s.fields); {
		fl := s.fields[i]
		t := cTypes[fl.typ]
		names := []string{}
		for ; i < len(s.fields) && s.fields[i].typ == fl.typ; i++ {
			n := s.fields[i].name
			if s.fields[i].n > 0 {
				n = fmt.Sprintf("%s[%d]", n, s.fields[i].n)
			}
			names = append(names, n)
		}
		parts = append(parts, t.c+" "+strings.Join(names, ", ")+";")
	}
	one := "struct " + s.name + " { " + strings.Join(parts, " ") + " };\n"
	if len(one) <= 110 {
		return one
	}
	return "struct " + s.name + " {\n\t" + strings.Join(parts, "\n\t") + "\n};\n"
}
