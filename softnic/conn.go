package softnic

import (
	"fmt"
	"net/netip"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// ConnOptions configure one end of a connection.
type ConnOptions struct {
	// Transport picks the transport; 0 means the NIC's first one.
	Transport transport.Kind
	// PD is the protection domain whose regions the connection may touch,
	// locally and for its peer.
	PD *PD
	// SendCQ receives completions of posted sends (WRITE, SEND, READ);
	// RecvCQ those of posted receives. Either may be nil (completions
	// discarded) and both may be the same queue.
	SendCQ, RecvCQ *CQ
	// OnState, if set, runs when the connection's state changes (for
	// example to established). It runs from the NIC's event, after the
	// transport call that changed the state returned, so it may post work.
	OnState func(c *Conn, s transport.State)
	// Context is the application's value, returned by Conn.Context.
	Context any
	// Service is, for Dial, the service (rdma_cm's port) to ask the peer
	// for: its NIC hands the request to the listener of that service. 0 is
	// the in-lab workloads' service. Accepted connections get the
	// listener's.
	Service uint16
	// PinPort binds a dialed single-path connection (a RoCEv2 QP) to NIC
	// port Port (see transport.Config.PinPort); an accepted one follows its
	// peer.
	PinPort bool
	Port    int
}

// ListenOptions configure how a NIC accepts connection requests for one
// service (ConnOptions.Service): the accepted connection's options and a
// callback run once per new connection, once its dialer has completed the
// handshake (guard.go: until then it is half-open and bounded). Requests
// for a service nobody listens on are counted drops (DropNoListener); the
// dialer's setup then times out.
type ListenOptions struct {
	ConnOptions
	// OnConn runs for each accepted connection whose handshake completed
	// (never for a setup request alone). It may post receives.
	OnConn func(c *Conn)
}

// Conn is one end of a connection: a transport connection, its timer, its
// completion queues and its counters. Like the NIC, it is driven from the
// event loop and not safe for concurrent use.
type Conn struct {
	nic     *NIC
	tc      transport.Conn
	ctl     transport.ControlTransmitter // tc's control-only transmit, or nil
	pend    pender                       // tc saying when it has nothing to send, or nil
	proto   *protoEntry
	id      uint32
	peerU32 uint32
	peer    netip.Addr
	mem     memView
	scq     *CQ
	rcq     *CQ
	timer   sim.Timer
	links   []link
	onState func(*Conn, transport.State)
	ctx     any
	stats   ConnStats
	setup   *setupKey // the request that opened a passive end
	service uint16
	// nextPort is the port offered the connection's next data packet
	// first when several of the NIC's ports are idle (markReady): the one
	// after the port of its previous data packet.
	nextPort uint16
	state    transport.State
	retired  bool
	// halfOpen: a passive end whose handshake has not completed, not yet
	// handed to its listener (guard.go); src is its peer's source entry
	// (set when first needed); poisoned: it caused a remote access
	// error, and every later remote access on it is refused.
	halfOpen, poisoned bool
	src                *source
}

// Listen makes the NIC accept connection requests for l.Service with the
// given options, replacing an earlier listener of that service.
func (n *NIC) Listen(l *ListenOptions) error {
	if l.PD != nil && l.PD.nic != n {
		return fmt.Errorf("listening on NIC %q: %w", n.name, ErrBadPD)
	}
	if n.listen == nil {
		n.listen = make(map[uint16]*ListenOptions)
	}
	n.listen[l.Service] = l
	return nil
}

// StopListening stops accepting requests for service. Connections already
// accepted are not affected.
func (n *NIC) StopListening(service uint16) { delete(n.listen, service) }

// Dial opens a connection to the NIC at peer. It returns at once, in state
// connecting: the transport sends its setup request over the fabric when a
// port is free, and OnState reports when the connection is established.
func (n *NIC) Dial(peer netip.Addr, opts ConnOptions) (*Conn, error) {
	if !peer.Is4() {
		return nil, fmt.Errorf("dialing %v from %q: not an IPv4 address", peer, n.name)
	}
	if opts.PD != nil && opts.PD.nic != n {
		return nil, fmt.Errorf("dialing %v from %q: %w", peer, n.name, ErrBadPD)
	}
	var e *protoEntry
	if opts.Transport == 0 && len(n.protos) > 0 {
		e = &n.protos[0]
	} else {
		e = n.protoByKind(opts.Transport)
	}
	if e == nil {
		return nil, fmt.Errorf("dialing %v from %q with %v: %w", peer, n.name, opts.Transport, ErrNoProtocol)
	}
	now := n.sched.Now()
	if opts.PinPort && (opts.Port < 0 || opts.Port >= len(n.ports)) {
		return nil, fmt.Errorf("dialing %v from %q: port %d, but the NIC has ports 0 to %d", peer, n.name, opts.Port, len(n.ports)-1)
	}
	c := n.newConn(e, peer, opts)
	cfg := n.connConfig(c)
	cfg.PinPort, cfg.Port = opts.PinPort, opts.Port
	tc, err := e.p.Dial(now, cfg)
	if err != nil {
		n.conns = n.conns[:len(n.conns)-1]
		return nil, fmt.Errorf("dialing %v from %q with %v: %w", peer, n.name, e.kind, err)
	}
	c.setTransport(tc)
	n.tellPorts(now, c)
	c.state = tc.State()
	n.afterIO(now, c)
	return c, nil
}

// newConn allocates the next local id and registers the connection; the
// caller sets tc or unregisters it.
func (n *NIC) newConn(e *protoEntry, peer netip.Addr, opts ConnOptions) *Conn {
	c := &Conn{
		nic:     n,
		proto:   e,
		id:      n.connBase + uint32(len(n.conns)) + 1,
		peer:    peer,
		scq:     opts.SendCQ,
		rcq:     opts.RecvCQ,
		links:   make([]link, 2*len(n.ports)), // data lists, then control lists
		onState: opts.OnState,
		ctx:     opts.Context,
		service: opts.Service,
	}
	c.mem = memView{nic: n, pd: opts.PD, conn: c}
	a := peer.As4()
	c.peerU32 = uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	c.stats.PortTxPackets = make([]uint64, len(n.ports))
	c.timer.Init(n.fireConn, c)
	c.timer.Own(n.org)
	n.conns = append(n.conns, c)
	return c
}

func (c *Conn) complete(tc transport.Completion) {
	cq := c.scq
	if tc.Op == transport.OpRecv || tc.Op == transport.OpRecvImm {
		cq = c.rcq
	} else if tc.Status == transport.StatusOK {
		c.stats.BytesCompleted += uint64(tc.Bytes)
	}
	if cq != nil {
		cq.push(Completion{Completion: tc, Conn: c})
	}
}

// PostSend posts a WRITE, WRITE_IMM, SEND, SEND_IMM or READ. The error is
// the transport's immediate refusal (transport.ErrQueueFull,
// ErrNotConnected, ErrBadRequest, ErrClosed); everything else is reported by
// a completion on the send queue.
func (c *Conn) PostSend(wr *transport.WorkRequest) error {
	now := c.nic.sched.Now()
	err := c.tc.PostSend(now, wr)
	c.nic.afterIO(now, c)
	return err
}

// PostRecv posts a receive buffer for incoming SENDs; its errors are
// PostSend's.
func (c *Conn) PostRecv(wr *transport.WorkRequest) error {
	now := c.nic.sched.Now()
	err := c.tc.PostRecv(now, wr)
	c.nic.afterIO(now, c)
	return err
}

// Close starts tearing the connection down; queued requests complete with
// transport.StatusFlushed.
func (c *Conn) Close() {
	now := c.nic.sched.Now()
	c.tc.Close(now)
	c.nic.afterIO(now, c)
}

// Conn returns the NIC's connection with local id id, or nil if it has
// none (never had, or retired it).
func (n *NIC) Conn(id uint32) *Conn {
	i := n.connIndex(id)
	if i < 0 {
		return nil
	}
	return n.conns[i]
}

// Refuse closes a connection the application did not ask for (a
// listener's OnConn seeing a request from an unexpected peer): the peer
// is told on the wire, as by Close, and the NIC counts it in
// Stats.Refused.
func (c *Conn) Refuse() {
	c.nic.stats.Refused++
	c.Close()
}

// State returns the connection's state.
func (c *Conn) State() transport.State { return c.tc.State() }

// ID returns the local connection id (MetaRoCE) or QPN (RoCEv2).
func (c *Conn) ID() uint32 { return c.id }

// Peer returns the peer NIC's address.
func (c *Conn) Peer() netip.Addr { return c.peer }

// NIC returns the NIC the connection belongs to.
func (c *Conn) NIC() *NIC { return c.nic }

// Kind returns the connection's transport.
func (c *Conn) Kind() transport.Kind { return c.proto.kind }

// Service returns the service the connection was dialed to or accepted on.
func (c *Conn) Service() uint16 { return c.service }

// Context returns the value set in ConnOptions.Context.
func (c *Conn) Context() any { return c.ctx }

// SetContext replaces the connection's application value.
func (c *Conn) SetContext(v any) { c.ctx = v }

// Transport returns the transport connection, for transport-specific
// inspection (tests, traces). Driving it directly bypasses the NIC's timer
// and scheduling; use the Conn's methods for that.
func (c *Conn) Transport() transport.Conn { return c.tc }

// Stats returns a copy of the NIC-side counters for the connection.
func (c *Conn) Stats() ConnStats {
	s := c.stats
	s.PortTxPackets = append([]uint64(nil), c.stats.PortTxPackets...)
	return s
}

// maxConnBase bounds the random base of connection ids (KeySource): ids
// stay below 2^24, the widest every transport carries (RoCEv2 QPNs).
const maxConnBase = 1 << 23

// connIndex returns the index in n.conns of connection id, or -1.
func (n *NIC) connIndex(id uint32) int {
	i := id - n.connBase - 1 // wraps to a huge value for ids below the base
	if id == 0 || uint64(i) >= uint64(len(n.conns)) {
		return -1
	}
	return int(i)
}

// setTransport attaches the transport connection and notes whether it
// sends control packets on their own (served ahead of data: nicPort).
func (c *Conn) setTransport(tc transport.Conn) {
	c.tc = tc
	c.ctl, _ = tc.(transport.ControlTransmitter)
	if c.ctl != nil {
		c.pend, _ = tc.(pender)
	}
	if w, ok := tc.(transport.Waker); ok {
		w.SetWake(func() { c.nic.wake(c) })
	}
}

// pender is a connection that sends control on its own and says when it
// has nothing to send (transport.ControlPender, TransmitPender). The NIC
// skips asks only of a connection that says both (MetaRoCE): one field,
// so that Conn stays in its size class (352 bytes).
type pender interface {
	transport.ControlPender
	transport.TransmitPender
}
