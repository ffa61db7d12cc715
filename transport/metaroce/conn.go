package metaroce

import (
	"math"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// Conn is one end of a MetaRoCE connection: the sending side (messages,
// chunks, paths, congestion control) and the receiving side (placement,
// ordered completion, ACKs) of one peer pair. It implements
// transport.Conn and is not safe for concurrent use.
//
// A NIC holds thousands: Conn is kept within 1528 bytes, so that with the
// allocator's 8-byte header it fits the 1536-byte size class
// (BenchmarkConnState4000 measures the state per connection).
type Conn struct {
	proto *Protocol
	opts  *Options
	cfg   transport.Config
	id    uint32
	peer  uint32
	slot  int32 // our sender slot in the Protocol's allocator
	state transport.State
	// dialer is the active end; confirmed says (for the passive end) that
	// the dialer has answered our SYN_ACK, so data may flow.
	dialer, confirmed bool
	// rnrRetries is rnr_retry as the transport counts it: Options.RNRRetries
	// (clamped to 0..126) unless SetRNRRetry; negative is forever. An int8
	// fits the padding here, keeping Conn in its size class.
	rnrRetries   int8
	nonce        uint64
	mss          int
	lineBytes    float64  // Ports x LineRate in bytes per second
	ackDelay     sim.Time // the longest we hold an ACK (Options.AckDelay or derived)
	peerAckDelay sim.Time // the longest the peer holds one (from its SYN or SYN_ACK)

	// What the peer accepts from us (int32: the room the proactive copies'
	// state below takes, keeping Conn in its size class).
	peerPaths int32
	msgWindow int32
	dsnWindow int32

	// Proactive copies (redundancy.go): copyNext is the first DSN not yet
	// considered for a copy, copyFlight the payload bytes of chunks copied
	// and not yet settled (the second transmission's wire, which the
	// window does not count), copies how many copies went.
	copyNext   uint32
	copyFlight int32
	copies     uint32

	// timers is a private timer heap; Deadline is its earliest entry.
	timers    sim.Loop
	ctlTimer  sim.Timer
	ackTimer  sim.Timer
	paceTimer sim.Timer
	rnrTimer  sim.Timer
	now       sim.Time

	ctl ctlState
	s   sndState
	r   rcvState

	allFailedSince sim.Time
	st             connCounters
}

// ctlState is the connection-management packet (if any) the connection
// owes the peer.
type ctlState struct {
	firstAt sim.Time // when its first attempt was made (the handshake's RTT)
	// echo is the ts of the peer's latest SYN (we are the acceptor) or
	// SYN_ACK (we are the dialer), which arrived at echoAt; our SYN_ACK or
	// EST echoes it advanced by the time we held it (ctlEcho).
	echoAt sim.Time
	echo   uint32
	tries  uint16
	sport  uint16
	// One-shot replies (est, closeAck), sent on the port the request came
	// in on.
	replySport uint16
	pending    wire.Type // SYN, SYN_ACK or CLOSE while unanswered; 0 if none
	due        bool      // send pending on the next Transmit on port
	est        bool
	closeAck   bool
	port       uint8
	// basePort is where attempts start (a SYN_ACK: the SYN's port); each
	// retry moves to the next port.
	basePort  uint8
	replyPort uint8
	// flight is whether the dialer's first data packet has gone and when
	// (flightNone, flightInTime, flightLate): whether the first flight
	// started in time is judged then (firstFlight).
	flight uint8

	// firstShare is the first_share our SYN_ACK offers (firstShareFor),
	// lowered by revisions (reviseFirstShare); revise: a revision is owed.
	firstShare uint16
	revise     bool
	// sendBucket is the bucket of the connection's part of the NIC's
	// sending budget, 0 if none (sendshare.go).
	sendBucket uint8
	// firstCredit (a dialer's) is what of the first flight its SYN_ACK's
	// share allowed was still in flight when the first ACK came, less the
	// bytes acknowledged since: it is over and above W (cc.go), so the
	// sender goes on at its hint instead of pausing a round trip while
	// the flight drains.
	firstCredit int32
	// revisions counts SYN_ACKs sent with REVISE (ConnStats.GrantRevisions):
	// here, not in connCounters, because it fills what was this struct's
	// padding (Conn keeps its size class: TestConnSize).
	revisions uint32
}

var (
	_ transport.Conn           = (*Conn)(nil)
	_ transport.ControlPender  = (*Conn)(nil)
	_ transport.TransmitPender = (*Conn)(nil)
)

func ctlTimerFired(now sim.Time, arg any)  { arg.(*Conn).onCtlTimer() }
func ackTimerFired(now sim.Time, arg any)  { arg.(*Conn).onAckTimer() }
func paceTimerFired(now sim.Time, arg any) {}
func rnrTimerFired(now sim.Time, arg any)  { arg.(*Conn).onRNRTimer() }

// newConn builds either end of a connection.
func newConn(p *Protocol, now sim.Time, cfg transport.Config, dialer bool) (*Conn, error) {
	if cfg.LocalID == 0 || cfg.Ports < 1 || cfg.Ports > 255 || cfg.LineRate <= 0 ||
		cfg.Memory == nil || cfg.Complete == nil {
		return nil, errBadConfig
	}
	if cfg.PathMTU == 0 {
		cfg.PathMTU = 4096
	}
	if cfg.PathMTU < 256 || cfg.PathMTU > 9000 {
		return nil, errBadMTU
	}
	c := &Conn{
		proto:     p,
		opts:      &p.opts,
		cfg:       cfg,
		id:        cfg.LocalID,
		state:     transport.StateConnecting,
		dialer:    dialer,
		mss:       cfg.PathMTU,
		lineBytes: float64(cfg.Ports) * cfg.LineRate / 8,
		slot:      -1,
		now:       now,
	}
	if c.cfg.Rand == nil {
		c.cfg.Rand = sim.NewRand(uint64(cfg.LocalID), "metaroce")
	}
	c.rnrRetries = int8(min(c.opts.RNRRetries, math.MaxInt8-1))
	if c.opts.RNRRetries < 0 {
		c.rnrRetries = -1
	}
	c.ackDelay = c.opts.AckDelay
	if c.ackDelay == 0 {
		c.ackDelay = sim.Time(c.opts.AckEvery) * c.serialize(c.mss+dataOverhead)
	}
	c.ctlTimer.Init(ctlTimerFired, c)
	c.ackTimer.Init(ackTimerFired, c)
	c.paceTimer.Init(paceTimerFired, c)
	c.rnrTimer.Init(rnrTimerFired, c)
	c.timers.AdvanceTo(now)
	paths := c.configuredPaths()
	c.s.sel = &pathSel{pick: make([]portPick, cfg.Ports)}
	c.s.roomEpoch = 1
	c.s.dctcp = newDCTCP()
	c.s.pathsChanged()
	// The paths' entropies are drawn now, in the order they always were;
	// the paths themselves on first use (ensurePaths).
	e0 := make([]uint16, paths)
	for i := range e0 {
		e0[i] = c.newEntropy(e0[:i]...)
	}
	if p.entropy0 == nil {
		p.entropy0 = map[*Conn][]uint16{}
	}
	p.entropy0[c] = e0
	return c, nil
}

// tracef reports a protocol decision. Callers guard it with
// c.cfg.Trace != nil so nothing is formatted (or boxed) otherwise.
func (c *Conn) tracef(format string, args ...any) {
	c.cfg.Trace.Tracef(c.now, c.id, format, args...)
}

// ts is the wire timestamp of now.
func (c *Conn) ts() uint32 { return uint32(c.now) }

// LocalID returns the connection id.
func (c *Conn) LocalID() uint32 { return c.id }

// SetRNRRetry sets how many RNR refusals in a row a message survives
// (transport.RNRPolicy): 0..6, or 7 for forever, as ibv_modify_qp's
// rnr_retry. Values outside 0..7 are ignored.
func (c *Conn) SetRNRRetry(retry int) {
	switch {
	case retry == 7:
		c.rnrRetries = -1
	case retry >= 0 && retry < 7:
		c.rnrRetries = int8(retry)
	}
}

// SetMinRNRTimer does nothing: a MetaRoCE RNR NAK carries no timer, and
// the sender backs off by Options.RNRDelay (transport.RNRPolicy).
func (c *Conn) SetMinRNRTimer(uint8) {}

// PeerID returns the peer's id of this connection (its packets' DstConn),
// 0 until the handshake has told it.
func (c *Conn) PeerID() uint32 { return c.peer }

// State returns the connection's state.
func (c *Conn) State() transport.State { return c.state }

// Deadline returns when OnTimer must next run (or Transmit may succeed
// after pacing), or sim.Never.
func (c *Conn) Deadline() sim.Time { return c.timers.Next() }

// OnTimer runs every timer that is due.
func (c *Conn) OnTimer(now sim.Time) {
	c.now = now
	c.s.roomEpoch++
	c.timers.RunUntil(now)
}

// PostSend queues a WRITE, WRITE with immediate, SEND, SEND with
// immediate or READ. Work requests may be posted while the connection is
// still being set up.
func (c *Conn) PostSend(now sim.Time, wr *transport.WorkRequest) error {
	c.now = now
	if c.state == transport.StateClosed || c.state == transport.StateError {
		return transport.ErrClosed
	}
	c.ensurePaths()
	return c.postSend(wr)
}

// PostRecv queues a receive buffer; the Nth receive posted on the
// connection takes the Nth SEND (or WRITE with immediate) the peer posts,
// whatever its stream (receives are per connection, as in RC).
func (c *Conn) PostRecv(now sim.Time, wr *transport.WorkRequest) error {
	c.now = now
	if c.state == transport.StateClosed || c.state == transport.StateError {
		return transport.ErrClosed
	}
	return c.postRecv(wr)
}

// Receive processes one MetaRoCE packet (the bytes after the UDP header).
func (c *Conn) Receive(now sim.Time, payload []byte, rx transport.RxMeta) {
	c.now = now
	c.s.roomEpoch++
	c.st.rxPackets++
	c.st.rxBytes += uint64(len(payload))
	typ, body, err := c.parse(payload)
	typ, body, err = c.mutateParse(payload, typ, body, err)
	if err != nil {
		if err == wire.ErrChecksum {
			c.st.dropChecksum++
		} else {
			c.st.dropMalformed++
		}
		return
	}
	h := wire.Header(body)
	if typ != wire.TypeSyn && h.DstConn() != c.id {
		c.st.dropMalformed++
		return
	}
	switch typ {
	case wire.TypeSyn:
		c.onSyn(body, rx)
	case wire.TypeSynAck:
		c.onSynAck(body, rx)
	case wire.TypeClose:
		c.onClose(rx)
	case wire.TypeCloseAck:
		if c.ctl.pending == wire.TypeClose {
			c.ctl.pending, c.ctl.due = 0, false
			c.timers.Disarm(&c.ctlTimer)
		}
	default:
		if c.state != transport.StateEstablished {
			c.st.dropState++
			return
		}
		if typ == wire.TypeEst && !c.confirmed && c.ctl.pending == wire.TypeSynAck {
			c.handshakeEcho(h.PSN())
		}
		c.confirm()
		switch typ {
		case wire.TypeEst:
		case wire.TypeAck:
			a, err := wire.DecodeAck(body)
			if err != nil {
				c.st.dropMalformed++
				return
			}
			c.onAck(a)
		case wire.TypeNak:
			n, err := wire.DecodeNak(body)
			if err != nil {
				c.st.dropMalformed++
				return
			}
			c.onNak(n)
		case wire.TypeProbe:
			c.onProbe(h, rx)
		default:
			d, err := wire.DecodeData(body)
			if err != nil {
				c.st.dropMalformed++
				return
			}
			c.onData(d, rx)
		}
	}
}

// confirm notes (on the passive end) that the dialer has seen our SYN_ACK.
func (c *Conn) confirm() {
	if !c.confirmed {
		c.confirmed = true
		if c.ctl.pending == wire.TypeSynAck {
			c.s.handshake(c.now - c.ctl.firstAt) // no-op after an EST's exact echo
			if c.slot >= 0 && c.s.srtt > 0 {
				// The dialer's data follows its EST: keep counting it for
				// a few round trips, however long they are.
				c.proto.alloc.presumeFor(c.slot, c.now, 4*c.s.srtt)
			}
			c.ctl.pending, c.ctl.due = 0, false
			c.timers.Disarm(&c.ctlTimer)
		}
	}
}

// Transmit writes the next packet for port into b. Order of precedence:
// connection management, NAKs, ACKs, probes, then data (retransmissions
// of lost PSNs, chunks moved off failed paths, new chunks).
func (c *Conn) Transmit(now sim.Time, port int, b []byte) (int, transport.TxMeta) {
	c.now = now
	if len(b) < c.mss+wire.MaxOverhead || port < 0 || port >= c.cfg.Ports {
		return 0, transport.TxMeta{}
	}
	if n, meta := c.transmitCtl(port, b); n > 0 {
		return n, meta
	}
	if c.state != transport.StateEstablished || !c.dialer && !c.confirmed {
		return 0, transport.TxMeta{}
	}
	if n, meta := c.transmitProbe(port, b); n > 0 {
		return c.sent(n, meta)
	}
	if n, meta := c.transmitData(port, b); n > 0 {
		return c.sent(n, meta)
	}
	return 0, transport.TxMeta{}
}

// TransmitControl implements transport.ControlTransmitter: the
// handshake, teardown, NAK or ACK the connection owes on port, never data
// or a probe (the NIC serves it ahead of every connection's data).
func (c *Conn) TransmitControl(now sim.Time, port int, b []byte) (int, transport.TxMeta) {
	c.now = now
	if len(b) < c.mss+wire.MaxOverhead || port < 0 || port >= c.cfg.Ports {
		return 0, transport.TxMeta{}
	}
	return c.transmitCtl(port, b)
}

// ControlPending implements transport.ControlPender: whether
// TransmitControl has a packet for port now, by transmitCtl's tests
// without their effects (a port out of range is TransmitControl's to
// refuse).
func (c *Conn) ControlPending(port int) bool {
	if !c.r.ackDue && len(c.r.naks) == 0 && !c.ctl.due && !c.ctl.est && !c.ctl.closeAck && !c.ctl.revise && len(c.proto.lastAcks) == 0 {
		return false // nothing owed on any port (most asks)
	}
	if port < 0 || port >= c.cfg.Ports || c.controlDue(port) {
		return true
	}
	if c.state != transport.StateEstablished {
		return false
	}
	return c.nakFor(port) >= 0 || c.ackLead(port) >= 0
}

// TransmitPending implements transport.TransmitPender: Transmit may have
// a packet for port unless it has no control for it and has never had a
// sending path. Without sending paths (a connection that has posted
// nothing, served no READ and taken no ACK) Transmit has no probe, lost
// or queued chunk, copy or pacer wait (the pacer moves only when data is
// sent), so it sends nothing and changes nothing.
func (c *Conn) TransmitPending(port int) bool {
	return c.s.paths != nil || c.ControlPending(port)
}

// transmitCtl sends the next control packet for port, if any.
func (c *Conn) transmitCtl(port int, b []byte) (int, transport.TxMeta) {
	if n, meta := c.transmitControl(port, b); n > 0 {
		return c.sent(n, meta)
	}
	if c.state != transport.StateEstablished {
		return 0, transport.TxMeta{}
	}
	if n, meta := c.transmitNak(port, b); n > 0 {
		return c.sent(n, meta)
	}
	if n, meta := c.transmitAck(port, b); n > 0 {
		return c.sent(n, meta)
	}
	return 0, transport.TxMeta{}
}

func (c *Conn) sent(n int, meta transport.TxMeta) (int, transport.TxMeta) {
	c.st.txPackets++
	c.st.txBytes += uint64(n)
	return n, meta
}

// Close starts teardown: every work request not yet completed completes
// with StatusFlushed, and a CLOSE is sent (and retried) until the peer
// answers. The state is Closed at once; the connection keeps a deadline
// until the CLOSE is answered or given up, so the NIC should keep it until
// Deadline returns sim.Never.
func (c *Conn) Close(now sim.Time) {
	c.now = now
	if c.state == transport.StateClosed || c.state == transport.StateError {
		return
	}
	wasUp := c.state == transport.StateEstablished
	var ack lastAck
	if wasUp {
		ack = c.owedAck()
	}
	c.shutdown(transport.StateClosed, transport.StatusFlushed, 0, false)
	if wasUp {
		c.startCtl(wire.TypeClose)
		if ack.b != nil {
			if c.proto.lastAcks == nil {
				c.proto.lastAcks = make(map[*Conn]lastAck)
			}
			c.proto.lastAcks[c] = ack
			// The CLOSE's first attempt follows the ACK on its port and
			// route, so it cannot overtake it.
			c.ctl.port, c.ctl.sport = uint8(ack.port), ack.sport
		}
	}
}

// owedAck encodes the ACK the receiver owes (due, or held back for
// AckEvery or AckDelay) when the connection closes: a NIC acknowledges
// what it received before its QP is destroyed, so a message the peer's
// program saw arrive completes successfully at the sender, instead of
// being flushed by the CLOSE. Zero if nothing is owed.
func (c *Conn) owedAck() lastAck {
	if !c.r.ackDue && c.r.pending == 0 && !c.ackTimer.Armed() {
		return lastAck{}
	}
	c.r.ackDue = true
	b := make([]byte, c.mss+wire.MaxOverhead) // once per connection
	for port := range c.cfg.Ports {
		if n, meta := c.transmitAck(port, b); n > 0 {
			return lastAck{b[:n], port, meta.SrcPort}
		}
	}
	return lastAck{}
}

// shutdown ends the connection: completes everything outstanding (the
// message cause, if any, with status, the rest flushed), stops every timer
// but the control timer and leaves the Protocol's tables.
func (c *Conn) shutdown(state transport.State, status transport.Status, cause uint32, hasCause bool) {
	c.state = state
	c.flushSender(status, cause, hasCause)
	c.flushReceiver()
	for i := range c.s.paths {
		c.timers.Disarm(&c.s.paths[i].timer)
	}
	c.timers.Disarm(&c.ackTimer)
	c.timers.Disarm(&c.paceTimer)
	c.timers.Disarm(&c.rnrTimer)
	if c.ctl.pending == wire.TypeSyn || c.ctl.pending == wire.TypeSynAck {
		c.ctl.pending, c.ctl.due = 0, false
		c.timers.Disarm(&c.ctlTimer)
	}
	c.proto.forget(c)
}

// fail ends the connection with an error. The request that caused it
// (cause, if hasCause) completes with status and every other one is
// flushed. On an established connection, a failure no single request
// caused (every path failed for AllFailedTimeout) errs the oldest
// outstanding request instead, as a verbs QP errs the work request at the
// head of its send queue, so the application learns why, not only that
// its requests were flushed. A connection that never came up flushes
// them all: its requests never went out, and its state says why.
func (c *Conn) fail(status transport.Status, cause uint32, hasCause bool) {
	if c.state == transport.StateError || c.state == transport.StateClosed {
		return
	}
	if !hasCause && c.state == transport.StateEstablished {
		cause, hasCause = c.oldestOutstanding()
	}
	if c.cfg.Trace != nil {
		c.tracef("connection failed: %v", status)
	}
	// A passive end its dialer never confirmed tells nobody: the SYN may
	// have been forged, and a CLOSE would answer it again.
	wasUp := c.state == transport.StateEstablished && (c.dialer || c.confirmed)
	c.shutdown(transport.StateError, status, cause, hasCause)
	if wasUp {
		c.startCtl(wire.TypeClose) // tell the peer, best effort
	}
}
