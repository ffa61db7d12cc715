package metaroce

import (
	"math/bits"

	"github.com/mrlab/mrlab/internal/sim"
)

// lateMemo serves Conn.lateMax, the largest lateness over a connection's
// paths, for the connection that last asked on this NIC. pto asks for it
// once per path, after every send and ACK, and loops over paths (arming
// every path's timer after an ACK, looking for a healthy path) asked for
// it 128 times at 128 paths; a scan of every path read each path's cold
// state from memory (7% of leafspine-128h's and fattree-k16's CPU).
//
// Two things are kept. The last answer (now, half, max): it depends only
// on the instant, the half-life and the paths' samples, and a path's
// lateness only changes when its sample halves (at lateAt + k x half), so
// it serves from now until the first such instant over the set (until),
// for the same half-life; a new sample clears it (noted). And set, the
// connection's paths that ever took a sample (late > 0): only they can
// have a lateness, and a path's sample is never removed (its lateness
// fades with time, but the half-life can grow again), so a path enters the
// set with its first sample (noted) and never leaves; the answer is the
// largest over the set, the same as over every path. Switching to another
// connection rebuilds the set from every path. It lives in the Protocol
// (one per NIC, used by one loop), not in Conn, which stays in its size
// class.
type lateMemo struct {
	c     *Conn
	id    uint32 // c's id, so that a Conn reusing a freed one's memory does not match
	valid bool   // now, half and max hold an answer
	// set has bit i for c's path i if that path has a sample (ids are
	// uint8: at most 256 paths).
	set                   [4]uint64
	now, half, max, until sim.Time
}

// lateMax returns the largest lateness over c's paths at c.now for
// half-life half (see pathLate.lateness).
func (m *lateMemo) lateMax(c *Conn, half sim.Time) sim.Time {
	if m.c != c || m.id != c.id {
		m.rebuild(c)
	} else if m.valid && m.half == half && c.now >= m.now && c.now < m.until {
		return m.max
	}
	late, until := sim.Time(0), sim.Never
	for w, word := range m.set {
		for word != 0 {
			i := w<<6 | bits.TrailingZeros64(word)
			word &= word - 1
			p := &c.s.paths[i]
			l, u := p.lateUntil(c.now, half)
			late, until = max(late, l), min(until, u)
		}
	}
	m.valid, m.now, m.half, m.max, m.until = true, c.now, half, late, until
	return late
}

// rebuild makes the memo c's: the set from every path, no answer yet.
func (m *lateMemo) rebuild(c *Conn) {
	*m = lateMemo{c: c, id: c.id}
	for i := range c.s.paths {
		if c.s.paths[i].late > 0 {
			m.set[i>>6] |= 1 << (i & 63)
		}
	}
}

// noted is told that p, one of c's paths, took a lateness sample: the
// answer is stale and p may be new to the set.
func (m *lateMemo) noted(c *Conn, p *sndPath) {
	if m.c != c || m.id != c.id {
		return // rebuilt from every path when c next asks
	}
	m.set[p.id>>6] |= 1 << (p.id & 63)
	m.valid = false
}
