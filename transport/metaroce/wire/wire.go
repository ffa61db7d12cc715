// Package wire is the MetaRoCE wire format of mrlab (version 2): byte-slice
// views over the headers a MetaRoCE packet carries after its UDP header, and
// the CRC32C trailer that ends every packet. docs/metaroce-wire.md is the
// specification; this package is its executable form.
//
// Every packet is
//
//	common header (16) | type-specific header | payload | CRC32C (4)
//
// A view is a []byte: getters read a field in place, setters write it,
// nothing is copied or allocated. Parse checks the framing (length, version,
// type, CRC) of a received packet; the Decode functions check a header's
// fields for consistency. Both return the package's *Error values, which
// name the offending field and are preallocated, so rejecting a malformed
// packet costs no allocation.
//
// The real MetaRoCE format is not public yet. This one is mrlab's own design
// (after research/protocol.md section 4), versioned so that it can change
// when the specification appears.
package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// Version is the format version carried in every packet's first nibble.
const Version = 2

// UDPPort is the UDP destination port of MetaRoCE packets in mrlab. It is
// not IANA-registered: it is neither RoCEv2's 4791 nor UET's 4793, and it
// sits below the Linux ephemeral port range so that it cannot collide with
// a kernel socket in a live lab.
const UDPPort = 4796

// Header sizes in bytes.
const (
	CommonSize  = 16
	DataSize    = 64 // common + data header
	AckSize     = 64 // common + ACK body
	NakSize     = 32 // common + NAK body
	SetupSize   = 52 // common + SYN/SYN_ACK body
	TrailerSize = 4  // CRC32C
	// SinkSize is one entry of a READ request's sink list.
	SinkSize = 16
	// MaxSinks is the most sink entries a READ request carries.
	MaxSinks = 4
	// SACKBits is the width of an ACK's selective-ACK bitvector.
	SACKBits = 256
	// SACKWordBits is the width of one word of the bitvector on the wire
	// (big-endian, the most significant bit first); SACKWords words make
	// the vector.
	SACKWordBits = 64
	SACKWords    = SACKBits / SACKWordBits
	// AckRecordSize and AckRecordSACKSize are an ACK's further path
	// records, without and with a SACK vector.
	AckRecordSize     = 16
	AckRecordSACKSize = AckRecordSize + SACKBits/8
	// MaxAckRecords is the most path records one ACK carries.
	MaxAckRecords = 255
	// MaxOverhead is the most bytes MetaRoCE adds to an RDMA payload.
	MaxOverhead = DataSize + TrailerSize
)

// Type is a packet type (the low nibble of byte 0).
type Type uint8

// Packet types.
const (
	TypeWrite    Type = 1  // RDMA WRITE data (IMM flag: WRITE with immediate)
	TypeSend     Type = 2  // SEND data, matched to a posted receive by token
	TypeReadReq  Type = 3  // RDMA READ request
	TypeReadResp Type = 4  // RDMA READ response data
	TypeAck      Type = 5  // per-path cumulative + selective ACK
	TypeNak      Type = 6  // per-packet negative acknowledgement
	TypeProbe    Type = 7  // path probe: consumes a PSN, carries nothing
	TypeSyn      Type = 8  // connection request
	TypeSynAck   Type = 9  // connection accept
	TypeEst      Type = 10 // handshake confirmation (third leg)
	TypeClose    Type = 11 // teardown request
	TypeCloseAck Type = 12 // teardown confirmation
)

var typeNames = [...]string{"", "WRITE", "SEND", "READ_REQ", "READ_RESP", "ACK", "NAK", "PROBE",
	"SYN", "SYN_ACK", "EST", "CLOSE", "CLOSE_ACK"}

func (t Type) String() string {
	if int(t) < len(typeNames) && t != 0 {
		return typeNames[t]
	}
	return "TYPE?"
}

// IsData reports whether packets of type t carry a data header.
func (t Type) IsData() bool { return t >= TypeWrite && t <= TypeReadResp }

// minSize is the smallest valid packet of each type, trailer excluded.
var minSize = [...]int{
	TypeWrite: DataSize, TypeSend: DataSize, TypeReadReq: DataSize, TypeReadResp: DataSize,
	TypeAck: AckSize, TypeNak: NakSize, TypeProbe: CommonSize,
	TypeSyn: SetupSize, TypeSynAck: SetupSize, TypeEst: CommonSize,
	TypeClose: CommonSize, TypeCloseAck: CommonSize,
}

