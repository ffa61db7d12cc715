package metaroce

import "github.com/mrlab/mrlab/internal/sim"

// rttSample feeds one RTT measurement into the RFC 6298 estimator.
func (p *sndPath) rttSample(r sim.Time, o *Options) {
	if r <= 0 {
		r = 1
	}
	if !p.hasRTT {
		p.hasRTT = true
		p.srtt, p.rttvar, p.minRTT = r, r/2, r
	} else {
		d := p.srtt - r
		if d < 0 {
			d = -d
		}
		p.rttvar = (3*p.rttvar + d) / 4
		p.srtt = (7*p.srtt + r) / 8
		p.minRTT = min(p.minRTT, r)
	}
	p.rto = p.computeRTO(o)
}

// rtoSerializations is how many full-size packet serializations at the
// NIC's line rate the RTO never goes below: a data packet crosses up to four
// store-and-forward hops in a leaf/spine fabric, and twice that is the
// margin. At 100 Gbit/s this is a few microseconds and RTOMin rules; at a
// live lab's 1 Gbit/s one 4 KiB packet takes 33us per hop, and without it
// the first RTO (before any RTT sample) fires before the first ACK can come.
const rtoSerializations = 8

// computeRTO is SRTT + 4 RTTVAR, floored at max(RTOMin, 2 x min RTT, the
// serialization floor) and capped at RTOMax.
func (p *sndPath) computeRTO(o *Options) sim.Time {
	if !p.hasRTT {
		return max(o.InitialRTO, p.c.serialRTO)
	}
	floor := max(o.RTOMin, 2*p.minRTT, p.c.serialRTO)
	return min(max(p.srtt+4*p.rttvar, floor), o.RTOMax)
}

// tlpDelay is how long an outstanding path waits for an ACK before it
// sends a tail-loss probe: the smoothed RTT plus half of it or two RTT
// deviations, whichever is more, plus the receiver's ACK delay (before a
// sample: two base RTTs plus the ACK delay). RFC 8985's two SRTTs made
// every tail loss cost three round trips before anything was resent.
func (p *sndPath) tlpDelay(o *Options) sim.Time {
	if !p.hasRTT {
		return 2*o.BaseRTT + o.DelayedAck
	}
	return p.srtt + max(p.srtt/2, 2*p.rttvar) + o.DelayedAck
}

// rttSample takes one RTT measurement for p and for the connection.
func (c *Conn) rttSample(p *sndPath, r sim.Time) {
	if r < 0 || r > c.opts.RTOMax*4 {
		return // a stale echo (32-bit clock) or garbage
	}
	p.rttSample(r, c.opts)
	c.s.lastRTT = r
	if c.s.srtt == 0 {
		c.s.srtt, c.s.minRTT = r, r
	} else {
		c.s.srtt = (7*c.s.srtt + r) / 8
		c.s.minRTT = min(c.s.minRTT, r)
	}
}
