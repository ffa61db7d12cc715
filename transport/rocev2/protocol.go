package rocev2

import (
	"errors"
	"fmt"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

// cmQPN is the queue pair connection management messages are sent to.
const cmQPN = 1

// Demux and Accept errors (sentinels: a malformed packet costs the NIC a
// counter, not an allocation).
var (
	ErrShortPayload = errors.New("rocev2: payload shorter than BTH and ICRC")
	ErrBadQPN       = errors.New("rocev2: destination QP is reserved or out of range")
	ErrNotCM        = errors.New("rocev2: QP1 packet is not a CM SEND_ONLY")
	ErrNotREQ       = errors.New("rocev2: setup payload is not a CM REQ")
	ErrBadConfig    = errors.New("rocev2: bad connection config")
)

// IPSealer is implemented by protocols whose packets end in a CRC over the
// whole IPv4 packet. A NIC finds it with a type assertion on its
// transport.Protocol, seals every packet after framing and checks every
// packet before Demux.
type IPSealer interface {
	Seal(ip []byte)
	Check(ip []byte) bool
}

// Protocol is the RoCEv2 transport of one NIC. It is not safe for
// concurrent use; the NIC's event loop owns it.
type Protocol struct {
	opts Options
	err  error // from resolving the options; Dial and Accept return it
	// accepted maps the transaction id of every REQ this NIC accepted to
	// the LocalID of the QP it opened, so a repeated REQ (our REP was
	// lost) reaches that QP instead of opening a second one.
	accepted map[uint64]uint32
}

var _ transport.Protocol = (*Protocol)(nil)

var (
	_ transport.Protocol      = (*Protocol)(nil)
	_ transport.ServiceReader = (*Protocol)(nil)
	_ IPSealer                = (*Protocol)(nil)
)

// NewProtocol returns the RoCEv2 transport for one NIC. Invalid options are
// reported by Dial and Accept.
func NewProtocol(opts Options) *Protocol {
	o, err := opts.resolved()
	return &Protocol{opts: o, err: err, accepted: make(map[uint64]uint32)}
}

// Options returns the options with defaults filled in.
func (p *Protocol) Options() Options { return p.opts }

// Kind returns transport.RoCEv2.
func (p *Protocol) Kind() transport.Kind { return transport.RoCEv2 }

// UDPPort returns 4791.
func (p *Protocol) UDPPort() uint16 { return UDPPort }

// Seal writes the ICRC of a framed IPv4 packet (see SealICRC).
func (p *Protocol) Seal(ip []byte) { SealICRC(ip) }

// Check verifies the ICRC of a received IPv4 packet (see CheckICRC).
func (p *Protocol) Check(ip []byte) bool { return CheckICRC(ip) }

// Demux returns the LocalID a payload is for: the BTH's destination QP
// minus QPNOffset. Connection management goes to QP1: a REQ is a setup
// request (setup=true) unless this NIC already accepted it; REP, RTU, DREQ
// and DREP go to the QP named in the message.
func (p *Protocol) Demux(payload []byte) (id uint32, setup bool, err error) {
	if len(payload) < ib.BTHSize+ib.ICRCSize {
		return 0, false, ErrShortPayload
	}
	bth := ib.BTH(payload)
	if bth.TVer() != 0 {
		return 0, false, ib.ErrVersion
	}
	qp := bth.DestQP()
	if qp == cmQPN {
		m, err := decodeCM(payload)
		if err != nil {
			return 0, false, err
		}
		if m.Attr() == CMReq {
			if id, ok := p.accepted[m.TID()]; ok {
				return id, false, nil
			}
			return 0, true, nil
		}
		qp = m.ReceiverQPN()
	}
	if qp <= QPNOffset {
		return 0, false, ErrBadQPN
	}
	return qp - QPNOffset, false, nil
}

// SetupService returns the port a CM REQ asks for (0 for any other
// payload).
func (p *Protocol) SetupService(payload []byte) uint16 {
	m, err := decodeCM(payload)
	if err != nil || m.Attr() != CMReq {
		return 0
	}
	return m.Service()
}

// decodeCM returns the valid CM message a QP1 payload carries.
func decodeCM(payload []byte) (CMMessage, error) {
	var pk ib.Packet
	if err := pk.Decode(payload); err != nil {
		return nil, err
	}
	if pk.BTH.Opcode() != ib.OpSendOnly {
		return nil, ErrNotCM
	}
	m := CMMessage(pk.Payload)
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// Dial opens the active end of a connection: a QP that sends a CM REQ when
// it is first asked to Transmit and is established when the REP arrives.
// Work requests may be posted at once; they are sent once established.
func (p *Protocol) Dial(now sim.Time, cfg transport.Config) (transport.Conn, error) {
	if p.err != nil {
		return nil, fmt.Errorf("dialing RoCEv2 QP (LocalID %d): %w", cfg.LocalID, p.err)
	}
	c, err := newConn(p, now, cfg, true)
	if err != nil {
		return nil, fmt.Errorf("dialing RoCEv2 QP (LocalID %d): %w", cfg.LocalID, err)
	}
	return c, nil
}

// Accept opens the passive end from a CM REQ: the QP is ready to receive
// (IB's RTR) and answers with a REP; it is established when the RTU or the
// first request packet arrives.
func (p *Protocol) Accept(now sim.Time, cfg transport.Config, payload []byte, rx transport.RxMeta) (transport.Conn, error) {
	if p.err != nil {
		return nil, fmt.Errorf("accepting RoCEv2 QP (LocalID %d): %w", cfg.LocalID, p.err)
	}
	m, err := decodeCM(payload)
	if err != nil {
		return nil, fmt.Errorf("accepting RoCEv2 QP (LocalID %d): %w", cfg.LocalID, err)
	}
	if m.Attr() != CMReq {
		return nil, fmt.Errorf("accepting RoCEv2 QP (LocalID %d) from a CM %v: %w", cfg.LocalID, m.Attr(), ErrNotREQ)
	}
	c, err := newConn(p, now, cfg, false)
	if err != nil {
		return nil, fmt.Errorf("accepting RoCEv2 QP (LocalID %d): %w", cfg.LocalID, err)
	}
	if !p.opts.PinPort && rx.Port >= 0 && rx.Port < cfg.Ports {
		c.port = rx.Port
	}
	c.acceptREQ(now, m)
	p.accepted[c.tid] = cfg.LocalID
	return c, nil
}

// forget drops a closed passive QP's REQ from the table.
func (p *Protocol) forget(c *Conn) {
	if !c.active {
		if id, ok := p.accepted[c.tid]; ok && id == c.localID {
			delete(p.accepted, c.tid)
		}
	}
}

// sourcePort is a QP's fixed UDP source port: 0xC000 plus 14 bits of a
// multiplicative hash of the QPN, as Linux rxe computes it
// (RXE_ROCE_V2_SPORT + hash_32(qpn, 14)).
func sourcePort(qpn uint32) uint16 {
	return 0xC000 | uint16((qpn*0x61C88647)>>18)&0x3FFF
}
