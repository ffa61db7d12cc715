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
	if len(payload) < wire.CommonSize || c.state != transport.StateEstablished {
		return
	}
	h := wire.Header(payload)
	if !h.Type().IsData() || int(h.Path()) >= len(c.s.paths) || h.DstConn() != c.peer {
		return
	}
	p := &c.s.paths[h.Path()]
	if p.gen != h.Gen() || !p.sb.outstanding(h.PSN()) || (p.state != PathActive && p.state != PathDraining) {
		return
	}
	e := p.sb.entry(h.PSN())
	if e.acked || e.lost || uint32(e.sentAt) != h.TS() {
		return
	}
	c.now = now
	left := p.sb.markLost(h.PSN())
	c.lossesFound(p, 1, 1, left)
}
