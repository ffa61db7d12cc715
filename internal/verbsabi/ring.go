package verbsabi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Shared-memory layout. Every ring is one single-producer,
// single-consumer queue:
//
//	0    u32 producer  entries written so far (free-running, wraps at 2^32)
//	64   u32 consumer  entries taken so far
//	128  u32 flag      send ring: the QP's state (endpoint writes);
//	                   CQ ring: armed (client writes 1 to ask for an event)
//	192  u32 overrun   CQ ring: 1 once the ring overran (endpoint writes);
//	                   the QPs completing on it are then in the error state
//	256  entries       entries * entry size bytes; entry i at 256 + (i mod entries)*size
//
// Each index has its own 64-byte line so producer and consumer do not
// share a cache line. Indices are read and written with sequentially
// consistent atomics (C11 __atomic_*(..., __ATOMIC_SEQ_CST)); the producer
// writes an entry before it publishes the producer index, the consumer
// reads it before it publishes the consumer index.
const (
	RingHeaderSize = 256
	ProducerOff    = 0
	ConsumerOff    = 64
	FlagOff        = 128
	CQOverrunOff   = 192
	// WQESize is a send or receive work queue entry's size.
	WQESize = 128
	// CQESize is a completion queue entry's size.
	CQESize = 32
	// PageSize aligns every mapping and ring.
	PageSize = 4096
)

// The doorbell page (one per client, HELLO's first descriptor):
//
//	0   u32 magic        DoorbellMagic
//	4   u32 version      Version
//	64  u32 need_wakeup  0 while the endpoint polls this client's queues;
//	                     otherwise the number of the endpoint's current
//	                     sleep (never 0). A client that posts while it is
//	                     nonzero writes 1 to the doorbell eventfd (HELLO's
//	                     second descriptor), once per sleep number.
//	128 u32 ports_up     PortsValid | bit i set while the link of the
//	                     NIC's port i (plane i) is up; the endpoint writes
//	                     it before HELLO's reply and within a millisecond
//	                     of lab time after a link changes, then wakes the
//	                     word's futex waiters (FUTEX_WAKE, not private:
//	                     the page is shared), so a client can sleep on it
//	                     (FUTEX_WAIT) instead of polling.
const (
	DoorbellPageSize = PageSize
	DoorbellMagic    = 0x4256524d // "MRVB"
	NeedWakeupOff    = 64
	PortsUpOff       = 128
	// PortsValid marks ports_up as written by an endpoint that follows
	// its links (a page without it is from one that does not).
	PortsValid = 1 << 31
)

// RingBytes returns the bytes a ring of entries entries of size bytes
// takes, rounded up to whole pages.
func RingBytes(entries, size int) int { return RoundPage(RingHeaderSize + entries*size) }

// RoundPage rounds n up to a multiple of PageSize.
func RoundPage(n int) int { return (n + PageSize - 1) &^ (PageSize - 1) }

// Word returns the u32 at off in shared memory, for atomic access. off
// must be a multiple of 4 inside mem.
func Word(mem []byte, off int) *uint32 {
	_ = mem[off+3]
	return (*uint32)(unsafe.Pointer(&mem[off]))
}

// Ring is a view of one ring in shared memory. Its methods never index
// outside mem, whatever the other side writes.
type Ring struct {
	mem   []byte
	mask  uint32
	esize int
}

// ErrRing is returned by NewRing for a bad geometry.
var ErrRing = errors.New("verbs ABI: ring does not fit its memory or has a non-power-of-two size")

// NewRing returns the ring of entries entries of esize bytes at the start
// of mem.
func NewRing(mem []byte, entries, esize int) (Ring, error) {
	if entries < 1 || entries&(entries-1) != 0 || esize < 1 || len(mem) < RingHeaderSize+entries*esize {
		return Ring{}, fmt.Errorf("%w (%d entries of %d bytes in %d bytes)", ErrRing, entries, esize, len(mem))
	}
	return Ring{mem: mem, mask: uint32(entries - 1), esize: esize}, nil
}

// Entries returns the ring's size.
func (r Ring) Entries() int { return int(r.mask) + 1 }

// Producer returns the producer index.
func (r Ring) Producer() uint32 { return atomic.LoadUint32(Word(r.mem, ProducerOff)) }

// SetProducer publishes the producer index.
func (r Ring) SetProducer(v uint32) { atomic.StoreUint32(Word(r.mem, ProducerOff), v) }

// Consumer returns the consumer index.
func (r Ring) Consumer() uint32 { return atomic.LoadUint32(Word(r.mem, ConsumerOff)) }

// SetConsumer publishes the consumer index.
func (r Ring) SetConsumer(v uint32) { atomic.StoreUint32(Word(r.mem, ConsumerOff), v) }

// Flag returns the flag word.
func (r Ring) Flag() uint32 { return atomic.LoadUint32(Word(r.mem, FlagOff)) }

// SetFlag writes the flag word.
func (r Ring) SetFlag(v uint32) { atomic.StoreUint32(Word(r.mem, FlagOff), v) }

// Entry returns entry i (taken modulo the ring's size).
func (r Ring) Entry(i uint32) []byte {
	off := RingHeaderSize + int(i&r.mask)*r.esize
	return r.mem[off : off+r.esize : off+r.esize]
}

// Work request opcodes in a send WQE, and the opcodes of completions
// (which add RECV and RECV_IMM).
const (
	OpcodeWrite    = 1
	OpcodeWriteImm = 2
	OpcodeSend     = 3
	OpcodeSendImm  = 4
	OpcodeRead     = 5
	OpcodeRecv     = 6
	OpcodeRecvImm  = 7
)

