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

// pathRTT is one path's RFC 6298 estimator: its smoothed RTT and
// variation from its own samples. sndPath embeds it.
type pathRTT struct {
	srtt, rttvar sim.Time
	hasRTT       bool
}

// rttSample feeds one RTT measurement into the path's estimator; the
// first sample sets srtt to it and the variation to half of it.
func (e *pathRTT) rttSample(r sim.Time) {
	if !e.hasRTT {
		e.hasRTT = true
		e.srtt, e.rttvar = r, r/2
		return
	}
	e.srtt, e.rttvar = smooth(e.srtt, e.rttvar, r)
}

// smooth is RFC 6298's update of a smoothed RTT and its variation by the
// sample r (alpha 1/8, beta 1/4; the variation from the old srtt).
func smooth(srtt, rttvar, r sim.Time) (sim.Time, sim.Time) {
	d := srtt - r
	if d < 0 {
		d = -d
	}
	return (7*srtt + r) / 8, (3*rttvar + d) / 4
}

// rttEstimator is the connection's RTT over all paths: RFC 6298's
// smoothed RTT and variation, the latest sample, and the minimum, the
// base RTT. Before the first data sample srtt may hold the handshake's
// round trip; the first data sample replaces it. sndState embeds it, so
// its fields read as c.s.srtt and so on.
type rttEstimator struct {
	srtt, rttvar, recentRTT, minRTT sim.Time
	// dataRTT, fullRTT: a data, a full-size data packet has been measured.
	dataRTT, fullRTT bool
}

// sample takes one data packet's RTT; full says it was full-size. The
// base RTT is the minimum of full-size packets' samples once there is
// one (a smaller packet crosses each hop faster), of any data packet's
// before.
func (e *rttEstimator) sample(r sim.Time, full bool) {
	if !e.dataRTT {
		e.dataRTT, e.fullRTT = true, full
		e.srtt, e.rttvar, e.minRTT, e.recentRTT = r, r/2, r, r
		return
	}
	e.srtt, e.rttvar = smooth(e.srtt, e.rttvar, r)
	e.recentRTT = r
	switch {
	case full && !e.fullRTT:
		e.fullRTT, e.minRTT = true, r
	case full || !e.fullRTT:
		e.minRTT = min(e.minRTT, r)
	}
}

// handshake records the handshake's round trip (see above): the first
// positive one counts, and only before any data sample.
func (e *rttEstimator) handshake(r sim.Time) {
	if e.dataRTT || e.srtt != 0 || r <= 0 {
		return
	}
	e.srtt, e.rttvar, e.recentRTT = r, r/2, r
}

// latest is the larger of the smoothed RTT and the latest sample: a
// round trip that a queue building now has already lengthened.
func (e *rttEstimator) latest() sim.Time { return max(e.srtt, e.recentRTT) }

// timerRTT returns the RTT and variation a path's timers use: the larger
// of the path's and the connection's smoothed RTT, at least the
// connection's latest sample (so that a queue all paths share, congestion
// and not loss, delays every timer alike and fires none), and the
// connection's variation (a path's own samples may be too few to
// estimate one: with many paths and a small window, a path sees a sample
// every few round trips, and RFC 6298's first variation, half the first
// sample, would then stand for a long time). Before a data sample it adds
// initialSerializations x gran, gran being one full-size packet's
// serialization at the line rate.
func (e *rttEstimator) timerRTT(p *pathRTT, gran sim.Time) (rtt, v sim.Time) {
	rtt, v = e.srtt, e.rttvar
	if p.hasRTT {
		rtt = max(rtt, p.srtt)
	}
	rtt = max(rtt, e.recentRTT)
	if !e.dataRTT {
		rtt += initialSerializations * gran
	}
	return rtt, v
}

// ptoBase is RFC 9002's PTO without the peer's ACK delay: timer RTT +
// max(4 x variation, gran); ok is false while there is no RTT at all.
func (e *rttEstimator) ptoBase(p *pathRTT, gran sim.Time) (d sim.Time, ok bool) {
	rtt, v := e.timerRTT(p, gran)
	if rtt == 0 {
		return 0, false
	}
	return rtt + max(4*v, gran), true
}

// rttSample takes one RTT measurement for p and for the connection; full
// says it was a full-size data packet's. A sample that is not positive or
// above 4 x RTOMax is a stale echo (32-bit clock) or garbage and dropped.
func (c *Conn) rttSample(p *sndPath, r sim.Time, full bool) {
	if r <= 0 || r > 4*c.opts.RTOMax {
		return
	}
	p.rttSample(r)
	c.s.sample(r, full)
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

// pto is how long p waits for ACK progress before a tail-loss probe, and
// how long a probe waits for its answer: RTT + max(4 x variation,
// granularity) + the peer's largest ACK delay (RFC 9002's PTO) + the
// path's recent lateness; the setup timeout before any RTT.
func (c *Conn) pto(p *sndPath) sim.Time {
	d, ok := c.s.ptoBase(&p.pathRTT, c.granularity())
	if !ok {
		return c.opts.SetupTimeout
	}
	return d + c.peerAckDelay + c.lateMax(c.lateHalfLife())
}

// rcvRTT is the receiving side's estimate of the round trip to the peer,
// for the fair-share allocator's activity window: the connection's own
// (from its data, or the handshake's), or the setup timeout before any.
func (c *Conn) rcvRTT() sim.Time {
	if c.s.srtt > 0 {
		return c.s.latest()
	}
	return c.opts.SetupTimeout
}
