package metaroce

import "github.com/mrlab/mrlab/internal/sim"

// lateMemo keeps the last answer of Conn.lateMax: the largest lateness over
// a connection's paths at one instant, for one half-life. pto asks for it
// once per path, and loops over paths (arming every path's timer after an
// ACK, looking for a healthy path) asked for it 128 times at 128 paths, each
// time reading every path. The answer depends only on the instant, the
// half-life and the paths' samples, so it is kept until one of those
// changes: a new sample clears it (noteLateness). It lives in the Protocol
// (one per NIC, used by one loop), not in Conn, which stays in its size
// class; one entry serves because a NIC handles one connection at a time.
type lateMemo struct {
	c              *Conn
	id             uint32 // c's id, so that a Conn reusing a freed one's memory does not match
	now, half, max sim.Time
}

func (m *lateMemo) get(c *Conn, half sim.Time) (sim.Time, bool) {
	if m.c == c && m.id == c.id && m.now == c.now && m.half == half {
		return m.max, true
	}
	return 0, false
}

func (m *lateMemo) put(c *Conn, half, late sim.Time) {
	*m = lateMemo{c: c, id: c.id, now: c.now, half: half, max: late}
}
