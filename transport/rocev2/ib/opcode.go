// Package ib holds the InfiniBand transport headers that RoCEv2 carries over
// UDP port 4791, as byte-slice views: the Base Transport Header (BTH), the
// RDMA Extended Transport Header (RETH), the ACK Extended Transport Header
// (AETH) and Immediate Data (ImmDt), plus 24-bit packet sequence number
// arithmetic. The layouts follow IBTA vol. 1 chapter 9 and Annex A17
// (RoCEv2), as also written down in Linux's drivers/infiniband/sw/rxe/rxe_hdr.h,
// so Wireshark's own InfiniBand dissector decodes what mrlab sends.
//
// A view is a []byte: accessors read fields in place and setters write them;
// nothing is copied or allocated. Decode checks lengths once, so callers of a
// decoded Packet may use its views freely.
package ib

// Opcode is the BTH opcode: the transport service in the top three bits
// (000 = Reliable Connection) and the operation in the low five.
type Opcode uint8

// Reliable Connection opcodes (IBTA table 39) and the RoCEv2 congestion
// notification packet (Annex A17.9.2).
const (
	OpSendFirst          Opcode = 0x00
	OpSendMiddle         Opcode = 0x01
	OpSendLast           Opcode = 0x02
	OpSendLastImm        Opcode = 0x03
	OpSendOnly           Opcode = 0x04
	OpSendOnlyImm        Opcode = 0x05
	OpWriteFirst         Opcode = 0x06
	OpWriteMiddle        Opcode = 0x07
	OpWriteLast          Opcode = 0x08
	OpWriteLastImm       Opcode = 0x09
	OpWriteOnly          Opcode = 0x0A
	OpWriteOnlyImm       Opcode = 0x0B
	OpReadRequest        Opcode = 0x0C
	OpReadResponseFirst  Opcode = 0x0D
	OpReadResponseMiddle Opcode = 0x0E
	OpReadResponseLast   Opcode = 0x0F
	OpReadResponseOnly   Opcode = 0x10
	OpAcknowledge        Opcode = 0x11
	OpAtomicAcknowledge  Opcode = 0x12
	OpCompareSwap        Opcode = 0x13
	OpFetchAdd           Opcode = 0x14
	OpSendLastInv        Opcode = 0x16
	OpSendOnlyInv        Opcode = 0x17
	// OpCNP is the RoCEv2 Congestion Notification Packet.
	OpCNP Opcode = 0x81
)

// Class groups opcodes by what a queue pair does with them.
type Class uint8

// Opcode classes.
const (
	ClassUnsupported  Class = iota // known to IB but not modelled (atomics, invalidate: their extension headers are left in Payload), or unknown
	ClassSend                      // SEND_*: consumes a posted receive
	ClassWrite                     // RDMA WRITE_*: placed at the RETH's address
	ClassReadRequest               // RDMA READ request
	ClassReadResponse              // RDMA READ response
	ClassAck                       // ACKNOWLEDGE: ACK, NAK or RNR NAK in the AETH
	ClassCNP                       // congestion notification
)

var classNames = [...]string{"unsupported", "send", "write", "read-request", "read-response", "ack", "cnp"}

// String names the opcode class.
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "class?"
}

// Position says where a packet sits in its message.
type Position uint8

// Packet positions within a message.
const (
	PosOnly   Position = iota // the whole message in one packet
	PosFirst                  // first of several
	PosMiddle                 // neither first nor last
	PosLast                   // last of several
)

// opcode attribute flags.
const (
	hasRETH = 1 << iota
	hasAETH
	hasImm
	hasCNPPad
)

type opInfo struct {
	name  string
	class Class
	pos   Position
	flags uint8
}

