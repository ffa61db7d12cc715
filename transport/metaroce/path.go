package metaroce

import (
	"math"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// PathState is where a sender's path is in its life.
//
//	Active --ECN-heavy--> Draining --in-flight drained, new entropy--> Active
//	Active --losses--> Active (new entropy; in-flight chunks move to other paths)
//	Active --RTO--> Probing (new entropy, in-flight moves, cwnd 1 MSS;
//	                 under heavy random loss a first RTO stays Active)
//	Probing --probe ACKed--> Active
//	Probing --RTO, TimeoutsBeforeFail in a row--> Failed
//	Failed --every FailedProbeInterval: new entropy, probe; ACKed--> Active
type PathState uint8

// Path states.
const (
	PathActive   PathState = iota // carries data
	PathDraining                  // carries no new data; repaths when empty
	PathProbing                   // timed out; carries a probe on a new entropy
	PathFailed                    // timed out repeatedly; re-probed slowly
)

func (s PathState) String() string {
	switch s {
	case PathActive:
		return "active"
	case PathDraining:
		return "draining"
	case PathProbing:
		return "probing"
	case PathFailed:
		return "failed"
	}
	return "PathState?"
}

// sbKind is what a scoreboard entry carries.
type sbKind uint8

const (
	sbData  sbKind = iota // a chunk (by DSN)
	sbProbe               // a probe or a hole filler: no payload, no DSN
	sbAbort               // a chunk whose message failed: sent as ABORT
)

// sbEntry is one PSN on a path's scoreboard.
type sbEntry struct {
	dsn    uint32
	txSeq  uint32 // path-local transmission order of the latest send
	size   uint16 // payload bytes counted in flight
	kind   sbKind
	acked  bool
	lost   bool // declared lost, waiting to be sent again
	resent bool // sent more than once: an ACK of it is ambiguous
}

// maxPathWindow is the most PSNs a path has outstanding: the SACK window.
const maxPathWindow = wire.SACKBits

// sndPath is one path of the sending side of a connection.
type sndPath struct {
	c       *Conn
	id      uint8
	state   PathState
	gen     uint8
	entropy uint16

	// Scoreboard: PSNs [una, nxt) are outstanding; sb is a ring indexed by
	// PSN, sized to what is in flight (at most maxPathWindow).
	nxt, una   uint32
	sb         []sbEntry
	txSeq      uint32 // transmissions on this path, in order
	maxAckedTx uint32 // latest transmission known to have arrived
	lost       int    // entries marked lost and not yet resent
	inflight   int    // payload bytes outstanding and not lost

	// Congestion control (cc.go).
	cwnd       int
	cwndFrac   int
	alpha      float64
	roundEnd   uint32 // PSN that ends the current DCTCP round
	roundPkts  int
	roundCE    int
	cutEnd     uint32 // no window cut until una passes this PSN
	markRounds int    // consecutive rounds marked above RepathMarkFraction
	heavy      bool
	lastCE     uint16 // receiver's cumulative CE count at the last ACK

	// RTT (RFC 6298) and timers.
	srtt, rttvar, rto, minRTT sim.Time
	hasRTT                    bool
	rtoBase                   sim.Time // start of the retransmission timer
	tlpBase                   sim.Time // last send or progress
	tlpSent                   bool
	tlps                      int      // heavy loss: tail-loss probes since progress
	tlpSentAt                 sim.Time // heavy loss: when the latest of them left
	probeWant                 bool     // a probe is due on this path
	probeAt                   sim.Time // Failed: next re-probe
	timeouts                  int      // consecutive
	lossBase                  uint32   // PSN where the loss-count window began
	losses                    int
	timer                     sim.Timer

	st pathCounters
}

// pathCounters are a path's lifetime counters.
type pathCounters struct {
	packets, bytes, retransmits, losses, timeouts, entropyChanges, probes uint64
	acked, ceAcked                                                        uint64
}

func pathTimerFired(now sim.Time, arg any) {
	p := arg.(*sndPath)
	p.c.onPathTimer(p)
}

// plane returns the NIC port the path's packets leave on.
func (p *sndPath) plane(ports int) int { return int(p.id) % ports }

// entry returns the scoreboard entry of an outstanding PSN.
func (p *sndPath) entry(psn uint32) *sbEntry { return &p.sb[psn&uint32(len(p.sb)-1)] }

// outstanding reports whether PSN psn is in [una, nxt).
func (p *sndPath) outstanding(psn uint32) bool { return psn-p.una < p.nxt-p.una }

// room reports whether the path may send one more PSN.
func (p *sndPath) room() bool { return p.nxt-p.una < maxPathWindow }

// push appends a new PSN to the scoreboard and returns it.
func (p *sndPath) push(e sbEntry) uint32 {
	span := int(p.nxt - p.una)
	if span+1 > len(p.sb) {
		p.growSB(span + 1)
	}
	psn := p.nxt
	p.nxt++
	*p.entry(psn) = e
	return psn
}

func (p *sndPath) growSB(n int) {
	size := max(len(p.sb), 4)
	for size < n {
		size *= 2
	}
	old := p.sb
	p.sb = make([]sbEntry, size)
	if len(old) > 0 {
		for psn := p.una; psn != p.nxt; psn++ {
			p.sb[psn&uint32(size-1)] = old[psn&uint32(len(old)-1)]
		}
	}
}

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

// rcvPath is the receiving side's view of one of the peer's paths.
type rcvPath struct {
	seen    bool
	gen     uint8
	sack    sack
	ce, rx  uint16 // cumulative CE-marked and received packets, this gen
	pending int    // packets since the last ACK
	ece     bool   // a CE mark arrived since the last ACK
	echoTS  uint32 // ts of the latest packet, echoed in the next ACK
	port    int    // where the path's packets arrive: its ACKs go back there
	sport   uint16 // the path's entropy: its ACKs use it too
}

// reset starts a new generation of the path.
func (r *rcvPath) reset(gen uint8) {
	*r = rcvPath{seen: true, gen: gen, port: r.port, sport: r.sport}
}

// repathReason says why a path moved to a new entropy.
type repathReason uint8

const (
	whyLosses repathReason = iota
	whyTimeout
	whyMarks
	whyReprobe
)

func (r repathReason) String() string {
	switch r {
	case whyLosses:
		return "losses"
	case whyTimeout:
		return "timeout"
	case whyMarks:
		return "ECN marks"
	case whyReprobe:
		return "re-probe"
	}
	return "?"
}

// repath moves p to a new entropy: a new generation whose PSNs start at 0,
// so the receiver sees a fresh sequence space and nothing sent on the old
// route can look like loss on the new one. With abandon, the chunks still
// outstanding move to the connection's retransmit queue, to be re-sent on
// whichever path has room (a drained path has none).
func (c *Conn) repath(p *sndPath, why repathReason, abandon bool) {
	moved := 0
	if abandon {
		for psn := p.una; psn != p.nxt; psn++ {
			e := p.entry(psn)
			if e.acked || e.kind == sbProbe {
				continue
			}
			ch := c.chunk(e.dsn)
			if ch.where != chunkOnPath || ch.path != p.id || ch.gen != p.gen || ch.psn != psn {
				continue
			}
			if !e.lost {
				c.s.inflight -= int(e.size)
			}
			ch.where = chunkQueued
			c.s.rexmit = append(c.s.rexmit, e.dsn)
			moved++
		}
	}
	old := p.entropy
	p.entropy = c.newEntropy()
	p.gen++
	p.una, p.nxt, p.lost, p.inflight = 0, 0, 0, 0
	c.flagPath(p)
	p.maxAckedTx = p.txSeq
	p.lastCE = 0
	p.roundEnd, p.roundPkts, p.roundCE, p.cutEnd = 0, 0, 0, 0
	p.lossBase, p.losses, p.markRounds, p.heavy = 0, 0, 0, false
	p.tlpSent, p.tlps = false, 0
	p.st.entropyChanges++
	c.st.entropyChanges++
	if c.cfg.Trace != nil {
		c.tracef("path %d entropy %d -> %d after %v (gen %d, %d chunks moved)", p.id, old, p.entropy, why, p.gen, moved)
	}
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
		if p.una == p.nxt {
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
		if p.una != p.nxt && now >= c.rtoAt(p) {
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

// pathRecovered returns a probing or failed path to service.
func (c *Conn) pathRecovered(p *sndPath) {
	if p.state == PathFailed {
		p.cwnd = c.initialPathWindow()
		p.rto = p.computeRTO(c.opts)
	}
	if p.state != PathActive && c.cfg.Trace != nil {
		c.tracef("path %d recovered on entropy %d", p.id, p.entropy)
	}
	if p.state == PathProbing || p.state == PathFailed {
		p.state = PathActive
	}
	c.allFailedSince = 0
}

// checkAllFailed starts the give-up clock when no path can carry data.
func (c *Conn) checkAllFailed() {
	for i := range c.s.paths {
		if c.s.paths[i].state != PathFailed {
			return
		}
	}
	if c.allFailedSince == 0 {
		c.allFailedSince = max(c.now, 1)
		if c.cfg.Trace != nil {
			c.tracef("all %d paths failed", len(c.s.paths))
		}
	}
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
		if p.una != p.nxt {
			at = c.rtoAt(p)
			if !p.tlpSent && p.tlps < maxTailProbes {
				at = min(at, c.tlpAt(p))
			}
		}
	case PathProbing:
		if p.una != p.nxt {
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
