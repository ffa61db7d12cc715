package verbsabi

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// NameSize is the size of the name fields in HELLO and its reply
// (NUL-padded UTF-8).
const NameSize = 32

// Request is a decoded request: the operation, its seq and the fields its
// body carries (docs/verbs-abi.md lists which; the others are zero).
type Request struct {
	Op  Op
	Seq uint32

	Version uint32 // HELLO: the client's ABI version
	Name    string // HELLO: the client's program name, for status

	PD       uint32 // DEALLOC_PD, REG_MR, CREATE_QP, LISTEN
	Access   uint32 // REG_MR
	Offset   uint64 // REG_MR: where the region starts in the memfd
	Length   uint64 // REG_MR
	IOVA     uint64 // REG_MR_AT: the region's first address
	Key      uint32 // DEREG_MR: the region's lkey
	CQ       uint32 // DESTROY_CQ
	Entries  uint32 // CREATE_CQ
	SendCQ   uint32 // CREATE_QP
	RecvCQ   uint32 // CREATE_QP
	Trans    uint8  // CREATE_QP: TransportMetaRoCE or TransportRoCEv2
	MaxSend  uint32 // CREATE_QP
	MaxRecv  uint32 // CREATE_QP
	QP       uint32 // DESTROY_QP, CONNECT, ACCEPT, QUERY_QP, SET_RNR
	Addr     [4]byte
	Port     uint16 // CONNECT, LISTEN
	Backlog  uint16 // LISTEN
	Listener uint32 // ACCEPT, STOP_LISTEN
	Target   uint32 // CANCEL: the seq of the request to cancel
	Watch    uint32 // UNWATCH
	RNRRetry uint8  // SET_RNR: rnr_retry, 0..7 (7: forever)
	RNRTimer uint8  // SET_RNR: min_rnr_timer, an IBTA RNR timer code 0..31
	RNRMask  uint8  // SET_RNR: RNRSetRetry | RNRSetTimer, which to apply
}

// reqLayout is each request's body size and descriptor count.
var reqLayout = [opMax + 1]struct{ size, fds int }{
	OpHello: {8 + NameSize, 0}, OpAllocPD: {0, 0}, OpDeallocPD: {8, 0}, OpRegMR: {24, 1},
	OpDeregMR: {8, 0}, OpCreateCQ: {8, 0}, OpDestroyCQ: {8, 0}, OpCreateQP: {24, 0},
	OpDestroyQP: {8, 0}, OpConnect: {16, 0}, OpListen: {8, 0}, OpAccept: {8, 0},
	OpStopListen: {8, 0}, OpCancel: {8, 0}, OpWatch: {0, 0}, OpUnwatch: {8, 0}, OpQueryQP: {8, 0},
	OpRegMRAt: {32, 1}, OpSetRNR: {8, 0},
}

// RequestFDs returns how many descriptors a request of op carries.
func RequestFDs(op Op) int {
	if op < 1 || op > opMax {
		return 0
	}
	return reqLayout[op].fds
}

