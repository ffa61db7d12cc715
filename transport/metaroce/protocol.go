package metaroce

import (
	"errors"
	"fmt"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// Protocol is the MetaRoCE transport of one NIC. It holds what is
// NIC-wide: the options every connection uses, the receiver fair-share
// allocator that divides the NIC's inbound capacity among the senders
// talking to it, and the nonces of accepted connections (so a repeated SYN
// reaches its connection instead of opening a second one). It is not safe
// for concurrent use; the NIC's event loop owns it.
type Protocol struct {
	opts     Options
	err      error
	alloc    *allocator
	send     sendBudget        // what the NIC's connections pace at together (sendshare.go)
	accepted map[uint64]uint32 // SYN nonce -> local connection id
	ports    int
	lineRate float64
	// lastAcks holds, for a connection closed while its receiver owed an
	// ACK, that ACK until it is sent, before the CLOSE (Conn.Close). Here
	// rather than in Conn, which stays within its size class.
	lastAcks map[*Conn]lastAck
	// entropy0 holds, for a connection whose sending paths are not
	// allocated yet (Conn.ensurePaths), the entropies drawn for them.
	entropy0 map[*Conn][]uint16
	// lateMemo is the last Conn.lateMax answer of this NIC's connections.
	lateMemo lateMemo
	// portsDown is the NIC's ports known down (Conn.SetPortsUp), bit i
	// for port i: NIC-wide state, here rather than in Conn, which stays
	// within its size class.
	portsDown uint32
	// wakes holds the NIC's wake function of each connection
	// (transport.Waker), grantees the accepted connections by allocator
	// slot: an acceptor revising a first grant (allocator.reviseGrants)
	// wakes the connection that owes the revision.
	wakes    map[*Conn]func()
	grantees map[int32]*Conn
}

// lastAck is an ACK encoded at Close, sent on port with entropy sport.
type lastAck struct {
	b     []byte
	port  int
	sport uint16
}

var (
	_ transport.Protocol      = (*Protocol)(nil)
	_ transport.ServiceReader = (*Protocol)(nil)
)

// Errors from Demux, Dial and Accept.
var (
	ErrNotSetup = errors.New("metaroce: setup payload is not a SYN")
)

// NewProtocol returns the MetaRoCE transport for one NIC. Invalid options
// are reported by Dial and Accept.
func NewProtocol(opts Options) *Protocol {
	o, err := opts.withDefaults()
	return &Protocol{opts: o, err: err, accepted: make(map[uint64]uint32)}
}

// Options returns the options with defaults filled in.
func (p *Protocol) Options() Options { return p.opts }

// Kind returns transport.MetaRoCE.
func (p *Protocol) Kind() transport.Kind { return transport.MetaRoCE }

// UDPPort returns the MetaRoCE destination port (Options.UDPPort).
func (p *Protocol) UDPPort() uint16 { return p.opts.UDPPort }

// Demux reads the destination connection id. A SYN is a setup request
// unless its nonce belongs to a connection this NIC already accepted.
// Integrity is checked by the connection, not here.
func (p *Protocol) Demux(payload []byte) (id uint32, setup bool, err error) {
	if len(payload) < wire.CommonSize+wire.TrailerSize {
		return 0, false, wire.ErrShort
	}
	h := wire.Header(payload)
	if h.Version() != wire.Version {
		return 0, false, wire.ErrVersion
	}
	if h.Type() == wire.TypeSyn {
		if len(payload) < wire.SetupSize+wire.TrailerSize {
			return 0, false, wire.ErrLength
		}
		if id, ok := p.accepted[wire.Setup(payload).Nonce()]; ok {
			return id, false, nil
		}
		return 0, true, nil
	}
	return h.DstConn(), false, nil
}

// SetupService returns the service a SYN asks for (0 for anything else
// or a payload too short to be a SYN).
func (p *Protocol) SetupService(payload []byte) uint16 {
	if len(payload) < wire.SetupSize || wire.Header(payload).Type() != wire.TypeSyn {
		return 0
	}
	return wire.Setup(payload).Service()
}

// nicSetup records the NIC's capacity the first time a connection shows
// it, and creates the allocator.
func (p *Protocol) nicSetup(cfg transport.Config) {
	if p.alloc == nil {
		p.ports, p.lineRate = cfg.Ports, cfg.LineRate
		capacity := float64(cfg.Ports) * cfg.LineRate / 8 * p.opts.HintUtilization
		p.alloc = newAllocator(capacity, p.opts.RTOMax, p.opts.ECNGain)
		p.alloc.ports = max(1, cfg.Ports)
		p.alloc.holdGrants = p.opts.HoldFirstGrant
		if p.opts.ReviseFirstGrant {
			p.alloc.revise = p.reviseGrant
		}
		p.send.capacity = int64(capacity / 1000)
	}
}

// Dial opens the active end of a connection. It sends its SYN when first
// asked to Transmit; work requests may be posted at once.
func (p *Protocol) Dial(now sim.Time, cfg transport.Config) (transport.Conn, error) {
	if p.err != nil {
		return nil, fmt.Errorf("metaroce: dialing: %w", p.err)
	}
	c, err := newConn(p, now, cfg, true)
	if err != nil {
		return nil, fmt.Errorf("metaroce: dialing: %w", err)
	}
	p.nicSetup(cfg)
	c.nonce = c.cfg.Rand.Uint64() | 1
	c.startCtl(wire.TypeSyn)
	return c, nil
}

// Accept opens the passive end from a SYN. It answers with a SYN_ACK
// (retried until the dialer answers) and is Established at once; it sends
// data only after the dialer has confirmed.
func (p *Protocol) Accept(now sim.Time, cfg transport.Config, payload []byte, rx transport.RxMeta) (transport.Conn, error) {
	if p.err != nil {
		return nil, fmt.Errorf("metaroce: accepting: %w", p.err)
	}
	typ, body, err := wire.Parse(payload)
	if err != nil {
		return nil, fmt.Errorf("metaroce: accepting: %w", err)
	}
	if typ != wire.TypeSyn {
		return nil, fmt.Errorf("metaroce: accepting %v: %w", typ, ErrNotSetup)
	}
	s, err := wire.DecodeSetup(body)
	if err != nil {
		return nil, fmt.Errorf("metaroce: accepting: %w", err)
	}
	c, err := newConn(p, now, cfg, false)
	if err != nil {
		return nil, fmt.Errorf("metaroce: accepting: %w", err)
	}
	p.nicSetup(cfg)
	if rx.Port >= 0 && rx.Port < cfg.Ports {
		c.ctl.basePort = uint8(rx.Port)
	}
	c.accept(s)
	p.accepted[c.nonce] = c.id
	return c, nil
}

// forget removes a closed connection from the NIC-wide tables.
func (p *Protocol) forget(c *Conn) {
	if !c.dialer {
		if id, ok := p.accepted[c.nonce]; ok && id == c.id {
			delete(p.accepted, c.nonce)
		}
	}
	if c.slot >= 0 {
		if p.grantees[c.slot] == c {
			delete(p.grantees, c.slot)
		}
		p.alloc.unregister(c.slot)
		c.slot = -1
	}
	delete(p.wakes, c)
	delete(p.entropy0, c) // it never sent, and no longer will
	c.noteBacklog(true)
}

// reviseGrant lowers the first grant of the accepted connection in slot
// s to g bytes per second (allocator.revise): false if there is no such
// connection or its NIC cannot wake it.
func (p *Protocol) reviseGrant(s int32, g float64) bool {
	c := p.grantees[s]
	return c != nil && c.reviseFirstShare(g)
}

// ActiveSenders returns how many senders the NIC's fair-share allocator
// counted as active when it last ran.
func (p *Protocol) ActiveSenders() int {
	if p.alloc == nil {
		return 0
	}
	return p.alloc.active
}
