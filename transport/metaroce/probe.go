package metaroce

import (
	"math"
	"math/bits"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// Timers. Every path has one timer; what it runs depends on the path's
// state. PTO (rtt.go) is RTT + max(4 x variation, granularity) + the
// peer's ACK delay, with the RTT never below the connection's recent RTT.
//
//   - Active or Draining, something outstanding: a tail-loss probe PTO
//     after the path's last transmission or ACK progress, whichever is
//     later. The probe is sent at once, outside the window and not held
//     by the pacer (one that carries a chunk moves the pacer):
//     a PSN of the path found lost and not yet resent, if any; else, once
//     the connection has measured a data packet's RTT, the path's next
//     packet: a new chunk if the connection has one, else the path's
//     newest outstanding chunk again (its old PSN becomes a payload-free
//     filler); otherwise a bare PROBE. Its ACK shows any hole before
//     it, so a lost tail is found within about one round trip.
//   - A probe interval without progress after it (a PTO while chance can
//     explain the silence, then doubling per probe, at most RTOMax), after
//     tailProbes() probes (the chance rule; one loss-free), with evidence
//     that the route is silent: another path of the connection
//     has made progress a round trip or more after the probe left
//     (othersDeliver, the timeout's evidence below), or packets the path
//     sent after its last progress were found lost across paths
//     (lossdetect.go: later packets on other paths arrived); or, after
//     one probe, nothing else is outstanding on a path that still
//     answers and nothing is left to send (othersIdle): the
//     path is suspect. Its outstanding chunks move to paths
//     that deliver (pickHealthy) and it takes no new data.
//     Either way it sends another probe, a bare PROBE, every probe
//     interval. Without that evidence every path's ACKs are late alike
//     (the peer's NIC is slow to send them, a queue all paths cross):
//     moving would send each chunk twice for nothing (on plane-scaling's
//     4,000 connections 12,000 of 12,362 moves were, seed 3), so the
//     path keeps its chunks and keeps taking its share. (Without the
//     last two kinds of evidence a plane that dies with a connection's
//     last chunks on it would hold them until RTOMax.)
//   - A retransmission timeout when, a probe interval after the last
//     probe, the path has sent at least tailProbes() probes (one on a
//     loss-free connection, more when its measured loss makes that many
//     lost probes or answers in a row likelier than 1e-3: the "chance"
//     rule) and either another path has made progress a round trip after
//     that probe left (the network answers, this route does not) or the
//     interval has backed off to RTOMax. The path's chunks move to paths
//     that deliver (pickHealthy), the path takes a new entropy
//     (the old one is remembered as bad) and becomes Probing. So a timeout
//     means the path's ACKs stopped: not that random loss took a probe,
//     not that a queue all paths share delayed them.
//   - Probing: a PROBE on a new entropy every PTO until one is answered.
//     After timeoutsBeforeFail() unanswered in a row (TimeoutsBeforeFail,
//     or more by the chance rule) the path is Failed: its probes' interval
//     doubles each time, up to RTOMax. When every path is Failed for
//     AllFailedTimeout the connection gives up.
//
// Any ACK that acknowledges something new on a path returns it to Active
// and resets its timeouts.

// transmitProbe sends a due probe (a tail-loss probe, or a probe of a
// probing or failed path) on port's plane.
func (c *Conn) transmitProbe(port int, b []byte) (int, transport.TxMeta) {
	for w, word := range c.s.probeSet {
		for word != 0 {
			i := 64*w + bits.TrailingZeros64(word)
			word &= word - 1
			if p := &c.s.paths[i]; p.plane(c.cfg.Ports) == port && p.sb.room() {
				n, meta := c.sendProbe(p, b)
				// A probe that carries a chunk (a lost PSN resent, a new
				// chunk, the newest one again) loads the receiver like any
				// data packet: it is not held by the pacer (it is due now)
				// but moves it, so the next data packet waits its gap. A
				// payload-free probe or filler does not (pacer.sent).
				c.pace(n)
				return n, meta
			}
		}
	}
	return 0, transport.TxMeta{}
}

// sendProbe sends p's due probe. A tail-loss probe is a PSN the path has
// found lost and not yet resent (the window or the pacer held it), if
// any; else, the first since progress, a new chunk if the connection has
// one (and the path is Active), else the path's newest outstanding chunk
// again; every other probe, one with none of these to send, and any probe
// before the connection has measured a data packet's RTT (its PTO is then
// a guess, and the packets it waits for may only be queued) is a bare
// PROBE, whose arrival proves any hole before it a loss. Probes are
// neither windowed nor held by the pacer; one carrying a chunk moves the
// pacer like any data packet (transmitProbe).
func (c *Conn) sendProbe(p *sndPath, b []byte) (int, transport.TxMeta) {
	c.use(p)
	p.probeWant = false
	c.flagPath(p)
	p.st.probes++
	if (p.state == PathActive || p.state == PathDraining) && p.sb.lost > 0 {
		if n := c.resendLost(p, b); n > 0 {
			p.tlpSent, p.tlpSentAt = true, c.now // resendLost restarted the probe timer
			c.armPath(p)
			return n, transport.TxMeta{SrcPort: p.entropy, ECT: true}
		}
	}
	if (p.state == PathActive || p.state == PathDraining) && p.tlps <= 1 && c.s.dataRTT {
		if p.state == PathActive {
			if job, msn, size, ok := c.nextChunkSize(); ok {
				dsn := c.cutChunk(job, msn, size)
				n := c.sendChunk(p, dsn, b, wire.FlagAckReq)
				p.tlpSent, p.tlpSentAt = true, c.now // sendChunk restarted the probe timer
				if c.cfg.Trace != nil {
					c.tracef("path %d: tail-loss probe with new dsn %d", p.id, dsn)
				}
				c.armPath(p)
				return n, transport.TxMeta{SrcPort: p.entropy, ECT: true}
			}
		}
		if n := c.tailLossProbe(p, b); n > 0 {
			p.tlpSent, p.tlpSentAt = true, c.now
			c.armPath(p)
			return n, transport.TxMeta{SrcPort: p.entropy, ECT: true}
		}
	}
	psn := p.sb.push(sbEntry{kind: sbProbe, sentAt: c.now, order: c.nextOrder()})
	n := c.encodeProbe(b, p, psn, false)
	if p.state == PathActive || p.state == PathDraining {
		p.tlpSent, p.tlpSentAt = true, c.now
	}
	c.countSend(p, n)
	c.armPath(p)
	return n, transport.TxMeta{SrcPort: p.entropy, ECT: true}
}

// tailLossProbe sends p's newest outstanding chunk again under a new PSN,
// as RFC 8985's probe does with the last segment, and returns the packet's
// size (0 if p has no chunk outstanding). The chunk's old PSN becomes a
// filler (no payload, like an RNR refusal's), so that if it turns out lost
// only the hole is closed; the receiver places the chunk once whichever
// copy arrives (the DSN window).
func (c *Conn) tailLossProbe(p *sndPath, b []byte) int {
	for psn := p.sb.nxt - 1; p.sb.outstanding(psn); psn-- {
		e := p.sb.entry(psn)
		if e.acked || e.lost || e.kind != sbData {
			continue // (a presumed entry is still a candidate)
		}
		ch := c.chunk(e.dsn)
		if ch.where != chunkOnPath || ch.path != p.id || ch.gen != p.gen || ch.psn != psn {
			continue
		}
		c.s.inflight -= p.sb.move(psn)
		c.st.retransmits++
		if c.cfg.Trace != nil {
			c.tracef("path %d: tail-loss probe resends dsn %d (psn %d)", p.id, e.dsn, psn)
		}
		return c.sendChunk(p, e.dsn, b, wire.FlagAckReq)
	}
	return 0
}

// onPathTimer runs a path's tail-loss probe, retransmission timeout or
// probe timeout.
func (c *Conn) onPathTimer(p *sndPath) {
	if c.state != transport.StateEstablished {
		return
	}
	now := c.now
	if p.rackAt != 0 && p.rackAt != sim.Never && now >= p.rackAt {
		c.rackDetect()
		if c.state != transport.StateEstablished {
			return
		}
	}
	switch p.state {
	case PathActive, PathDraining:
		if p.sb.empty() || now < c.probeDue(p) || c.rnrWaiting(p) {
			break
		}
		if int(p.tlps) >= c.tailProbes() && (c.othersDeliver(p) || c.probeInterval(p) >= c.opts.RTOMax) {
			c.pathTimeout(p)
			break
		}
		if p.tlps >= 1 && !p.suspect && (int(p.tlps) >= c.tailProbes() && (c.othersDeliver(p) || p.silentLoss) || c.othersIdle(p)) {
			// Probes unanswered, each for a probe interval, with evidence
			// that the route is silent, not the peer, beyond what chance
			// explains: as many as the chance rule's tailProbes (one
			// loss-free) and another path delivered a round trip after
			// the latest left, or packets sent on this path after its
			// last progress were found lost across paths (later ones
			// elsewhere arrived); or one, and there is nothing else to
			// compare with (no other path that still answers holds
			// anything and nothing is left to send: waiting would wait
			// for ever). Under heavy loss one unanswered probe is no
			// evidence: at 47% loss end to end a probe round trip fails
			// three times in four, and half the chunks moved on one had
			// arrived (their ACKs lost) and went twice (regimes fattree
			// 10G 10% bursty, seed 5: 83.0% of the loss ceiling, 88.9%
			// with the count). What the path
			// holds goes to paths that deliver, and the path takes no new
			// data until it answers. Without such evidence every path's
			// ACKs are late alike (a queue all paths cross, the peer
			// NIC's transmit scheduler): moving would send each chunk
			// twice, so the path keeps them and probes on.
			p.suspect = true
			moved := c.abandon(p)
			c.s.pathsChanged()
			if c.cfg.Trace != nil {
				c.tracef("path %d: probe unanswered for %v, %d chunks moved to other paths", p.id, now-p.tlpSentAt, moved)
			}
		}
		// Due now; sendProbe restamps tlpSentAt when it goes out. What the
		// path has outstanding no longer counts in the window: its ACKs
		// have stopped, and the probe's answer will say what was lost.
		p.tlps++
		p.tlpSent, p.tlpSentAt, p.probeWant = true, now, true
		n := p.sb.presume()
		c.s.inflight -= n
		c.flightLeft(n)
		c.flagPath(p)
		c.st.tailProbes++
		if c.cfg.Trace != nil {
			c.tracef("path %d: no ACK for %v, tail-loss probe %d", p.id, now-p.tlpBase, p.tlps)
		}
	case PathProbing, PathFailed:
		if now >= p.probeAt {
			c.probeTimeout(p)
		}
		if c.allFailedSince != 0 && now-c.allFailedSince >= c.opts.AllFailedTimeout {
			if c.cfg.Trace != nil {
				c.tracef("every path failed for %v: giving up", now-c.allFailedSince)
			}
			c.fail(transport.StatusRetryExceeded, 0, false)
			return
		}
	}
	c.armPath(p)
}

// rnrWaiting reports whether p's tail-loss probe is off for an RNR wait:
// the connection has chunks waiting out an RNR back-off and p holds no
// chunk (fillers and probes only, none to send again). A chunk the
// receiver refused is not lost and not a tail: the sender knows where it
// is and when it goes again (the RNR timer), and the filler under its old
// PSN is settled by the ACKs of whatever p sends next. Probing such a path
// would only answer itself, a probe per PTO for the whole back-off.
// Probing resumes when the wait ends (onRNRTimer) or p sends a chunk.
func (c *Conn) rnrWaiting(p *sndPath) bool {
	return len(c.s.rnr) > 0 && c.holdsNoChunk(p)
}

// holdsNoChunk reports whether every PSN p has outstanding is a filler or
// a probe and none waits to be sent again.
func (c *Conn) holdsNoChunk(p *sndPath) bool {
	if p.sb.lost > 0 {
		return false
	}
	for psn := p.sb.una; psn != p.sb.nxt; psn++ {
		if e := p.sb.entry(psn); !e.acked && e.kind != sbProbe {
			return false
		}
	}
	return true
}

// probeDue is when an Active or Draining path with something outstanding
// sends its next tail-loss probe (or times out): a PTO after its last
// transmission or progress, or one probe interval after its last probe.
func (c *Conn) probeDue(p *sndPath) sim.Time {
	if p.tlpSent {
		return p.tlpSentAt + c.probeInterval(p)
	}
	if c.mutated(MutLateTailProbe) {
		return p.tlpBase + 8*c.pto(p)
	}
	return p.tlpBase + c.pto(p)
}

// probeInterval is the wait after p's latest tail-loss probe: a PTO while
// chance can explain the unanswered probes (tailProbes), then doubling
// with every further probe (RFC 9002's back-off), at most RTOMax.
func (c *Conn) probeInterval(p *sndPath) sim.Time {
	return min(c.pto(p)<<min(max(int(p.tlps)-c.tailProbes(), 0), 20), c.opts.RTOMax)
}

// othersDeliver reports whether another path of the connection has made
// progress a round trip or more after p's latest probe left: the network
// answers, p's route does not. A queue every path crosses delays every
// path's answers alike and gives no such evidence, so congestion alone
// times nothing out; without the evidence, a path times out only once its
// probe interval has backed off to RTOMax.
func (c *Conn) othersDeliver(p *sndPath) bool {
	return c.s.lastProgress > p.tlpSentAt+max(c.s.srtt, c.s.recentRTT)
}

// othersIdle reports whether no other path of the connection that still
// answers has data in flight (bytes not yet acknowledged, found lost or
// presumed gone): p's silence then has nothing to be compared with (a
// path holding the connection's last chunks, or paths whose ACKs all
// stopped), and waiting for evidence would wait for ever. A path that is
// itself probing unanswered does not count: two silent paths holding a
// connection's last chunks would otherwise each wait for the other until
// their probes backed off to RTOMax (regimes fattree 100G 1% bursty,
// seed 1: 300 us of tail, 165.6 against 175.6 Gb/s).
func (c *Conn) othersIdle(p *sndPath) bool {
	if c.s.unsent > 0 {
		return false // the others have work to come: their ACKs will tell
	}
	for i := range c.s.paths {
		if q := &c.s.paths[i]; q != p && (q.state == PathActive || q.state == PathDraining) && !q.sb.empty() && q.tlps == 0 {
			return false
		}
	}
	return true
}

// tailProbes is how many tail-loss probes a path sends before it times
// out: 1, or as many as it takes for all of them (or their answers) to be
// lost by chance with probability below 1e-3 at the connection's measured
// loss rate.
func (c *Conn) tailProbes() int {
	return c.chanceRun(1, 1e-3)
}

// chanceRun is the chance rule: at least k, and enough that so many
// probe round trips in a row all fail by chance with probability below
// eps at the connection's measured loss rate (a probe or its answer lost:
// 1 - (1-loss)^2). A run that long is evidence the route is dead.
func (c *Conn) chanceRun(k int, eps float64) int {
	loss := min(c.lossRate(), 0.9)
	if loss <= 0 {
		return k
	}
	q := 1 - (1-loss)*(1-loss)
	return max(k, int(math.Ceil(math.Log(eps)/math.Log(q))))
}

// pathTimeout handles the retransmission timeout of an Active or Draining
// path: its chunks move to paths that deliver, and it probes a new
// entropy.
func (c *Conn) pathTimeout(p *sndPath) {
	p.timeouts = 1
	p.st.timeouts++
	c.st.timeouts++
	if c.cfg.Trace != nil {
		c.tracef("path %d: RTO (no ACK for %v after %d probes)", p.id, c.now-p.tlpBase, p.tlps)
	}
	c.repath(p, whyTimeout, true)
	p.state = PathProbing
	c.s.pathsChanged()
	c.probeSoon(p)
}

// probeTimeout handles a Probing or Failed path whose probe went
// unanswered: a new entropy and a new probe.
func (c *Conn) probeTimeout(p *sndPath) {
	if p.probeWant {
		// The probe has not gone out yet (its port was busy): wait.
		p.probeAt = c.now + c.pto(p)
		return
	}
	p.timeouts++
	p.st.timeouts++
	c.st.timeouts++
	if c.cfg.Trace != nil {
		c.tracef("path %d: RTO (probe unanswered, %d in a row)", p.id, p.timeouts)
	}
	if p.state == PathProbing && int(p.timeouts) >= c.timeoutsBeforeFail() {
		p.state = PathFailed
		p.failures = 0
		if c.cfg.Trace != nil {
			c.tracef("path %d failed after %d timeouts; its traffic moves to other paths", p.id, p.timeouts)
		}
		c.checkAllFailed()
	}
	c.repath(p, whyReprobe, true)
	c.probeSoon(p)
}

// probeSoon makes a probe due on p now and sets when it times out: a PTO
// while Probing, doubling per timeout (up to RTOMax) once Failed.
func (c *Conn) probeSoon(p *sndPath) {
	p.probeWant = true
	c.flagPath(p)
	back := c.pto(p)
	if p.state == PathFailed {
		back <<= min(p.failures+1, 20)
		p.failures++
	}
	p.probeAt = c.now + min(back, c.opts.RTOMax)
}

// timeoutsBeforeFail is how many consecutive timeouts mark a path failed:
// TimeoutsBeforeFail, or more by the chance rule (probability 1e-4).
func (c *Conn) timeoutsBeforeFail() int {
	return c.chanceRun(c.opts.TimeoutsBeforeFail, 1e-4)
}

// armPath sets p's timer to its next event.
func (c *Conn) armPath(p *sndPath) {
	at := sim.Never
	switch {
	case p.portDown:
		// Nothing leaves by a port that is down (portstate.go).
	case p.state == PathActive || p.state == PathDraining:
		if !p.sb.empty() {
			if !c.rnrWaiting(p) {
				at = c.probeDue(p)
			}
			if p.rackAt != 0 {
				at = min(at, p.rackAt)
			}
		}
	default: // Probing, Failed
		at = p.probeAt
	}
	if at == sim.Never {
		c.timers.Disarm(&p.timer)
	} else if !p.timer.Armed() || p.timer.When() != at {
		c.timers.Arm(&p.timer, at)
	}
}
