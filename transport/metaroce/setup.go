package metaroce

import (
	"errors"
	"math"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

var (
	errBadConfig = errors.New("metaroce: bad connection config (LocalID, Ports 1..255, LineRate, Memory and Complete are required)")
	errBadMTU    = errors.New("metaroce: PathMTU not in 256..9000")
)

// startCtl begins sending a SYN, SYN_ACK or CLOSE, retried on a doubling
// timer until answered.
func (c *Conn) startCtl(t wire.Type) {
	c.ctl.pending, c.ctl.tries, c.ctl.firstAt = t, 0, c.now
	c.ctlAttempt()
}

// ctlAttempt makes the next attempt due, on a new port (so a dead plane
// cannot stall setup) and a new entropy, and arms the retry.
func (c *Conn) ctlAttempt() {
	c.ctl.due = true
	c.ctl.port = uint8((int(c.ctl.basePort) + int(c.ctl.tries)) % c.cfg.Ports)
	c.ctl.sport = uint16(49152 + c.cfg.Rand.IntN(16384))
	back := c.opts.SetupTimeout << min(c.ctl.tries, 16)
	c.timers.Arm(&c.ctlTimer, c.now+min(back, c.opts.RTOMax))
	c.ctl.tries++
}

func (c *Conn) onCtlTimer() {
	if c.ctl.pending == 0 {
		return
	}
	if int(c.ctl.tries) > c.opts.MaxRetries {
		t := c.ctl.pending
		c.ctl.pending, c.ctl.due = 0, false
		if c.cfg.Trace != nil {
			c.tracef("%v unanswered after %d attempts", t, c.ctl.tries)
		}
		if t != wire.TypeClose {
			c.fail(transport.StatusRetryExceeded, 0, false)
		}
		return
	}
	if c.cfg.Trace != nil {
		c.tracef("%v retry %d", c.ctl.pending, c.ctl.tries)
	}
	c.ctlAttempt()
}

// controlDue says whether transmitControl has a packet for port now. It
// changes nothing.
func (c *Conn) controlDue(port int) bool {
	if len(c.proto.lastAcks) > 0 {
		if a, ok := c.proto.lastAcks[c]; ok && a.port == port {
			return true
		}
	}
	return c.ctl.due && int(c.ctl.port) == port ||
		c.ctl.revise && int(c.ctl.port) == port ||
		c.ctl.est && int(c.ctl.replyPort) == port ||
		c.ctl.closeAck && int(c.ctl.replyPort) == port
}

// transmitControl sends a due connection-management packet.
func (c *Conn) transmitControl(port int, b []byte) (int, transport.TxMeta) {
	if len(c.proto.lastAcks) > 0 {
		if a, ok := c.proto.lastAcks[c]; ok && a.port == port {
			delete(c.proto.lastAcks, c)
			return copy(b, a.b), transport.TxMeta{SrcPort: a.sport}
		}
	}
	switch {
	case c.ctl.due && int(c.ctl.port) == port:
		c.ctl.due = false
		if c.ctl.pending == wire.TypeSynAck {
			c.ctl.revise = false // it carries the revised first_share
		}
		return c.encodeCtl(b, c.ctl.pending), transport.TxMeta{SrcPort: c.ctl.sport}
	case c.ctl.revise && int(c.ctl.port) == port:
		c.ctl.revise = false
		c.ctl.revisions++
		return c.encodeSetup(b, wire.TypeSynAck, wire.FlagRevise), transport.TxMeta{SrcPort: c.ctl.sport}
	case c.ctl.est && int(c.ctl.replyPort) == port:
		c.ctl.est = false
		return c.encodeCtl(b, wire.TypeEst), transport.TxMeta{SrcPort: c.ctl.replySport}
	case c.ctl.closeAck && int(c.ctl.replyPort) == port:
		c.ctl.closeAck = false
		return c.encodeCtl(b, wire.TypeCloseAck), transport.TxMeta{SrcPort: c.ctl.replySport}
	}
	return 0, transport.TxMeta{}
}

func (c *Conn) encodeCtl(b []byte, t wire.Type) int {
	switch t {
	case wire.TypeSyn, wire.TypeSynAck:
		return c.encodeSetup(b, t, 0)
	}
	var echo uint32
	if t == wire.TypeEst {
		echo = c.ctlEcho()
	}
	wire.Header(b).Put(&wire.Common{Type: t, DstConn: c.peer, PSN: echo, TS: c.ts()})
	return wire.Seal(b, wire.CommonSize)
}

// encodeSetup encodes a SYN or SYN_ACK with flags (FlagRevise: a grant
// revision, reviseFirstShare). A revision carries the SYN's echo as any
// SYN_ACK does, so a dialer it reaches before the first SYN_ACK takes it
// for that one.
func (c *Conn) encodeSetup(b []byte, t wire.Type, flags wire.Flags) int {
	{
		var echo uint32
		if t == wire.TypeSynAck {
			echo = c.synEcho()
		}
		f := wire.SetupFields{
			Common:    wire.Common{Type: t, Flags: flags, DstConn: c.peer, PSN: echo, TS: c.ts()},
			SrcConn:   c.id,
			Nonce:     c.nonce,
			Service:   c.service(t),
			Paths:     c.pathCount(),
			Ports:     c.cfg.Ports,
			MTU:       c.cfg.PathMTU,
			MsgWindow: c.opts.SendQueue,
			DSNWindow: c.opts.DSNWindow,
			AckDelay:  uint32(min(c.ackDelay, 1<<32-1)),
			LineRate:  uint32(min(c.cfg.LineRate/1e6, 1<<32-1)),
		}
		if t == wire.TypeSynAck {
			f.FirstShare = c.ctl.firstShare
		}
		wire.Setup(b).Put(&f)
		return wire.Seal(b, wire.SetupSize)
	}
}

// firstFlightRTT is the round trip a dialer's first flight covers, from
// its first data packet to the first ACK: the handshake's RTT, plus a
// data packet's serialization at every store-and-forward hop, which the
// handshake's small packets do not show (initialSerializations full-size
// packets at the line rate, as the timers allow before a data sample).
// Sized over the handshake's RTT alone the flight ran out 1.3 us before
// the first ACK at 100 Gbit/s over 4 hops, and the sender idled. A flight
// that starts in time lands on a link whose grants add up to at most its
// capacity and is paced at its share, so covering the first ACK adds no
// queue there. A late one (held grant, HoldFirstGrant) lands on shares
// handed out since, where every byte past the handshake's RTT is queue:
// it keeps the handshake's RTT (a 63-to-1 incast's held first grant,
// sized to the first ACK, kept the receiver's queue marked long enough to
// move paths: wide settle 2.75 -> 41 RTTs).
func (c *Conn) firstFlightRTT() sim.Time {
	if c.firstFlightLate() {
		return c.s.srtt
	}
	return c.s.srtt + initialSerializations*c.granularity()
}

// service is the service a setup packet of type t names: the dialer's
// in its SYN, none in a SYN_ACK.
func (c *Conn) service(t wire.Type) uint16 {
	if t == wire.TypeSyn {
		return c.cfg.Service
	}
	return 0
}

// ctlEcho is the echo a SYN_ACK or EST carries in its psn field: the ts
// of the peer's packet it answers plus the time since that packet arrived,
// so that a SYN_ACK our own retry timer sends long after the SYN measures
// the path, not our wait.
func (c *Conn) ctlEcho() uint32 {
	return c.ctl.echo + uint32(c.now-c.ctl.echoAt)
}

// learnPeer takes the peer's parameters from its SYN or SYN_ACK.
func (c *Conn) learnPeer(s wire.Setup) {
	c.peer = s.SrcConn()
	c.peerPaths = int32(s.Paths())
	c.mss = min(c.cfg.PathMTU, s.MTU())
	c.msgWindow = int32(min(c.opts.SendQueue, s.MsgWindow()))
	c.dsnWindow = int32(min(c.opts.DSNWindow, s.DSNWindow(), math.MaxInt32))
	c.r.paths = nil // allocated on the first packet of a path (rcvPaths)
	c.r.dirty = make([]uint64, (int(c.peerPaths)+63)/64)
	c.r.lastOn = make([]int16, c.cfg.Ports)
	for i := range c.r.lastOn {
		c.r.lastOn[i] = -1
	}
	c.peerAckDelay = sim.Time(s.AckDelay())
	c.r.dsn.limit = c.opts.DSNWindow
	c.slot = c.proto.alloc.register(c.now, !c.dialer)
}

// onSyn handles a repeated SYN: our SYN_ACK was lost, send it again.
func (c *Conn) onSyn(body []byte, rx transport.RxMeta) {
	s, err := wire.DecodeSetup(body)
	if err != nil || c.dialer || s.Nonce() != c.nonce {
		c.st.dropMalformed++
		return
	}
	if c.state == transport.StateEstablished && !c.confirmed {
		c.ctl.pending = wire.TypeSynAck
		c.ctl.due, c.ctl.port, c.ctl.sport = true, uint8(rx.Port), rx.SrcPort
		c.ctl.echo, c.ctl.echoAt = wire.Header(s).TS(), c.now
	}
}

// onSynAck completes the dialer's handshake.
func (c *Conn) onSynAck(body []byte, rx transport.RxMeta) {
	s, err := wire.DecodeSetup(body)
	if err != nil || !c.dialer || s.Nonce() != c.nonce {
		c.st.dropMalformed++
		return
	}
	if wire.Header(s).Flags()&wire.FlagRevise != 0 && c.state != transport.StateConnecting {
		// A revision answers nothing: no EST, and the flight's lapse
		// (flightLate) still counts from the SYN_ACK that did.
		c.takeRevision(s)
		return
	}
	c.ctl.est, c.ctl.replyPort, c.ctl.replySport = true, uint8(rx.Port), rx.SrcPort
	c.ctl.echo, c.ctl.echoAt = wire.Header(s).TS(), c.now
	if c.state != transport.StateConnecting {
		return // a repeated SYN_ACK: our EST was lost; send it again
	}
	c.learnPeer(s)
	c.handshakeEcho(wire.Header(s).PSN())
	c.takeFirstShare(s)
	c.ctl.pending, c.ctl.due = 0, false
	c.timers.Disarm(&c.ctlTimer)
	c.state = transport.StateEstablished
	if c.cfg.Trace != nil {
		c.tracef("established: peer conn %d, %d paths out, %d in, mss %d", c.peer, c.pathCount(), c.peerPaths, c.mss)
	}
}

// accept sets up the passive end from a SYN.
func (c *Conn) accept(s wire.Setup) {
	c.nonce = s.Nonce()
	c.ctl.echo, c.ctl.echoAt = wire.Header(s).TS(), c.now
	c.learnPeer(s)
	c.ctl.firstShare = c.firstShareFor()
	if c.slot >= 0 {
		if c.proto.grantees == nil {
			c.proto.grantees = make(map[int32]*Conn)
		}
		c.proto.grantees[c.slot] = c
	}
	c.state = transport.StateEstablished
	c.startCtl(wire.TypeSynAck)
	if c.cfg.Trace != nil {
		c.tracef("accepted: peer conn %d, %d paths out, %d in, mss %d", c.peer, c.pathCount(), c.peerPaths, c.mss)
	}
}

// HandshakeDone implements transport.Handshaker: a dialer's handshake is
// done when it is Established; a passive end's when the dialer confirmed
// (its EST or its first packet arrived), so a SYN alone never hands a
// connection to a listener.
func (c *Conn) HandshakeDone() bool {
	return c.state == transport.StateEstablished && (c.dialer || c.confirmed)
}

// Abort implements transport.Aborter: the connection goes to Error at once
// and sends nothing more (no SYN_ACK retry, no CLOSE). A NIC aborts a
// half-open passive end it evicts.
func (c *Conn) Abort(now sim.Time) {
	c.now = now
	if c.state == transport.StateError || c.state == transport.StateClosed {
		return
	}
	c.shutdown(transport.StateError, transport.StatusFlushed, 0, false)
	c.ctl.pending, c.ctl.due, c.ctl.est, c.ctl.closeAck, c.ctl.revise = 0, false, false, false, false
	c.timers.Disarm(&c.ctlTimer)
}

// onClose handles the peer's teardown.
func (c *Conn) onClose(rx transport.RxMeta) {
	if c.peer == 0 {
		c.st.dropState++
		return
	}
	c.ctl.closeAck, c.ctl.replyPort, c.ctl.replySport = true, uint8(rx.Port), rx.SrcPort
	if c.state == transport.StateEstablished {
		if c.cfg.Trace != nil {
			c.tracef("peer closed")
		}
		c.shutdown(transport.StateClosed, transport.StatusFlushed, 0, false)
	}
	if c.ctl.pending == wire.TypeClose { // simultaneous close: theirs answers ours
		c.ctl.pending, c.ctl.due = 0, false
		c.timers.Disarm(&c.ctlTimer)
	}
}

// handshakeEcho takes the handshake's RTT from the echo a SYN_ACK (of our
// SYN's ts) or an EST (of our SYN_ACK's) carries in its psn field: exact
// whatever the retries, since it names the attempt answered. An echo that
// does not fit (a peer that echoes nothing) falls back to the time since
// our first attempt, an upper bound.
func (c *Conn) handshakeEcho(echo uint32) {
	r := sim.Time(c.ts() - echo)
	if bound := c.now - c.ctl.firstAt; r <= 0 || r > bound {
		r = bound
	}
	c.s.handshake(r)
}

// firstShareFor is the first_share the acceptor's SYN_ACK offers: the
// allocator's first-round-trip grant for the new connection
// (allocator.firstGrant) in 65535ths of the NIC's capacity, ports x line
// rate. The dialer paces its first flight at that rate, up to a window
// of it (cc.go), instead of one packet until the first ACK.
func (c *Conn) firstShareFor() uint16 {
	if c.opts.DisableRateHint || c.slot < 0 {
		return 0
	}
	return c.shareUnits(c.proto.alloc.firstGrant(c.slot, c.now))
}

// shareUnits is g bytes per second in first_share's units, 65535ths of
// the NIC's capacity, rounded down (the dialer never hears more than
// the grant the allocator holds against the capacity).
func (c *Conn) shareUnits(g float64) uint16 {
	capacity := float64(c.cfg.Ports) * c.cfg.LineRate / 8
	return uint16(min(math.Floor(g/capacity*65535), 65535))
}

// SetWake implements transport.Waker: the NIC's way to have this
// connection send a grant revision that another connection's SYN caused.
func (c *Conn) SetWake(wake func()) {
	if c.proto.wakes == nil {
		c.proto.wakes = make(map[*Conn]func())
	}
	c.proto.wakes[c] = wake
}

// reviseFirstShare lowers the first share our SYN_ACK offered to g bytes
// per second (allocator.reviseGrants) and owes the dialer a revision: a
// SYN_ACK with FlagRevise and the new first_share, on the port of our
// last SYN_ACK. A SYN_ACK not yet sent carries the new share itself.
// False if the NIC cannot wake us (no SetWake) or we are not an accepted
// connection still up: the grant then stands.
func (c *Conn) reviseFirstShare(g float64) bool {
	wake := c.proto.wakes[c]
	if wake == nil || c.dialer || c.state != transport.StateEstablished {
		return false
	}
	c.ctl.firstShare = c.shareUnits(g)
	if !c.ctl.due || c.ctl.pending != wire.TypeSynAck {
		c.ctl.revise = true
		wake()
	}
	return true
}

// takeRevision takes a lower first share from a revision (FlagRevise)
// while the first ACK has not come: the hint, and with it the first
// flight's rate and window (firstFlight), drop to it. A revision only
// lowers: one overtaken by a later, lower one changes nothing.
func (c *Conn) takeRevision(s wire.Setup) {
	if c.opts.DisableRateHint || c.mutated(MutIgnoreRateHint) || c.s.heard || c.s.hint == 0 {
		return
	}
	if g := s.FirstShareRate(); g < c.s.hint {
		if c.cfg.Trace != nil {
			c.tracef("first share revised %.3f -> %.3f Gb/s", c.s.hint*8/1e9, g*8/1e9)
		}
		c.s.hint = g
		c.noteBacklog(false)
	}
}

// takeFirstShare takes the dialer's first-round-trip rate from the
// SYN_ACK: the receiver's hint until its first ACK brings one, which
// sizes the first flight (firstFlight, cc.go).
func (c *Conn) takeFirstShare(s wire.Setup) {
	if c.opts.DisableRateHint || c.mutated(MutIgnoreRateHint) || c.s.heard {
		return
	}
	if g := s.FirstShareRate(); g > 0 {
		c.s.hint = g
		c.noteBacklog(false)
		if c.cfg.Trace != nil {
			c.tracef("first share %.3f Gb/s", g*8/1e9)
		}
	}
}