var ops = [256]opInfo{
	OpSendFirst:          {"SEND_FIRST", ClassSend, PosFirst, 0},
	OpSendMiddle:         {"SEND_MIDDLE", ClassSend, PosMiddle, 0},
	OpSendLast:           {"SEND_LAST", ClassSend, PosLast, 0},
	OpSendLastImm:        {"SEND_LAST_IMM", ClassSend, PosLast, hasImm},
	OpSendOnly:           {"SEND_ONLY", ClassSend, PosOnly, 0},
	OpSendOnlyImm:        {"SEND_ONLY_IMM", ClassSend, PosOnly, hasImm},
	OpWriteFirst:         {"WRITE_FIRST", ClassWrite, PosFirst, hasRETH},
	OpWriteMiddle:        {"WRITE_MIDDLE", ClassWrite, PosMiddle, 0},
	OpWriteLast:          {"WRITE_LAST", ClassWrite, PosLast, 0},
	OpWriteLastImm:       {"WRITE_LAST_IMM", ClassWrite, PosLast, hasImm},
	OpWriteOnly:          {"WRITE_ONLY", ClassWrite, PosOnly, hasRETH},
	OpWriteOnlyImm:       {"WRITE_ONLY_IMM", ClassWrite, PosOnly, hasRETH | hasImm},
	OpReadRequest:        {"READ_REQUEST", ClassReadRequest, PosOnly, hasRETH},
	OpReadResponseFirst:  {"READ_RESPONSE_FIRST", ClassReadResponse, PosFirst, hasAETH},
	OpReadResponseMiddle: {"READ_RESPONSE_MIDDLE", ClassReadResponse, PosMiddle, 0},
	OpReadResponseLast:   {"READ_RESPONSE_LAST", ClassReadResponse, PosLast, hasAETH},
	OpReadResponseOnly:   {"READ_RESPONSE_ONLY", ClassReadResponse, PosOnly, hasAETH},
	OpAcknowledge:        {"ACKNOWLEDGE", ClassAck, PosOnly, hasAETH},
	OpAtomicAcknowledge:  {"ATOMIC_ACKNOWLEDGE", ClassUnsupported, PosOnly, 0},
	OpCompareSwap:        {"COMPARE_SWAP", ClassUnsupported, PosOnly, 0},
	OpFetchAdd:           {"FETCH_ADD", ClassUnsupported, PosOnly, 0},
	OpSendLastInv:        {"SEND_LAST_INV", ClassUnsupported, PosLast, 0},
	OpSendOnlyInv:        {"SEND_ONLY_INV", ClassUnsupported, PosOnly, 0},
	OpCNP:                {"CNP", ClassCNP, PosOnly, hasCNPPad},
}

// String returns the opcode's name, e.g. "SEND_ONLY_IMM".
func (o Opcode) String() string {
	if n := ops[o].name; n != "" {
		return n
	}
	return "OPCODE_0x" + hex2(uint8(o))
}

func hex2(b uint8) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[b>>4], digits[b&15]})
}

// Class returns what the opcode asks of a queue pair.
func (o Opcode) Class() Class { return ops[o].class }

// Position returns where a packet with this opcode sits in its message.
func (o Opcode) Position() Position { return ops[o].pos }

// HasRETH reports whether packets with this opcode carry a RETH.
func (o Opcode) HasRETH() bool { return ops[o].flags&hasRETH != 0 }

// HasAETH reports whether packets with this opcode carry an AETH.
func (o Opcode) HasAETH() bool { return ops[o].flags&hasAETH != 0 }

// HasImm reports whether packets with this opcode carry immediate data.
func (o Opcode) HasImm() bool { return ops[o].flags&hasImm != 0 }

// HeaderLen returns the bytes of transport headers (BTH and extended
// headers, and for a CNP its 16 reserved bytes) before the payload.
func (o Opcode) HeaderLen() int {
	f := ops[o].flags
	n := BTHSize
	if f&hasRETH != 0 {
		n += RETHSize
	}
	if f&hasAETH != 0 {
		n += AETHSize
	}
	if f&hasImm != 0 {
		n += ImmDtSize
	}
	if f&hasCNPPad != 0 {
		n += CNPPadSize
	}
	return n
}

// Send returns the SEND opcode for a packet at pos, with immediate data on
// the last (or only) packet if imm.
func Send(pos Position, imm bool) Opcode {
	switch pos {
	case PosFirst:
		return OpSendFirst
	case PosMiddle:
		return OpSendMiddle
	case PosLast:
		if imm {
			return OpSendLastImm
		}
		return OpSendLast
	}
	if imm {
		return OpSendOnlyImm
	}
	return OpSendOnly
}

// Write returns the RDMA WRITE opcode for a packet at pos.
func Write(pos Position, imm bool) Opcode {
	switch pos {
	case PosFirst:
		return OpWriteFirst
	case PosMiddle:
		return OpWriteMiddle
	case PosLast:
		if imm {
			return OpWriteLastImm
		}
		return OpWriteLast
	}
	if imm {
		return OpWriteOnlyImm
	}
	return OpWriteOnly
}

// ReadResponse returns the RDMA READ response opcode for a packet at pos.
func ReadResponse(pos Position) Opcode {
	switch pos {
	case PosFirst:
		return OpReadResponseFirst
	case PosMiddle:
		return OpReadResponseMiddle
	case PosLast:
		return OpReadResponseLast
	}
	return OpReadResponseOnly
}

// PositionOf returns the position of packet i (from 0) of an n-packet
// message.
func PositionOf(i, n int) Position {
	switch {
	case n <= 1:
		return PosOnly
	case i == 0:
		return PosFirst
	case i == n-1:
		return PosLast
	}
	return PosMiddle
}
