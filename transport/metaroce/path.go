package metaroce

import (
	"github.com/mrlab/mrlab/internal/sim"
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

// sndPath is one path of the sending side of a connection.
type sndPath struct {
	c       *Conn
	id      uint8
	state   PathState
	gen     uint8
	entropy uint16

	// sb is what the current generation has outstanding.
	sb scoreboard

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
		for psn := p.sb.una; psn != p.sb.nxt; psn++ {
			e := p.sb.entry(psn)
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
	p.sb.restart()
	c.flagPath(p)
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
