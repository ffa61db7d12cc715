package metaroce

import "github.com/mrlab/mrlab/internal/sim"

// RTT estimation. An ACK record's echo_ts is the sender's timestamp of the
// path's latest packet advanced by the time the receiver held it, so
// now - echo_ts is a round trip without the receiver's ACK delay, whether
// the ACK went at once or after coalescing. Each path keeps RFC 6298's
// smoothed RTT and variation from its own samples; the connection keeps
// the same over all samples, the latest sample, and the minimum, which is
// the base RTT: propagation plus a packet's serialization at every hop at
// the real link rates.
//
// Before any data sample the connection has the handshake's: the SYN_ACK
// echoes the SYN's ts and the EST the SYN_ACK's, so each end measures the
// attempt that was answered, whatever the retries (when the passive end
// is confirmed by data before an EST, the time since its first SYN_ACK,
// an upper bound). It sizes timers only, never the base RTT, and its small
// packets do not show a data packet's serialization, which
// initialSerializations covers.

// rttSample feeds one RTT measurement into p's estimator.
func (p *sndPath) rttSample(r sim.Time) {
	if !p.hasRTT {
		p.hasRTT = true
		p.srtt, p.rttvar = r, r/2
		return
	}
	d := p.srtt - r
	if d < 0 {
		d = -d
	}
	p.rttvar = (3*p.rttvar + d) / 4
	p.srtt = (7*p.srtt + r) / 8
}

// rttSample takes one RTT measurement for p and for the connection; full
// says it was a full-size data packet's. The base RTT is the minimum of
// full-size packets' samples once there is one (a smaller packet crosses
// each hop faster), of any data packet's before.
func (c *Conn) rttSample(p *sndPath, r sim.Time, full bool) {
	if r <= 0 || r > 4*c.opts.RTOMax {
		return // a stale echo (32-bit clock) or garbage
	}
	p.rttSample(r)
	s := &c.s
	if !s.dataRTT {
		s.dataRTT, s.fullRTT = true, full
		s.srtt, s.rttvar, s.minRTT, s.recentRTT = r, r/2, r, r
		return
	}
	d := s.srtt - r
	if d < 0 {
		d = -d
	}
	s.rttvar = (3*s.rttvar + d) / 4
	s.srtt = (7*s.srtt + r) / 8
	s.recentRTT = r
	switch {
	case full && !s.fullRTT:
		s.fullRTT, s.minRTT = true, r
	case full || !s.fullRTT:
		s.minRTT = min(s.minRTT, r)
	}
}

// handshakeRTT records the handshake's round trip (see above); the first
// one counts.
func (c *Conn) handshakeRTT(r sim.Time) {
	if c.s.dataRTT || c.s.srtt != 0 || r <= 0 {
		return
	}
	c.s.srtt, c.s.rttvar, c.s.recentRTT = r, r/2, r
}

// initialSerializations is how many full-size packet serializations at the
// NIC's line rate a timer allows before the first data RTT sample: the
// handshake's small packets cross each store-and-forward hop almost at
// once, a data packet takes a serialization per hop, and 8 covers a path of
// 6 hops with margin.
const initialSerializations = 8

// granularity is the shortest interval timers resolve: one full-size
// packet's serialization at one port's line rate. RTT variation below it
// is noise.
func (c *Conn) granularity() sim.Time {
	return c.serialize(c.mss + dataOverhead)
}

// serialize returns how long n bytes take at one port's line rate.
func (c *Conn) serialize(n int) sim.Time {
	return sim.Time(float64(n) * 8 / c.cfg.LineRate * float64(sim.Second))
}

// timerRTT returns the RTT and variation p's timers use: the larger of the
// path's and the connection's smoothed RTT, at least the connection's
// latest sample (so that a queue all paths share, congestion and not
// loss, delays every timer alike and fires none), and the connection's
// variation (a path's own samples may be too few to estimate one: with
// many paths and a small window, a path sees a sample every few round
// trips, and RFC 6298's first variation, half the first sample, would
// then stand for a long time).
func (c *Conn) timerRTT(p *sndPath) (rtt, v sim.Time) {
	rtt, v = c.s.srtt, c.s.rttvar
	if p.hasRTT {
		rtt = max(rtt, p.srtt)
	}
	rtt = max(rtt, c.s.recentRTT)
	if !c.s.dataRTT {
		rtt += initialSerializations * c.granularity()
	}
	return rtt, v
}

// pto is how long p waits for ACK progress before a tail-loss probe, and
// how long a probe waits for its answer: RTT + max(4 x variation,
// granularity) + the peer's largest ACK delay (RFC 9002's PTO).
func (c *Conn) pto(p *sndPath) sim.Time {
	rtt, v := c.timerRTT(p)
	if rtt == 0 {
		return c.opts.SetupTimeout
	}
	return rtt + max(4*v, c.granularity()) + c.peerAckDelay + c.lateMax(c.lateHalfLife())
}

// rcvRTT is the receiving side's estimate of the round trip to the peer,
// for the fair-share allocator's activity window: the connection's own
// (from its data, or the handshake's), or the setup timeout before any.
func (c *Conn) rcvRTT() sim.Time {
	if c.s.srtt > 0 {
		return max(c.s.srtt, c.s.recentRTT)
	}
	return c.opts.SetupTimeout
}