// DecodeRequest decodes one request message that arrived with nfds
// descriptors. Any deviation from the layout (length, reserved bytes,
// descriptor count, unknown op) is an error: the endpoint closes a client
// that sends one.
func DecodeRequest(msg []byte, nfds int) (Request, error) {
	h, b, err := SplitMessage(msg)
	if err != nil {
		return Request{}, err
	}
	r := Request{Op: h.Op(), Seq: h.Seq()}
	if r.Op < 1 || r.Op > opMax {
		return r, fmt.Errorf("%w %#x", ErrOp, uint16(r.Op))
	}
	if h.Status() != 0 {
		return r, fmt.Errorf("%v: %w", r.Op, ErrFlags)
	}
	l := reqLayout[r.Op]
	if len(b) != l.size {
		return r, fmt.Errorf("%v: %d-byte body, want %d: %w", r.Op, len(b), l.size, ErrLength)
	}
	if nfds != l.fds {
		return r, fmt.Errorf("%v: %d descriptors, want %d: %w", r.Op, nfds, l.fds, ErrFDs)
	}
	le := binary.LittleEndian
	u32 := func(off int) uint32 { return le.Uint32(b[off:]) }
	zero := func(from, to int) bool {
		for _, x := range b[from:to] {
			if x != 0 {
				return false
			}
		}
		return true
	}
	ok := true
	switch r.Op {
	case OpHello:
		r.Version = u32(0)
		ok = zero(4, 8)
		name := b[8 : 8+NameSize]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			ok = ok && zero(8+i, 8+NameSize)
			name = name[:i]
		}
		if !utf8.Valid(name) {
			return r, fmt.Errorf("HELLO: program name is not UTF-8: %w", ErrFlags)
		}
		r.Name = string(name)
	case OpDeallocPD:
		r.PD, ok = u32(0), zero(4, 8)
	case OpRegMR:
		r.PD, r.Access, r.Offset, r.Length = u32(0), u32(4), le.Uint64(b[8:]), le.Uint64(b[16:])
	case OpRegMRAt:
		r.PD, r.Access, r.Offset, r.Length = u32(0), u32(4), le.Uint64(b[8:]), le.Uint64(b[16:])
		r.IOVA = le.Uint64(b[24:])
	case OpDeregMR:
		r.Key, ok = u32(0), zero(4, 8)
	case OpCreateCQ:
		r.Entries, ok = u32(0), zero(4, 8)
	case OpDestroyCQ:
		r.CQ, ok = u32(0), zero(4, 8)
	case OpCreateQP:
		r.PD, r.SendCQ, r.RecvCQ, r.Trans = u32(0), u32(4), u32(8), b[12]
		r.MaxSend, r.MaxRecv = u32(16), u32(20)
		ok = zero(13, 16)
	case OpDestroyQP, OpQueryQP:
		r.QP, ok = u32(0), zero(4, 8)
	case OpConnect:
		r.QP = u32(0)
		copy(r.Addr[:], b[4:8])
		r.Port = le.Uint16(b[8:])
		ok = zero(10, 16)
	case OpListen:
		r.PD, r.Port, r.Backlog = u32(0), le.Uint16(b[4:]), le.Uint16(b[6:])
	case OpAccept:
		r.Listener, r.QP = u32(0), u32(4)
	case OpStopListen:
		r.Listener, ok = u32(0), zero(4, 8)
	case OpCancel:
		r.Target, ok = u32(0), zero(4, 8)
	case OpUnwatch:
		r.Watch, ok = u32(0), zero(4, 8)
	case OpSetRNR:
		r.QP, r.RNRRetry, r.RNRTimer, r.RNRMask = u32(0), b[4], b[5], b[6]
		ok = zero(7, 8)
		if r.RNRMask == 0 || r.RNRMask&^(RNRSetRetry|RNRSetTimer) != 0 || r.RNRRetry > RNRRetryForever || r.RNRTimer > MaxRNRTimer {
			return r, fmt.Errorf("SET_RNR: mask %#x, rnr_retry %d, timer %d out of range: %w", r.RNRMask, r.RNRRetry, r.RNRTimer, ErrFlags)
		}
	}
	if !ok {
		return r, fmt.Errorf("%v: %w", r.Op, ErrFlags)
	}
	return r, nil
}

