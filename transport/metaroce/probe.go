package metaroce

import (
	"math"
	"math/bits"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// transmitProbe sends a due probe (tail-loss probe, or a probe of a
// probing or failed path) on port's plane.
func (c *Conn) transmitProbe(port int, b []byte) (int, transport.TxMeta) {
	for w, word := range c.s.probeSet {
		for word != 0 {
			i := 64*w + bits.TrailingZeros64(word)
			word &= word - 1
			if p := &c.s.paths[i]; p.plane(c.cfg.Ports) == port && p.sb.room() {
				return c.sendProbe(p, b)
			}
		}
	}
	return 0, transport.TxMeta{}
}

// sendProbe sends p's due probe under a new PSN. Under heavy random loss
// a tail-loss probe of a path carrying data is the path's newest
// outstanding chunk, sent again (tailLossProbe); otherwise a bare probe,
// which costs nothing when the ACK was only late (a queue), as it mostly
// is when loss is rare.
func (c *Conn) sendProbe(p *sndPath, b []byte) (int, transport.TxMeta) {
	if p.tlpSent && (p.state == PathActive || p.state == PathDraining) && c.lossRate() > randomLossRate {
		if n := c.tailLossProbe(p, b); n > 0 {
			p.tlps++
			p.tlpSentAt = c.now
			p.probeWant = false
			c.flagPath(p)
			p.st.probes++
			c.armPath(p)
			return n, transport.TxMeta{SrcPort: p.entropy, ECT: true}
		}
	}
	{
		p.probeWant = false
		c.flagPath(p)
		if p.sb.empty() {
			p.rtoBase = c.now
		}
		psn := p.sb.push(sbEntry{kind: sbProbe})
		n := c.encodeProbe(b, p, psn, false)
		p.tlpBase = c.now
		p.st.probes++
		p.st.packets++
		p.st.bytes += uint64(n)
		c.armPath(p)
		return n, transport.TxMeta{SrcPort: p.entropy, ECT: true}
	}
}

// tailLossProbe sends p's newest outstanding chunk again under a new PSN,
// as RFC 8985's probe does with the last segment, and returns the packet's
// size (0 if p has no chunk outstanding). Its ACK reports the holes before
// it, as a bare probe's would, and if the chunk itself was the loss it
// is already resent: one round trip instead of two, which is most of a
// tail's recovery when each path has a packet or two in flight (heavy
// loss). The chunk's old PSN becomes a filler (no payload, like an RNR
// refusal's), so that if it turns out lost only the hole is closed; the
// receiver places the chunk once whichever copy arrives (the DSN window).
func (c *Conn) tailLossProbe(p *sndPath, b []byte) int {
	for psn := p.sb.nxt - 1; psn-p.sb.una < p.sb.nxt-p.sb.una; psn-- {
		e := p.sb.entry(psn)
		if e.acked || e.lost || e.kind != sbData {
			continue
		}
		ch := c.chunk(e.dsn)
		if ch.where != chunkOnPath || ch.path != p.id || ch.gen != p.gen || ch.psn != psn {
			continue
		}
		c.s.inflight -= p.sb.strip(psn, sbProbe)
		c.st.retransmits++
		if c.cfg.Trace != nil {
			c.tracef("path %d: tail-loss probe resends dsn %d (psn %d)", p.id, e.dsn, psn)
		}
		if ch.probes < 255 {
			ch.probes++
		}
		return c.sendChunk(p, e.dsn, b)
	}
	return 0
}

// onPathTimer runs a path's tail-loss probe, retransmission timeout or
// re-probe.
func (c *Conn) onPathTimer(p *sndPath) {
	if c.state != transport.StateEstablished {
		return
	}
	now := c.now
	switch p.state {
	case PathActive, PathDraining:
		if p.sb.una == p.sb.nxt {
			break
		}
		if now >= c.rtoAt(p) {
			c.pathTimeout(p)
		} else if !p.tlpSent && p.tlps < maxTailProbes && now >= c.tlpAt(p) {
			p.tlpSent, p.probeWant = true, true
			c.flagPath(p)
			c.st.tailProbes++
			if c.cfg.Trace != nil {
				c.tracef("path %d: no ACK for %v, tail-loss probe", p.id, now-p.tlpBase)
			}
		}
	case PathProbing:
		if p.sb.una != p.sb.nxt && now >= c.rtoAt(p) {
			c.pathTimeout(p)
		}
	case PathFailed:
		if now >= p.probeAt {
			c.repath(p, whyReprobe, true)
			p.probeWant = true
			c.flagPath(p)
			p.probeAt = now + c.opts.FailedProbeInterval
		}
		if c.allFailedSince != 0 && now-c.allFailedSince >= c.opts.AllFailedTimeout {
			c.fail(transport.StatusRetryExceeded, 0, false)
			return
		}
	}
	c.armPath(p)
}

// pathTimeout handles an RTO: back off, shrink the window to one MSS, move
// to a new entropy with the outstanding chunks moved to other paths, and
// probe the new route (or, after TimeoutsBeforeFail in a row, declare the
// path failed).
func (c *Conn) pathTimeout(p *sndPath) {
	p.timeouts++
	p.st.timeouts++
	c.st.timeouts++
	// Back off, but not past probeBackoff x the path's RTO: what is sent
	// from here on is a 20-byte probe (the chunks move to other paths), so
	// the doubling guards against nothing, and under heavy random loss
	// every doubling was time the path stood idle.
	p.rto = min(2*p.rto, probeBackoff*p.computeRTO(c.opts), c.opts.RTOMax)
	p.cwnd, p.cwndFrac = c.mss, 0
	if c.cfg.Trace != nil {
		c.tracef("path %d: RTO (%d in a row), rto now %v", p.id, p.timeouts, p.rto)
	}
	c.repath(p, whyTimeout, true)
	if p.timeouts >= c.timeoutsBeforeFail() {
		p.state = PathFailed
		p.probeAt = c.now + c.opts.FailedProbeInterval
		if c.cfg.Trace != nil {
			c.tracef("path %d failed after %d timeouts; its traffic moves to other paths", p.id, p.timeouts)
		}
		c.checkAllFailed()
		return
	}
	p.rtoBase = c.now
	if p.timeouts == 1 && c.lossRate() > randomLossRate {
		// The connection's delivering paths lose packets often: a first
		// timeout is far more likely a lost tail (and lost probe) than a
		// dead route. The path stays in service on its new entropy, and
		// its next packet, data, is the probe; a second timeout in a row
		// takes it out of service to be probed.
		return
	}
	p.state = PathProbing
	p.probeWant = true
	c.flagPath(p)
}

// randomLossRate is the connection loss rate above which a path's first
// timeout is taken for random loss rather than a dead route.
const randomLossRate = 0.05

// lossRate is the fraction of the connection's recent data packets that
// its paths' SACKs reported lost (timeouts not counted: a dead route is
// not loss on the routes that work).
func (c *Conn) lossRate() float64 { return c.s.lossLost / max(c.s.lossSent, 1) }

// probeBackoff bounds a probing path's timeout back-off, in multiples of
// its RTO.
const probeBackoff = 4

// timeoutsBeforeFail is how many consecutive timeouts mark a path failed:
// Options.TimeoutsBeforeFail, or more when the connection sees random
// loss on the paths that deliver, enough that so many probes in a row
// being lost by chance is unlikely (below 1e-4). Under uniform loss a
// failed path only idles (it is re-probed every FailedProbeInterval); at
// 34% end-to-end loss three lost probes in a row happen to one probe
// episode in five, and a connection once had all 16 of its paths failed.
func (c *Conn) timeoutsBeforeFail() int {
	k := c.opts.TimeoutsBeforeFail
	loss := c.lossRate()
	if loss <= 0 {
		return k
	}
	q := 1 - (1-min(loss, 0.9))*(1-min(loss, 0.9)) // a probe or its ACK lost
	need := int(math.Ceil(math.Log(1e-4) / math.Log(q)))
	return max(k, min(need, 4*k))
}

// selfQueue is how long the connection's own bytes in flight take to leave
// its NIC at line rate. An RTT estimate learnt while little was in flight
// does not cover that wait, and at low line rates (a live lab's 1 Gbit/s)
// one window of 4 KiB packets over 16 paths takes longer to serialize than
// the RTO floor: without this allowance every path times out spuriously.
func (c *Conn) selfQueue() sim.Time {
	if c.lineBytes <= 0 {
		return 0
	}
	return sim.Time(float64(c.s.inflight) / c.lineBytes * float64(sim.Second))
}

// rtoAt is when p's retransmission timer expires.
// Under heavy random loss (see randomLossRate) neither timer adds the
// selfQueue allowance, and the probe comes at 1.25 SRTT: the allowance is
// for a window serializing at a slow NIC, its cost is a round trip or
// two more per lost tail, and with a third of all packets lost most
// losses are tails. At 10% loss per link this alone took goodput from
// 36% to 42% of loss-free (mean of 10 seeds on the quick loss-sweep bed).
func (c *Conn) rtoAt(p *sndPath) sim.Time {
	if c.lossRate() > randomLossRate {
		if p.tlps > 0 {
			// A tail-loss probe is out: the timeout waits for its answer
			// (RFC 8985 re-arms the RTO when it sends the probe). Without
			// this the RTO came a few microseconds after the probe, before
			// its ACK could, and threw away the path's whole flight (every
			// chunk moved and sent again) for a tail the probe had already
			// repaired.
			return max(p.rtoBase+p.rto, p.tlpSentAt+p.srtt+p.srtt/2+c.opts.DelayedAck)
		}
		return p.rtoBase + p.rto
	}
	return p.rtoBase + p.rto + c.selfQueue()
}

// maxTailProbes is how many tail-loss probes a path sends under heavy
// random loss before it waits for the RTO: with a third of packets lost
// each way, a probe or its ACK is lost more than half the time, and a
// timeout moves the path's whole flight.
const maxTailProbes = 3

// tlpAt is when p sends a tail-loss probe if no ACK has come.
func (c *Conn) tlpAt(p *sndPath) sim.Time {
	if p.hasRTT && c.lossRate() > randomLossRate {
		return p.tlpBase + p.srtt + p.srtt/4 + c.opts.DelayedAck
	}
	return p.tlpBase + p.tlpDelay(c.opts) + c.selfQueue()
}

// armPath sets p's timer to its next event.
func (c *Conn) armPath(p *sndPath) {
	at := sim.Never
	switch p.state {
	case PathActive, PathDraining:
		if p.sb.una != p.sb.nxt {
			at = c.rtoAt(p)
			if !p.tlpSent && p.tlps < maxTailProbes {
				at = min(at, c.tlpAt(p))
			}
		}
	case PathProbing:
		if p.sb.una != p.sb.nxt {
			at = c.rtoAt(p)
		}
	case PathFailed:
		at = p.probeAt
	}
	if at == sim.Never {
		c.timers.Disarm(&p.timer)
	} else if !p.timer.Armed() || p.timer.When() != at {
		c.timers.Arm(&p.timer, at)
	}
}
