package rocev2

import (
	"encoding/binary"
	"errors"
)

// Connection management. Real RoCE sets up an RC QP with CM MADs (REQ, REP,
// RTU) sent to QP1 of the peer. mrlab carries a simplified CM message as the
// payload of an RC SEND_ONLY to destination QP 1 (so Wireshark shows a BTH
// addressed to QP1 and the message as data). Its first 24 bytes have the
// shape of a MAD common header so a reader recognizes it; the body is
// mrlab's own and is not a real CM attribute:
//
//	off len field
//	 0   1  base version      1
//	 1   1  management class  0x07 (communication management)
//	 2   1  class version     2
//	 3   1  method            0x03 (Send)
//	 4   2  status            0
//	 6   2  class specific    0
//	 8   8  transaction id    the active side's random connection id; every
//	                          message of one connection carries it
//	16   2  attribute id      0x0010 REQ, 0x0013 REP, 0x0014 RTU,
//	                          0x0015 DREQ, 0x0016 DREP (the IB CM ids)
//	18   2  reserved          0
//	20   4  attribute modifier 0
//	24   4  sender QPN        (24 bits)
//	28   4  receiver QPN      (24 bits; 0 in a REQ)
//	32   4  starting PSN      the sender's first request PSN (24 bits)
//	36   2  path MTU          in bytes (256..4096)
//	38   1  read depth        RDMA READs the sender will have outstanding
//	                          and will serve (responder resources)
//	39   1  reserved          0
//	40   8  service id        in a REQ, the service (port) asked for,
//	                          encoded as rdma_cm encodes a port of its TCP
//	                          port space: 0x0000000001060000 | port; 0 in
//	                          the other messages
//
// The exchange is REQ (active) -> REP (passive) -> RTU (active). Each side
// retries its message every CMTimeout until it hears the next one; the
// passive side also treats the first valid request packet as an RTU, as
// an IB QP in RTR does. DREQ/DREP close a connection.

// CMSize is the length of a CM message.
const CMSize = 48

// serviceIDBase is rdma_cm's service id prefix for its TCP port space
// (RDMA_PS_TCP 0x0106): a service id is this ORed with the port.
const serviceIDBase = 0x0106 << 16

// CMAttr is a CM message's attribute id.
type CMAttr uint16

// CM attributes used by mrlab.
const (
	CMReq  CMAttr = 0x0010
	CMRep  CMAttr = 0x0013
	CMRTU  CMAttr = 0x0014
	CMDReq CMAttr = 0x0015
	CMDRep CMAttr = 0x0016
)

// String names the CM message.
func (a CMAttr) String() string {
	switch a {
	case CMReq:
		return "REQ"
	case CMRep:
		return "REP"
	case CMRTU:
		return "RTU"
	case CMDReq:
		return "DREQ"
	case CMDRep:
		return "DREP"
	}
	return "CM?"
}

// CM header constants.
const (
	madBaseVersion  = 1
	madClassCM      = 0x07
	madClassVersion = 2
	madMethodSend   = 0x03
)

// Errors from CMMessage.Validate.
var (
	ErrCMShort   = errors.New("rocev2: CM message shorter than 48 bytes")
	ErrCMHeader  = errors.New("rocev2: CM message header is not a CM Send MAD")
	ErrCMAttr    = errors.New("rocev2: unknown CM attribute")
	ErrCMMTU     = errors.New("rocev2: CM message path MTU not 256..4096, power of two")
	ErrCMQPN     = errors.New("rocev2: CM message QPN out of range")
	ErrCMService = errors.New("rocev2: CM message service id is not an rdma_cm TCP port (or not in a REQ)")
)

// CMMessage is a view of a CM message.
type CMMessage []byte

// CMFields are a CM message's variable fields.
type CMFields struct {
	Attr        CMAttr
	TID         uint64
	SenderQPN   uint32
	ReceiverQPN uint32
	StartPSN    uint32
	MTU         int
	ReadDepth   uint8
	// Service is the port a REQ asks for (0 in other messages).
	Service uint16
}