// AppendRequest appends r as a message. The caller sends the descriptors
// the op needs (RequestFDs) with it.
func AppendRequest(b []byte, r *Request) []byte {
	if r.Op < 1 || r.Op > opMax {
		panic(fmt.Sprintf("verbsabi: AppendRequest of %v", r.Op))
	}
	size := reqLayout[r.Op].size
	b = AppendHeader(b, r.Op, r.Seq, CodeOK, size)
	start := len(b)
	b = append(b, make([]byte, size)...)
	p := b[start:]
	le := binary.LittleEndian
	switch r.Op {
	case OpHello:
		le.PutUint32(p[0:], r.Version)
		copy(p[8:8+NameSize], truncName(r.Name))
	case OpDeallocPD:
		le.PutUint32(p, r.PD)
	case OpRegMR, OpRegMRAt:
		le.PutUint32(p[0:], r.PD)
		le.PutUint32(p[4:], r.Access)
		le.PutUint64(p[8:], r.Offset)
		le.PutUint64(p[16:], r.Length)
		if r.Op == OpRegMRAt {
			le.PutUint64(p[24:], r.IOVA)
		}
	case OpDeregMR:
		le.PutUint32(p, r.Key)
	case OpCreateCQ:
		le.PutUint32(p, r.Entries)
	case OpDestroyCQ:
		le.PutUint32(p, r.CQ)
	case OpCreateQP:
		le.PutUint32(p[0:], r.PD)
		le.PutUint32(p[4:], r.SendCQ)
		le.PutUint32(p[8:], r.RecvCQ)
		p[12] = r.Trans
		le.PutUint32(p[16:], r.MaxSend)
		le.PutUint32(p[20:], r.MaxRecv)
	case OpDestroyQP, OpQueryQP:
		le.PutUint32(p, r.QP)
	case OpConnect:
		le.PutUint32(p[0:], r.QP)
		copy(p[4:8], r.Addr[:])
		le.PutUint16(p[8:], r.Port)
	case OpListen:
		le.PutUint32(p[0:], r.PD)
		le.PutUint16(p[4:], r.Port)
		le.PutUint16(p[6:], r.Backlog)
	case OpAccept:
		le.PutUint32(p[0:], r.Listener)
		le.PutUint32(p[4:], r.QP)
	case OpStopListen:
		le.PutUint32(p, r.Listener)
	case OpCancel:
		le.PutUint32(p, r.Target)
	case OpUnwatch:
		le.PutUint32(p, r.Watch)
	case OpSetRNR:
		le.PutUint32(p, r.QP)
		p[4], p[5], p[6] = r.RNRRetry, r.RNRTimer, r.RNRMask
	}
	return b
}

// truncName cuts s to at most NameSize bytes on a rune boundary.
func truncName(s string) string {
	for len(s) > NameSize {
		_, n := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-n]
	}
	return s
}

// Limits are the endpoint's per-process limits, sent in HELLO's reply.
type Limits struct {
	MaxMRs       uint32 // registered regions
	MaxQPs       uint32
	MaxCQs       uint32
	MaxCQE       uint32 // entries of one CQ
	MaxWR        uint32 // entries of one send or receive queue
	MaxSGE       uint32 // scatter-gather elements of one work request
	MaxListeners uint32
	MaxBacklog   uint32 // connections a listener holds before ACCEPT
	MaxMRBytes   uint64 // bytes registered at once
	MaxPDs       uint32
}

// Reply is a decoded reply: the request's op and seq, a status, and the
// fields the op's reply body carries.
type Reply struct {
	Op   Op // the request's op (without ReplyBit)
	Seq  uint32
	Code Code
	Text string // the error's message when Code != CodeOK

	// HELLO
	Version    uint32
	ClientID   uint32
	HostAddr   [4]byte
	PathMTU    uint32
	Ports      uint32
	LineRate   uint64 // bits per second per port
	Host       string
	Limits     Limits
	Transports uint32 // bit TransportMetaRoCE, bit TransportRoCEv2

	Handle uint32 // ALLOC_PD, CREATE_CQ, CREATE_QP, LISTEN: the new object

	LKey, RKey uint32 // REG_MR
	MRAddr     uint64 // REG_MR: the region's first address

	Entries uint32 // CREATE_CQ: ring entries (a power of two)
	Size    uint64 // CREATE_CQ, CREATE_QP: bytes to map

	SQEntries, RQEntries uint32 // CREATE_QP
	SQOffset, RQOffset   uint64 // CREATE_QP: ring offsets in the mapping

	// UNWATCH: how the lab kept time since the WATCH.
	LabNs, WallNs, MaxLateNs uint64
	Events, EventsLate       uint64
	Lagging                  bool
	LoopStarved              bool   // the lab's loop waited for a CPU beyond the limit (a bound; Lagging does not follow)
	LimitPPM                 uint32 // the lateness allowed, in millionths of LabNs

	// QUERY_QP: the QP's state and its connection's counters.
	QPState                                     uint32
	TxPackets, RxPackets, Retransmits, Timeouts uint64
	ECNEchoes, CEReceived                       uint64

	ConnID uint32  // CONNECT, ACCEPT, QUERY_QP: the connection's local id (QPN)
	Peer   [4]byte // CONNECT, ACCEPT: the peer's address
	Port   uint16  // CONNECT: the port dialed; ACCEPT: the listener's
	Trans  uint8   // CONNECT, ACCEPT, QUERY_QP: the connection's transport
}