// Flags is the flag byte of the common header.
type Flags uint8

// Flags. Which apply to which types is in the specification.
const (
	FlagFirst  Flags = 0x80 // data: first chunk of its message
	FlagLast   Flags = 0x40 // data: last chunk of its message
	FlagAckReq Flags = 0x20 // ask the receiver to ACK this packet at once
	FlagRetx   Flags = 0x10 // data, PROBE: a retransmission
	// FlagRevise shares RETX's bit, which is defined on data and PROBE
	// only: a SYN_ACK that lowers the first_share an earlier one offered
	// and answers nothing (no EST, no RTT sample).
	FlagRevise Flags = 0x10 // SYN_ACK: a grant revision
	FlagImm    Flags = 0x08 // data: the imm field is valid
	FlagAbort  Flags = 0x04 // data: chunk abandoned by its sender; no payload
	FlagECE    Flags = 0x02 // ACK: CE-marked data arrived on its first path since that path's last ACK
	FlagBusy   Flags = 0x01 // ACK: the receiver's link is busy and it answers CE marks itself
)

// Error is a wire-format error: which field is wrong and why. The package's
// errors are preallocated values; compare with == or errors.Is.
type Error struct {
	Field string
	Msg   string
}

func (e *Error) Error() string { return "metaroce wire: " + e.Field + ": " + e.Msg }

// Errors.
var (
	ErrShort       = &Error{"packet", "shorter than common header and trailer"}
	ErrVersion     = &Error{"common.version", "unsupported version"}
	ErrType        = &Error{"common.type", "unknown packet type"}
	ErrChecksum    = &Error{"trailer.crc32c", "integrity check failed"}
	ErrLength      = &Error{"packet", "too short for its type"}
	ErrDataRange   = &Error{"data.offset", "payload extends past msg_len"}
	ErrDataAddr    = &Error{"data.addr", "placement address below the message offset"}
	ErrAbortData   = &Error{"data.flags", "ABORT chunk carries a payload"}
	ErrSinkList    = &Error{"read_req.payload", "sink list is not 1..4 entries of 16 bytes"}
	ErrSinkLength  = &Error{"read_req.payload", "sink lengths do not add up to msg_len"}
	ErrReadOffset  = &Error{"read_req.offset", "READ request with a nonzero offset"}
	ErrNakReason   = &Error{"nak.reason", "unknown reason"}
	ErrAckRecords  = &Error{"ack.records", "path records do not fill the ACK"}
	ErrSetupPaths  = &Error{"setup.paths", "path count not in 1..256"}
	ErrSetupPorts  = &Error{"setup.ports", "port count is 0"}
	ErrSetupMTU    = &Error{"setup.mtu", "path MTU not in 256..9000"}
	ErrSetupWindow = &Error{"setup.window", "zero message or data window"}
	ErrSetupConn   = &Error{"setup.src_conn", "connection id 0 is reserved"}
)

// Header is a view of the 16-byte common header that starts every packet.
//
//	0  ver(4) | type(4)
//	1  flags
//	2  path       path id within the connection (0..255)
//	3  gen        path generation: bumped whenever the path's entropy changes
//	4  dst_conn   receiver's connection id (0 in a SYN)
//	8  psn        per-path sequence number (ACK: cumulative ack)
//	12 ts         sender's clock, ns mod 2^32, echoed by ACKs for RTT
type Header []byte

// Version returns the format version.
func (h Header) Version() uint8 { return h[0] >> 4 }

// Type returns the packet type.
func (h Header) Type() Type { return Type(h[0] & 0xf) }

// Flags returns the flag byte.
func (h Header) Flags() Flags { return Flags(h[1]) }

// Path returns the path id.
func (h Header) Path() uint8 { return h[2] }

// Gen returns the path generation.
func (h Header) Gen() uint8 { return h[3] }

// DstConn returns the receiver's connection id.
func (h Header) DstConn() uint32 { return binary.BigEndian.Uint32(h[4:]) }

// PSN returns the per-path sequence number.
func (h Header) PSN() uint32 { return binary.BigEndian.Uint32(h[8:]) }

// TS returns the sender's timestamp.
func (h Header) TS() uint32 { return binary.BigEndian.Uint32(h[12:]) }