// Encode writes the CMSize-byte message.
func (m CMMessage) Encode(f *CMFields) {
	_ = m[CMSize-1]
	clear(m[:CMSize])
	m[0], m[1], m[2], m[3] = madBaseVersion, madClassCM, madClassVersion, madMethodSend
	binary.BigEndian.PutUint64(m[8:16], f.TID)
	binary.BigEndian.PutUint16(m[16:18], uint16(f.Attr))
	binary.BigEndian.PutUint32(m[24:28], f.SenderQPN&0xFFFFFF)
	binary.BigEndian.PutUint32(m[28:32], f.ReceiverQPN&0xFFFFFF)
	binary.BigEndian.PutUint32(m[32:36], f.StartPSN&0xFFFFFF)
	binary.BigEndian.PutUint16(m[36:38], uint16(f.MTU))
	m[38] = f.ReadDepth
	if f.Attr == CMReq {
		binary.BigEndian.PutUint64(m[40:48], serviceIDBase|uint64(f.Service))
	}
}

// Validate checks the length, the MAD header, the attribute, the QPNs and
// the MTU.
func (m CMMessage) Validate() error {
	if len(m) < CMSize {
		return ErrCMShort
	}
	if m[0] != madBaseVersion || m[1] != madClassCM || m[2] != madClassVersion || m[3] != madMethodSend {
		return ErrCMHeader
	}
	switch m.Attr() {
	case CMReq, CMRep, CMRTU, CMDReq, CMDRep:
	default:
		return ErrCMAttr
	}
	if sid := m.ServiceID(); sid != 0 && (m.Attr() != CMReq || sid&^0xFFFF != serviceIDBase) {
		return ErrCMService
	}
	if binary.BigEndian.Uint32(m[24:28]) > 0xFFFFFF || binary.BigEndian.Uint32(m[28:32]) > 0xFFFFFF {
		return ErrCMQPN
	}
	if m.Attr() == CMReq || m.Attr() == CMRep {
		if !validMTU(m.MTU()) {
			return ErrCMMTU
		}
		if m.SenderQPN() < QPNOffset {
			return ErrCMQPN
		}
	}
	return nil
}

// Attr returns the attribute id.
func (m CMMessage) Attr() CMAttr { return CMAttr(binary.BigEndian.Uint16(m[16:18])) }

// TID returns the transaction (connection) id.
func (m CMMessage) TID() uint64 { return binary.BigEndian.Uint64(m[8:16]) }

// SenderQPN returns the sender's QPN.
func (m CMMessage) SenderQPN() uint32 { return binary.BigEndian.Uint32(m[24:28]) }

// ReceiverQPN returns the receiver's QPN (0 in a REQ).
func (m CMMessage) ReceiverQPN() uint32 { return binary.BigEndian.Uint32(m[28:32]) }

// StartPSN returns the sender's starting PSN.
func (m CMMessage) StartPSN() uint32 { return binary.BigEndian.Uint32(m[32:36]) & 0xFFFFFF }

// MTU returns the sender's path MTU in bytes.
func (m CMMessage) MTU() int { return int(binary.BigEndian.Uint16(m[36:38])) }

// ReadDepth returns the sender's RDMA READ depth.
func (m CMMessage) ReadDepth() uint8 { return m[38] }

// ServiceID returns the service id (0 outside a REQ).
func (m CMMessage) ServiceID() uint64 { return binary.BigEndian.Uint64(m[40:48]) }

// Service returns the port a REQ asks for.
func (m CMMessage) Service() uint16 { return uint16(m.ServiceID()) }

// validMTU reports whether n is an IB path MTU.
func validMTU(n int) bool {
	switch n {
	case 256, 512, 1024, 2048, 4096:
		return true
	}
	return false
}