// replyLayout is each reply's body size and descriptor count.
var replyLayout = [opMax + 1]struct{ size, fds int }{
	OpHello: {112, 2}, OpAllocPD: {8, 0}, OpDeallocPD: {0, 0}, OpRegMR: {16, 0},
	OpDeregMR: {0, 0}, OpCreateCQ: {16, 2}, OpDestroyCQ: {0, 0}, OpCreateQP: {40, 1},
	OpDestroyQP: {0, 0}, OpConnect: {16, 0}, OpListen: {8, 0}, OpAccept: {16, 0},
	OpStopListen: {0, 0}, OpCancel: {0, 0}, OpWatch: {8, 0}, OpUnwatch: {48, 0}, OpQueryQP: {64, 0},
	OpRegMRAt: {16, 0}, OpSetRNR: {0, 0},
}

// ReplyFDs returns how many descriptors a successful reply to op carries
// (an error reply carries none).
func ReplyFDs(op Op) int {
	if op < 1 || op > opMax {
		return 0
	}
	return replyLayout[op].fds
}

// AppendReply appends r as a reply message: the op's body when r.Code is
// CodeOK, else r.Text (cut to MaxErrorText bytes).
func AppendReply(b []byte, r *Reply) []byte {
	op := r.Op | ReplyBit
	if r.Code != CodeOK {
		text := r.Text
		if len(text) > MaxErrorText {
			text = text[:MaxErrorText]
		}
		b = AppendHeader(b, op, r.Seq, r.Code, len(text))
		return append(b, text...)
	}
	if r.Op < 1 || r.Op > opMax {
		panic(fmt.Sprintf("verbsabi: AppendReply of %v", r.Op))
	}
	size := replyLayout[r.Op].size
	b = AppendHeader(b, op, r.Seq, CodeOK, size)
	start := len(b)
	b = append(b, make([]byte, size)...)
	p := b[start:]
	le := binary.LittleEndian
	switch r.Op {
	case OpHello:
		le.PutUint32(p[0:], r.Version)
		le.PutUint32(p[4:], r.ClientID)
		copy(p[8:12], r.HostAddr[:])
		le.PutUint32(p[12:], r.PathMTU)
		le.PutUint32(p[16:], r.Ports)
		le.PutUint64(p[24:], r.LineRate)
		copy(p[32:32+NameSize], truncName(r.Host))
		l := &r.Limits
		for i, v := range []uint32{l.MaxMRs, l.MaxQPs, l.MaxCQs, l.MaxCQE, l.MaxWR, l.MaxSGE, l.MaxListeners, l.MaxBacklog} {
			le.PutUint32(p[64+4*i:], v)
		}
		le.PutUint64(p[96:], l.MaxMRBytes)
		le.PutUint32(p[104:], r.Transports)
		le.PutUint32(p[108:], l.MaxPDs)
	case OpAllocPD, OpListen, OpWatch:
		le.PutUint32(p, r.Handle)
	case OpUnwatch:
		for i, v := range []uint64{r.LabNs, r.WallNs, r.MaxLateNs, r.Events, r.EventsLate} {
			le.PutUint64(p[8*i:], v)
		}
		if r.Lagging {
			p[40] = 1
		}
		if r.LoopStarved {
			p[41] = 1
		}
		le.PutUint32(p[44:], r.LimitPPM)
	case OpQueryQP:
		le.PutUint32(p[0:], r.QPState)
		le.PutUint32(p[4:], r.ConnID)
		p[8] = r.Trans
		for i, v := range []uint64{r.TxPackets, r.RxPackets, r.Retransmits, r.Timeouts, r.ECNEchoes, r.CEReceived} {
			le.PutUint64(p[16+8*i:], v)
		}
	case OpRegMR, OpRegMRAt:
		le.PutUint32(p[0:], r.LKey)
		le.PutUint32(p[4:], r.RKey)
		le.PutUint64(p[8:], r.MRAddr)
	case OpCreateCQ:
		le.PutUint32(p[0:], r.Handle)
		le.PutUint32(p[4:], r.Entries)
		le.PutUint64(p[8:], r.Size)
	case OpCreateQP:
		le.PutUint32(p[0:], r.Handle)
		le.PutUint32(p[4:], r.SQEntries)
		le.PutUint32(p[8:], r.RQEntries)
		le.PutUint64(p[16:], r.SQOffset)
		le.PutUint64(p[24:], r.RQOffset)
		le.PutUint64(p[32:], r.Size)
	case OpConnect, OpAccept:
		le.PutUint32(p[0:], r.ConnID)
		copy(p[4:8], r.Peer[:])
		le.PutUint16(p[8:], r.Port)
		p[10] = r.Trans
	}
	return b
}

