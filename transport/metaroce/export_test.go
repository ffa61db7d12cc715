package metaroce

import (
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// OracleLost tells c, at now, that the data packet payload (one c sent)
// was lost on a wire, as if its loss were detected the moment it
// happened: a test's oracle, the bound any loss detection can reach
// (TestShallowLossOracle). It does nothing unless the packet is the
// latest transmission of a PSN still outstanding on its path's current
// generation. The resend goes at c's next transmit opportunity (the
// NIC's next interaction with it: an ACK, a timer, a port freeing).
func (c *Conn) OracleLost(now sim.Time, payload []byte) {
	c.oracleLost(now, payload)
}

// OracleLostAfterRTT is OracleLost for an oracle that learns of the loss
// one base round trip after the packet was sent (its ts), at the earliest
// at now: the soonest any rule that needs a later packet's ACK can know
// (a packet sent at once after it, on a path with the base RTT). It
// returns when that is, and whether payload is a packet of c's the oracle
// would declare; call it again at that time.
func (c *Conn) OracleLostAfterRTT(now sim.Time, payload []byte) (sim.Time, bool) {
	if c.s.minRTT == 0 || len(payload) < wire.CommonSize {
		return 0, false
	}
	sent := now - sim.Time(uint32(now)-wire.Header(payload).TS())
	at := max(now, sent+c.s.minRTT)
	if now < at {
		return at, true
	}
	return 0, c.oracleLost(now, payload)
}

func (c *Conn) oracleLost(now sim.Time, payload []byte) bool {
	if len(payload) < wire.CommonSize || c.state != transport.StateEstablished {
		return false
	}
	h := wire.Header(payload)
	if !h.Type().IsData() || int(h.Path()) >= len(c.s.paths) || h.DstConn() != c.peer {
		return false
	}
	p := &c.s.paths[h.Path()]
	if p.gen != h.Gen() || !p.sb.outstanding(h.PSN()) || (p.state != PathActive && p.state != PathDraining) {
		return false
	}
	e := p.sb.entry(h.PSN())
	if e.acked || e.lost || uint32(e.sentAt) != h.TS() {
		return false
	}
	c.now = now
	left := p.sb.markLost(h.PSN())
	c.lossesFound(p, 1, 1, left)
	return true
}
