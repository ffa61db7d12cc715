package metaroce

import (
	"math"
	"slices"

	"github.com/mrlab/mrlab/internal/sim"
)

// PathState is where a sender's path is in its life.
//
//	Active --ECN-hot or lossy--> Draining --nothing outstanding: new entropy--> Active
//	Active/Draining --RTO--> Probing (new entropy; its chunks move to other paths)
//	Probing --any ACK progress--> Active
//	Probing --RTO, k in a row--> Failed (k = TimeoutsBeforeFail, or more; doc.go)
//	Failed --probe answered--> Active
//
// Only Active paths take new data. Probing and Failed paths carry probes,
// each on a new entropy, at an interval that doubles per timeout up to
// RTOMax.
type PathState uint8

// Path states.
const (
	PathActive   PathState = iota // carries data
	PathDraining                  // carries no new data; moves to a new entropy when empty
	PathProbing                   // timed out; carries probes on new entropies
	PathFailed                    // timed out repeatedly; probed at the longest interval
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

// sndPath is one path of the sending side of a connection: its route
// (entropy), its PSN space and scoreboard, its RTT estimate, its ECN
// signal and its weight in the connection's window, and its health.
//
// A connection has all its paths from its first send, but most of them
// may never carry a packet (a window of a few dozen packets uses a few of
// 128 paths: at 128 hosts x 128 paths, 2,004 of 16,384 sending paths
// carried one). So a path is two parts: these few bytes, which every
// loop over the connection's paths may read and write, and the rest
// (pathCold), allocated when the path first carries a packet or takes an
// ACK (use). Until then pathCold points at freshCold, the state every
// path starts with, shared and never written: reads of a path not yet
// used see its initial state, as they did when every path had its own.
// Whatever writes a path's cold fields first calls use; the fields a
// loop writes on any path (spare, credit, rackAt, probeWant) are here.
type sndPath struct {
	*pathCold

	// ECN share (cc.go): credit runs the weighted round robin.
	credit float64
	rackAt sim.Time // earliest reorder deadline of its transmissions (lossdetect.go); 0: none

	id         uint8
	state      PathState
	gen        uint8
	wq         uint8  // weight in sixteenths when shares were last computed (cc.go)
	part       uint16 // its part of the window in whole packets, while usable (shares.go)
	entropy    uint16
	heavy      bool // the last round was marked above RepathMarkFraction (cc.go)
	tlpSent    bool // a tail-loss probe went out since progress
	suspect    bool // a probe went unanswered: chunks moved, no new data
	spare      bool // beyond its plane's active paths: no new data (activePerPlane)
	silentLoss bool // packets sent after its last ACK progress were found lost across paths
	probeWant  bool // a probe is due on this path
	portDown   bool // its NIC port is down (portstate.go): no data, no probes, no timers
}

// pathCold is the part of a sending path allocated on its first use
// (sndPath). Its zero value, with c and the timer set, is a path's
// initial state.
type pathCold struct {
	c *Conn

	// sb is what the current generation has outstanding.
	sb scoreboard

	// ECN signal (cc.go). alpha is the EWMA (markavg.go) of the CE-marked
	// fraction of the path's acknowledged packets; the path's weight in
	// the window is 1 - alpha.
	alpha              markAvg
	lastCE, lastRx     uint16 // receiver's cumulative counts at its last record
	roundEnd           uint32 // PSN whose ACK ends the round
	roundPkts, roundCE int    // this round's delivered and marked packets
	markRounds         int32  // consecutive rounds marked above RepathMarkFraction
	tlps               int32  // tail-loss probes since progress (probe.go)

	// RTT (RFC 6298) and timers (probe.go).
	pathRTT
	tlpBase      sim.Time // last send or ACK progress
	tlpSentAt    sim.Time
	probeAt      sim.Time // Probing/Failed: when the next probe is due
	timeouts     int32    // consecutive
	failures     int32    // probe timeouts since the path failed (back-off)
	lastProgress sim.Time // last ACK that acknowledged something new
	// The largest recent lateness of the path's packets behind later-sent
	// ones that had arrived (lossdetect.go).
	pathLate
	timer sim.Timer

	// Loss record of the current entropy, for the repath test.
	genSent, genLost int

	st pathCounters
}

// freshCold is the cold state of every path not yet used: read, never
// written (TestMain checks that it is still zero after the package's
// tests).
var freshCold pathCold

// used reports whether p has its own cold state.
func (p *sndPath) used() bool { return p.pathCold != &freshCold }

// use gives p its own cold state if it has none yet, before anything
// writes it: its first packet, or an ACK of it. The state is the initial
// one, so results are the same as if every path had it from the start.
func (c *Conn) use(p *sndPath) {
	if p.used() {
		return
	}
	p.pathCold = &pathCold{c: c}
	p.timer.Init(pathTimerFired, p)
	c.s.sel.rack.add(int(p.id))
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

// usable reports whether the path takes new data.
func (p *sndPath) usable() bool {
	return p.state == PathActive && !p.suspect && !p.spare && !p.portDown
}

// serviceable reports whether the path could take new data were it among
// its plane's active paths.
func (p *sndPath) serviceable() bool { return p.state == PathActive && !p.suspect && !p.portDown }

// activePerPlane is how many paths of each plane take new data: enough
// that each carries AckEvery (default 4) full packets of the connection's
// allowance, the smaller of its window W and what it has to send (in
// flight plus not yet sent), at least one per plane and at most the
// plane's paths. A connection with a window of a few packets (a sliver of
// a busy receiver, or a short message) then uses a few paths, each with
// packets behind any loss, and one with a window of hundreds of packets
// sprays over all of them. AckEvery packets per path is what the receiver
// answers with one ACK, so each path draws ACKs of its own, and a lost
// packet is usually followed on its path by later ones whose arrival
// shows the loss in the path's SACK at once (paths are FIFO), where a
// path's lone packet waits for the reordering window or a probe. W comes
// from the measured base RTT and the rate (cc.go), so the rule holds the
// same at any link rate.
func (c *Conn) activePerPlane() int {
	ports := c.cfg.Ports
	onPlane := (len(c.s.paths) + ports - 1) / ports
	ports = c.livePorts() // the window spreads over the ports that are up
	if !c.s.heard {
		// Before the receiver's first ACK there is no measured window to
		// size the set by (one packet goes): no cap.
		return onPlane
	}
	allow := min(int64(c.window()), int64(c.s.inflight)+c.s.unsent)
	pkts := max(int((allow+int64(c.mss)-1)/int64(c.mss)), 1)
	per := c.opts.AckEvery
	if c.mutated(MutNoPathCap) {
		per = 1
		pkts = len(c.s.paths)
	}
	n := (pkts + per - 1) / per
	return min(max((n+ports-1)/ports, 1), onPlane)
}

// setSpare marks, on each plane, the paths past the first perPlane that
// could take new data as spare (they keep what they have outstanding and
// its timers, and take nothing new).
func (c *Conn) setSpare(perPlane int) {
	ports := c.cfg.Ports
	if perPlane <= 0 {
		perPlane = len(c.s.paths) // not computed yet: no cap
	}
	c.s.sel.open = pathSet{}
	for port := 0; port < ports; port++ {
		k := 0
		cand := &c.s.sel.pick[port].cand
		*cand = pathSet{}
		for i, j := port, 0; i < len(c.s.paths); i, j = i+ports, j+1 {
			p := &c.s.paths[i]
			p.spare = false
			if p.serviceable() {
				p.spare = k >= perPlane
				k++
			}
			if !p.spare {
				cand.add(j)
				c.s.sel.open.add(i)
			}
		}
	}
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

// badEntropies is how many entropies a connection remembers as recently
// bad: a new entropy is never one of them.
const badEntropies = 8

// newEntropy draws a UDP source port in 49152..65535 that no other path of
// the connection uses (nor drawn, the paths' entropies drawn so far when
// the connection is built) and that is not recently bad.
func (c *Conn) newEntropy(drawn ...uint16) uint16 {
	for {
		e := uint16(49152 + c.cfg.Rand.IntN(16384))
		clash := false
		for i := range c.s.paths {
			if c.s.paths[i].entropy == e {
				clash = true
				break
			}
		}
		for _, o := range drawn {
			if o == e {
				clash = true
			}
		}
		for _, b := range c.s.bad {
			if b == e {
				clash = true
			}
		}
		if !clash {
			return e
		}
	}
}

// noteBad records an entropy the connection left (its route lost, marked
// or dropped everything, or a probe on it went unanswered).
func (c *Conn) noteBad(e uint16) {
	c.s.bad[c.s.badNext%badEntropies] = e
	c.s.badNext++
}

// repath moves p to a new entropy: a new generation whose PSNs start at 0,
// so the receiver sees a fresh sequence space and nothing sent on the old
// route can look like loss on the new one. With abandon, the chunks still
// outstanding move to the connection's retransmit queue, to be re-sent on
// a path that delivers.
func (c *Conn) repath(p *sndPath, why repathReason, abandon bool) {
	moved := 0
	if abandon {
		moved = c.abandon(p)
	}
	old := p.entropy
	// Every entropy left is remembered, re-probing's too (spec §10: a
	// connection never re-picks one of the last eight it left): a probe
	// unanswered on it is as much evidence against the route as a loss.
	c.noteBad(old)
	p.entropy = c.newEntropy()
	if c.mutated(MutKeepEntropy) {
		p.entropy = old
	}
	p.gen++
	p.sb.restart()
	c.flagPath(p)
	p.lastCE, p.lastRx = 0, 0
	p.roundPkts, p.roundCE, p.roundEnd, p.markRounds, p.heavy = 0, 0, 0, 0, false
	p.genSent, p.genLost = 0, 0
	p.tlpSent, p.tlps, p.suspect, p.silentLoss = false, 0, false, false
	p.alpha = 0 // a new route: its marks are its own
	c.s.pathsChanged()
	p.st.entropyChanges++
	c.st.entropyChanges++
	if c.cfg.Trace != nil {
		c.tracef("path %d entropy %d -> %d after %v (gen %d, %d chunks moved)", p.id, old, p.entropy, why, p.gen, moved)
	}
}

// abandon moves p's outstanding chunks to the retransmit queue and
// returns how many moved. Their PSNs stay on p's scoreboard as
// payload-free fillers, so the path's sequence space is undisturbed.
func (c *Conn) abandon(p *sndPath) int {
	moved := 0
	for psn := p.sb.una; psn != p.sb.nxt; psn++ {
		e := p.sb.entry(psn)
		if e.acked || e.kind == sbProbe {
			continue
		}
		ch := c.chunk(e.dsn)
		if ch.where != chunkOnPath || ch.path != p.id || ch.gen != p.gen || ch.psn != psn {
			continue
		}
		n := p.sb.move(psn) // the PSN stays, a filler
		c.s.inflight -= n
		c.flightLeft(n)
		ch.where = chunkQueued
		c.s.rexmit = append(c.s.rexmit, e.dsn)
		moved++
	}
	return moved
}

// noteLosses runs the repath test on p after it lost newLosses more
// packets: p moves to a new entropy, its outstanding chunks to paths that
// deliver, when its losses on the current entropy are too many to be
// chance at the typical path's loss rate (the Chernoff bound of the
// binomial tail below RepathConfidence). The typical rate is the median
// over the connection's paths (pathLossBase), so that a gray link many
// paths cross does not raise the bar its own paths are judged by, while
// under loss spread evenly over the fabric every path is typical and none
// moves.
func (c *Conn) noteLosses(p *sndPath, newLosses int) {
	p.genLost += newLosses
	if p.state != PathActive || !c.otherActivePath(p) || c.mutated(MutNoGrayRepath) {
		return
	}
	if c.mutated(MutRepathAnyLoss) {
		c.repath(p, whyLosses, true)
		return
	}
	n, k := float64(max(p.genSent, p.genLost)), float64(p.genLost)
	q := c.pathLossBase()
	if k/n <= q || q <= 0 {
		return
	}
	if n*klDiv(k/n, q) > math.Log(1/c.opts.RepathConfidence) {
		if c.cfg.Trace != nil {
			c.tracef("path %d: %d of %d packets lost on entropy %d, typical path %.2f%%: moving", p.id, p.genLost, p.genSent, p.entropy, 100*q)
		}
		c.repath(p, whyLosses, true)
	}
}

// pathLossBase is the typical path's loss rate: the median over the
// connection's active paths of each path's losses on its entropy, shrunk
// toward the connection's loss rate q by a prior worth one loss
// ((k + 1) / (n + 1/q)), so that a path with few packets counts as typical.
// It is recomputed at most once per smoothed RTT, and at once when q has
// moved by more than a factor of two since: the losses of a burst (a
// first flight, spec §first-flight) are all detected within one round
// trip, and a base computed when only the first of them was known makes
// every path's share of the rest look like a gray link.
func (c *Conn) pathLossBase() float64 {
	s := &c.s
	q := c.lossRate()
	if s.baseAt != 0 && c.now-s.baseAt < max(s.srtt, 1) && q <= 2*float64(s.baseQ) && 2*q >= float64(s.baseQ) {
		return float64(s.lossBase)
	}
	s.baseAt, s.baseQ = c.now, float32(q)
	if q <= 0 {
		s.lossBase = 0
		return 0
	}
	var buf [256]float64
	rates := buf[:0]
	for i := range s.paths {
		if p := &s.paths[i]; p.state == PathActive {
			rates = append(rates, (float64(p.genLost)+1)/(float64(p.genSent)+1/q))
		}
	}
	base := q
	if len(rates) > 0 {
		slices.Sort(rates)
		base = rates[len(rates)/2]
	}
	s.lossBase = float32(base)
	return float64(s.lossBase)
}

// klDiv is the Kullback-Leibler divergence of Bernoulli(a) from
// Bernoulli(b): n*klDiv(k/n, p) bounds -ln P(X >= k) for X ~ Bin(n, p).
func klDiv(a, b float64) float64 {
	d := 0.0
	if a > 0 {
		d += a * math.Log(a/b)
	}
	if a < 1 {
		d += (1 - a) * math.Log((1-a)/(1-b))
	}
	return d
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

// pathRecovered returns a probing or failed path to service.
func (c *Conn) pathRecovered(p *sndPath) {
	if p.state != PathActive && c.cfg.Trace != nil {
		c.tracef("path %d recovered on entropy %d", p.id, p.entropy)
	}
	if p.state == PathProbing || p.state == PathFailed {
		p.state = PathActive
		p.probeWant = false
		c.flagPath(p)
		c.s.pathsChanged()
	}
	p.timeouts = 0
	c.allFailedSince = 0
}

// ensurePaths allocates the sending paths if they are not yet: before
// anything is queued to send, and before anything reads or acknowledges
// a path. Allocating them later than the connection changes nothing a
// path holds: until something is sent a path is its initial state, and
// its entropy was drawn when the connection was built. Each path's cold
// state comes later still, on the path's own first use (use).
func (c *Conn) ensurePaths() {
	if c.s.paths != nil {
		return
	}
	e0, ok := c.proto.entropy0[c]
	if !ok {
		return
	}
	delete(c.proto.entropy0, c)
	c.s.paths = make([]sndPath, len(e0))
	for i := range c.s.paths {
		ph := &c.s.paths[i]
		ph.pathCold, ph.id = &freshCold, uint8(i)
		ph.entropy = e0[i]
		ph.credit = 1
		ph.portDown = c.proto.portsDown>>(ph.plane(c.cfg.Ports)%32)&1 != 0
		c.s.sel.rack.add(i) // rackAt 0: not yet swept (pathSel)
	}
	c.s.pathsChanged()
}

// pathCount returns the number of sending paths, allocated or not.
func (c *Conn) pathCount() int {
	if c.s.paths != nil {
		return len(c.s.paths)
	}
	return c.configuredPaths()
}

// configuredPaths is the number of sending paths a connection is built
// with: Options.Paths, or DefaultPaths for its ports.
func (c *Conn) configuredPaths() int {
	if c.opts.Paths != 0 {
		return c.opts.Paths
	}
	return DefaultPaths(c.cfg.Ports)
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