// DecodeReply decodes a reply that arrived with nfds descriptors.
func DecodeReply(msg []byte, nfds int) (Reply, error) {
	h, b, err := SplitMessage(msg)
	if err != nil {
		return Reply{}, err
	}
	r := Reply{Op: h.Op() &^ ReplyBit, Seq: h.Seq(), Code: h.Status()}
	if h.Op()&ReplyBit == 0 || r.Op < 1 || r.Op > opMax {
		return r, fmt.Errorf("%w %#x in a reply", ErrOp, uint16(h.Op()))
	}
	if r.Code != CodeOK {
		if nfds != 0 {
			return r, fmt.Errorf("%v error reply with %d descriptors: %w", r.Op, nfds, ErrFDs)
		}
		r.Text = string(b)
		return r, nil
	}
	l := replyLayout[r.Op]
	if len(b) != l.size {
		return r, fmt.Errorf("%v reply: %d-byte body, want %d: %w", r.Op, len(b), l.size, ErrLength)
	}
	if nfds != l.fds {
		return r, fmt.Errorf("%v reply: %d descriptors, want %d: %w", r.Op, nfds, l.fds, ErrFDs)
	}
	le := binary.LittleEndian
	switch r.Op {
	case OpHello:
		r.Version, r.ClientID = le.Uint32(b[0:]), le.Uint32(b[4:])
		copy(r.HostAddr[:], b[8:12])
		r.PathMTU, r.Ports, r.LineRate = le.Uint32(b[12:]), le.Uint32(b[16:]), le.Uint64(b[24:])
		host := b[32 : 32+NameSize]
		if i := bytes.IndexByte(host, 0); i >= 0 {
			host = host[:i]
		}
		r.Host = string(host)
		l := &r.Limits
		for i, v := range []*uint32{&l.MaxMRs, &l.MaxQPs, &l.MaxCQs, &l.MaxCQE, &l.MaxWR, &l.MaxSGE, &l.MaxListeners, &l.MaxBacklog} {
			*v = le.Uint32(b[64+4*i:])
		}
		l.MaxMRBytes = le.Uint64(b[96:])
		r.Transports = le.Uint32(b[104:])
		l.MaxPDs = le.Uint32(b[108:])
	case OpAllocPD, OpListen, OpWatch:
		r.Handle = le.Uint32(b)
	case OpUnwatch:
		for i, v := range []*uint64{&r.LabNs, &r.WallNs, &r.MaxLateNs, &r.Events, &r.EventsLate} {
			*v = le.Uint64(b[8*i:])
		}
		r.Lagging, r.LoopStarved, r.LimitPPM = b[40] == 1, b[41] == 1, le.Uint32(b[44:])
	case OpQueryQP:
		r.QPState, r.ConnID, r.Trans = le.Uint32(b[0:]), le.Uint32(b[4:]), b[8]
		for i, v := range []*uint64{&r.TxPackets, &r.RxPackets, &r.Retransmits, &r.Timeouts, &r.ECNEchoes, &r.CEReceived} {
			*v = le.Uint64(b[16+8*i:])
		}
	case OpRegMR, OpRegMRAt:
		r.LKey, r.RKey, r.MRAddr = le.Uint32(b[0:]), le.Uint32(b[4:]), le.Uint64(b[8:])
	case OpCreateCQ:
		r.Handle, r.Entries, r.Size = le.Uint32(b[0:]), le.Uint32(b[4:]), le.Uint64(b[8:])
	case OpCreateQP:
		r.Handle, r.SQEntries, r.RQEntries = le.Uint32(b[0:]), le.Uint32(b[4:]), le.Uint32(b[8:])
		r.SQOffset, r.RQOffset, r.Size = le.Uint64(b[16:]), le.Uint64(b[24:]), le.Uint64(b[32:])
	case OpConnect, OpAccept:
		r.ConnID = le.Uint32(b[0:])
		copy(r.Peer[:], b[4:8])
		r.Port = le.Uint16(b[8:])
		r.Trans = b[10]
	}
	return r, nil
}