// SetType writes the version and type.
func (h Header) SetType(t Type) { h[0] = Version<<4 | uint8(t)&0xf }

// SetFlags writes the flag byte.
func (h Header) SetFlags(f Flags) { h[1] = uint8(f) }

// SetPath writes the path id and generation.
func (h Header) SetPath(path, gen uint8) { h[2], h[3] = path, gen }

// SetDstConn writes the receiver's connection id.
func (h Header) SetDstConn(id uint32) { binary.BigEndian.PutUint32(h[4:], id) }

// SetPSN writes the sequence number.
func (h Header) SetPSN(psn uint32) { binary.BigEndian.PutUint32(h[8:], psn) }

// SetTS writes the timestamp.
func (h Header) SetTS(ts uint32) { binary.BigEndian.PutUint32(h[12:], ts) }

// Common is the common header as a value.
type Common struct {
	Type    Type
	Flags   Flags
	Path    uint8
	Gen     uint8
	DstConn uint32
	PSN     uint32
	TS      uint32
}

// Common returns the header's fields.
func (h Header) Common() Common {
	return Common{Type: h.Type(), Flags: h.Flags(), Path: h.Path(), Gen: h.Gen(),
		DstConn: h.DstConn(), PSN: h.PSN(), TS: h.TS()}
}

// Put writes all fields.
func (h Header) Put(c *Common) {
	_ = h[CommonSize-1]
	h.SetType(c.Type)
	h.SetFlags(c.Flags)
	h.SetPath(c.Path, c.Gen)
	h.SetDstConn(c.DstConn)
	h.SetPSN(c.PSN)
	h.SetTS(c.TS)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Seal appends the CRC32C of pkt[:n] at pkt[n:n+4] and returns n+4. pkt
// must have room for the trailer.
func Seal(pkt []byte, n int) int {
	binary.BigEndian.PutUint32(pkt[n:], crc32.Checksum(pkt[:n], castagnoli))
	return n + TrailerSize
}

// Parse checks a received packet's framing — length, version, type, the
// type's minimum length and the CRC32C trailer — and returns its type and
// the packet without the trailer.
func Parse(pkt []byte) (Type, []byte, error) { return parse(pkt, 0, 0) }

// parse is Parse with pkt[at:at+z] known to be zeros (z 0: none).
func parse(pkt []byte, at, z int) (Type, []byte, error) {
	if len(pkt) < CommonSize+TrailerSize {
		return 0, nil, ErrShort
	}
	h := Header(pkt)
	if h.Version() != Version {
		return 0, nil, ErrVersion
	}
	t := h.Type()
	if int(t) >= len(minSize) || minSize[t] == 0 {
		return 0, nil, ErrType
	}
	n := len(pkt) - TrailerSize
	if n < minSize[t] {
		return 0, nil, ErrLength
	}
	if checksum(pkt[:n], at, z) != binary.BigEndian.Uint32(pkt[n:]) {
		return 0, nil, ErrChecksum
	}
	return t, pkt[:n], nil
}

// Seq is a 32-bit sequence number (PSN, DSN, MSN) compared with wraparound:
// a is before b when the signed distance b-a is positive, which is right as
// long as the numbers compared are less than 2^31 apart.
type Seq uint32

// Before reports whether a comes before b.
func (a Seq) Before(b Seq) bool { return int32(a-b) < 0 }

// BeforeEq reports whether a comes before b or equals it.
func (a Seq) BeforeEq(b Seq) bool { return int32(a-b) <= 0 }

// After reports whether a comes after b.
func (a Seq) After(b Seq) bool { return int32(a-b) > 0 }

// Dist returns b-a as a signed distance.
func (a Seq) Dist(b Seq) int32 { return int32(b - a) }

// Span returns how many numbers lie forward from a up to b (b-a modulo
// 2^32): the size of the window [a, b), or how far a lags behind b.
func (a Seq) Span(b Seq) uint32 { return uint32(b - a) }

// In reports whether a is in the half-open window [base, next), taken
// forward from base with wraparound; [base, base) holds nothing. Unlike
// Before and After it is right for any window shorter than 2^32.
func (a Seq) In(base, next Seq) bool { return a-base < next-base }

// Within reports whether a is in the closed window [lo, hi], taken
// forward from lo with wraparound.
func (a Seq) Within(lo, hi Seq) bool { return a-lo <= hi-lo }
