package metaroce

import (
	"math/bits"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// onAck processes one path's ACK: settle what it covers, take an RTT
// sample, run congestion control, detect losses (a hole below a PSN that
// was sent later and has arrived), and note the rate hint.
func (c *Conn) onAck(a wire.Ack) {
	c.st.acksReceived++
	if int(a.Path()) >= len(c.s.paths) {
		c.st.dropMalformed++
		return
	}
	p := &c.s.paths[a.Path()]
	if a.Gen() != p.gen {
		c.st.staleAcks++
		return
	}
	cum := a.PSN()
	// cum is in [una, nxt], or a little before una (an older ACK overtaken
	// by a newer one); anything else is not an ACK of this path.
	sb := &p.sb
	if cum-sb.una > sb.nxt-sb.una && sb.una-cum > 4*maxPathWindow {
		c.st.dropMalformed++
		return
	}
	c.noteHint(a.RateHint())
	pkts, bytes := 0, 0
	// Only an ACK whose cum is in [una, nxt] acknowledges cumulatively; an
	// older one, overtaken by a newer, carries nothing cumulative we lack.
	for psn := sb.una; cum-sb.una <= sb.nxt-sb.una && psn != cum; psn++ {
		k, n := c.ackEntry(p, psn)
		pkts += k
		bytes += n
	}
	for w := 0; w < 4; w++ {
		word := a.SACKWord(w)
		for word != 0 {
			i := bits.LeadingZeros64(word)
			word &^= 1 << (63 - i)
			psn := cum + 1 + uint32(64*w+i)
			if !sb.outstanding(psn) {
				continue
			}
			k, n := c.ackEntry(p, psn)
			pkts += k
			bytes += n
		}
	}
	if c.state != transport.StateEstablished {
		return // a completion callback closed us
	}
	sb.advance()
	if pkts > 0 {
		// The path delivers: restart its timers (RFC 8985 re-arms the RTO
		// on every ACK that acknowledges something new, SACKed or not).
		p.rtoBase, p.tlpBase, p.tlpSent, p.tlps = c.now, c.now, false, 0
		if p.timeouts > 0 || p.state != PathActive && p.state != PathDraining {
			c.pathRecovered(p)
		}
		p.timeouts = 0
	}
	if pkts > 0 {
		c.rttSample(p, sim.Time(c.ts()-a.EchoTS()))
	}
	dce := int(int16(a.CECount() - p.lastCE))
	if dce > 0 {
		p.lastCE = a.CECount()
	} else {
		dce = 0
	}
	c.ccOnAck(p, pkts, bytes, dce)
	if pkts > 0 {
		c.detectLoss(p)
	}
	if p.state == PathDraining && sb.empty() {
		c.repath(p, whyMarks, false)
		p.state = PathActive
	}
	c.armPath(p)
}

// ackEntry settles one PSN; it returns the packets and payload bytes it
// newly acknowledged.
func (c *Conn) ackEntry(p *sndPath, psn uint32) (int, int) {
	wasLost := p.sb.lost
	e, newly, left := p.sb.ack(psn)
	if !newly {
		return 0, 0
	}
	c.s.inflight -= left
	if p.sb.lost != wasLost {
		c.flagPath(p) // a PSN declared lost arrived after all
	}
	if e.kind != sbProbe {
		ch := c.chunk(e.dsn)
		if ch.where == chunkOnPath && ch.path == p.id && ch.gen == p.gen && ch.psn == psn {
			c.chunkResolved(e.dsn)
		}
	}
	return 1, int(e.size)
}

// detectLoss declares lost every outstanding PSN sent before the latest
// transmission known to have arrived: paths are FIFO, so it is a loss, not
// reordering.
func (c *Conn) detectLoss(p *sndPath) {
	var trace func(psn uint32)
	if c.cfg.Trace != nil {
		trace = func(psn uint32) { c.tracef("path %d: SACK hole psn %d, retransmit", p.id, psn) }
	}
	newLosses, left := p.sb.detectLoss(trace)
	c.s.inflight -= left
	p.st.losses += uint64(newLosses)
	c.st.losses += uint64(newLosses)
	if newLosses > 0 {
		c.flagPath(p)
	}
	if newLosses == 0 {
		return
	}
	if p.sb.nxt-p.lossBase > uint32(c.opts.LossWindow) {
		p.lossBase, p.losses = p.sb.nxt, 0
	}
	p.losses += newLosses
	c.s.lossLost += float64(newLosses)
	// Repath only a path that loses clearly more than the connection as a
	// whole: under loss spread evenly over every route, moving cannot
	// help and would only re-send what the path has in flight.
	if p.losses >= c.opts.LossesBeforeRepath && p.state == PathActive && c.otherActivePath(p) {
		window := float64(min(int(p.sb.nxt-p.lossBase), c.opts.LossWindow))
		if float64(p.losses)/max(window, 1) > 2*c.s.lossLost/max(c.s.lossSent, 1) {
			c.repath(p, whyLosses, true)
		}
	}
}

// otherActivePath reports whether some path besides p can carry data.
func (c *Conn) otherActivePath(p *sndPath) bool {
	for i := range c.s.paths {
		if q := &c.s.paths[i]; q != p && q.state == PathActive {
			return true
		}
	}
	return false
}