// Completion statuses in a CQE (ibv_wc_status, abridged, with mrlab's
// own numbering).
const (
	StatusSuccess              = 0
	StatusLocProt              = 1 // local protection: a bad lkey or an SGE outside its region
	StatusRemAccess            = 2 // the peer refused the rkey, range or permission
	StatusRemInvalidReq        = 3 // the peer could not parse or place the request
	StatusRNRRetryExc          = 4 // the peer had no receive posted, for too long
	StatusRetryExc             = 5 // the transport gave up retransmitting
	StatusFlushed              = 6 // the connection closed or failed before the request ran
	StatusLocLen               = 7 // a received SEND was longer than the receive
	StatusLocQPOp              = 8 // the WQE itself was invalid (opcode, SGE count)
	StatusGeneral              = 9 // any other failure
	NumStatuses                = 10
	MaxSGE                     = 4
	CQEFlagImm          uint16 = 1 // the completion carries immediate data
)

// SGE is one scatter-gather element of a WQE.
type SGE struct {
	Addr uint64
	Len  uint32
	LKey uint32
}

// WQE is a work queue entry:
//
//	0   u64 wr_id
//	8   u8  opcode      send ring: OpcodeWrite..OpcodeRead; receive ring: 0
//	9   u8  num_sge     0..MaxSGE
//	10  u16 stream      MetaRoCE ordered stream (0 for RoCEv2)
//	12  u32 imm         immediate data (WRITE_IMM, SEND_IMM)
//	16  u64 remote_addr WRITE, WRITE_IMM, READ
//	24  u32 rkey        WRITE, WRITE_IMM, READ
//	28  u32 reserved    0
//	32  sge[4]          {u64 addr, u32 length, u32 lkey} each
//	96  32 bytes reserved
type WQE struct {
	ID         uint64
	Opcode     uint8
	NumSGE     uint8
	Stream     uint16
	Imm        uint32
	RemoteAddr uint64
	RKey       uint32
	SGL        [MaxSGE]SGE
}

// PutWQE writes w into b (WQESize bytes).
func PutWQE(b []byte, w *WQE) {
	_ = b[WQESize-1]
	le := binary.LittleEndian
	le.PutUint64(b[0:], w.ID)
	b[8], b[9] = w.Opcode, w.NumSGE
	le.PutUint16(b[10:], w.Stream)
	le.PutUint32(b[12:], w.Imm)
	le.PutUint64(b[16:], w.RemoteAddr)
	le.PutUint32(b[24:], w.RKey)
	le.PutUint32(b[28:], 0)
	for i := range w.SGL {
		s := b[32+16*i:]
		le.PutUint64(s[0:], w.SGL[i].Addr)
		le.PutUint32(s[8:], w.SGL[i].Len)
		le.PutUint32(s[12:], w.SGL[i].LKey)
	}
}

// GetWQE reads the WQE in b into w, each byte once: the endpoint validates
// the copy, never the shared memory the client may still be writing.
func GetWQE(b []byte, w *WQE) {
	_ = b[WQESize-1]
	le := binary.LittleEndian
	w.ID = le.Uint64(b[0:])
	w.Opcode, w.NumSGE = b[8], b[9]
	w.Stream = le.Uint16(b[10:])
	w.Imm = le.Uint32(b[12:])
	w.RemoteAddr = le.Uint64(b[16:])
	w.RKey = le.Uint32(b[24:])
	for i := range w.SGL {
		s := b[32+16*i:]
		w.SGL[i] = SGE{Addr: le.Uint64(s[0:]), Len: le.Uint32(s[8:]), LKey: le.Uint32(s[12:])}
	}
}

// CQE is a completion queue entry:
//
//	0   u64 wr_id
//	8   u32 qp        the QP handle the work request was posted on
//	12  u8  opcode    OpcodeWrite..OpcodeRecvImm
//	13  u8  status    StatusSuccess..StatusGeneral
//	14  u16 flags     CQEFlagImm
//	16  u32 byte_len  bytes moved (receives: bytes placed)
//	20  u32 imm       immediate data when CQEFlagImm is set
//	24  u16 stream
//	26  6 bytes reserved
type CQE struct {
	ID     uint64
	QP     uint32
	Opcode uint8
	Status uint8
	Flags  uint16
	Bytes  uint32
	Imm    uint32
	Stream uint16
}

// PutCQE writes c into b (CQESize bytes).
func PutCQE(b []byte, c *CQE) {
	_ = b[CQESize-1]
	le := binary.LittleEndian
	le.PutUint64(b[0:], c.ID)
	le.PutUint32(b[8:], c.QP)
	b[12], b[13] = c.Opcode, c.Status
	le.PutUint16(b[14:], c.Flags)
	le.PutUint32(b[16:], c.Bytes)
	le.PutUint32(b[20:], c.Imm)
	le.PutUint16(b[24:], c.Stream)
	clear(b[26:32])
}

// GetCQE reads the CQE in b.
func GetCQE(b []byte, c *CQE) {
	_ = b[CQESize-1]
	le := binary.LittleEndian
	c.ID = le.Uint64(b[0:])
	c.QP = le.Uint32(b[8:])
	c.Opcode, c.Status = b[12], b[13]
	c.Flags = le.Uint16(b[14:])
	c.Bytes = le.Uint32(b[16:])
	c.Imm = le.Uint32(b[20:])
	c.Stream = le.Uint16(b[24:])
}
