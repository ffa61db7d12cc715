package softnic

import (
	"net/netip"
	"sort"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// Setup and key-guessing limits. A lab host is untrusted: it can send any
// packet with its own address (never another's: SendIP drops spoofed
// sources), so every limit is per source address.
//
// A connection request (MetaRoCE SYN, RoCEv2 CM REQ) for a listened
// service opens a half-open connection: it answers the request (SYN_ACK,
// REP, retried on the transport's setup timer) but is not handed to the
// listener (OnConn) until the handshake completes: the dialer's EST (or
// its first packet) for MetaRoCE, the RTU (or the first request) for
// RoCEv2. Half-open connections are bounded:
//   - per source, halfOpenPerSource: a request from a source that already
//     has that many is refused (counted, nothing sent), so a flood costs
//     the NIC at most that many connections and answers per source, and
//     the dialer of a refused honest request retries it on its own timer;
//   - per listener, halfOpenPerListener: the oldest is evicted silently
//     (nothing sent) when a new one arrives, so sources together cannot
//     lock a listener.
//
// Memory keys are unguessable (memory.go) and the first remote access error
// on a connection poisons it: the NIC refuses every later remote access on
// it and the transport moves it to Error, as an RC QP does, so each guess
// costs a handshake. A source whose connections keep causing access errors
// earns strikes: after freeStrikes, its connection requests are refused
// until strikeBackoff<<(strikes-freeStrikes) (at most maxStrikeBackoff)
// has passed since its last strike; strikes halve every strikeDecay
// without one.
const (
	halfOpenPerSource   = 16
	halfOpenPerListener = 128
	freeStrikes         = 8
	strikeBackoff       = sim.Millisecond
	maxStrikeBackoff    = 16 * sim.Second
	strikeDecay         = 60 * sim.Second
	// maxSources bounds the source table; when full, an idle entry
	// (nothing half-open, no strikes) is reused, else the new source is
	// not tracked and its request refused.
	maxSources = 4096
)

// SourceStats are what a NIC counts per source address: connection
// requests, their fate, and the access errors the source's connections
// caused.
type SourceStats struct {
	Addr netip.Addr
	// Requests counts connection requests for a listened service;
	// HalfOpen is how many are half-open now; Established how many
	// completed their handshake and went to a listener.
	Requests, Established uint64
	HalfOpen              int
	// RefusedHalfOpen counts requests refused because the source had
	// halfOpenPerSource half-open already; RefusedLimited those refused
	// while the source was rate-limited for access errors; Evicted its
	// half-open connections evicted by a listener's bound.
	RefusedHalfOpen, RefusedLimited, Evicted uint64
	// AccessErrors counts remote accesses refused on the source's
	// connections; PoisonedConns the connections that moved to Error for
	// it (one strike each).
	AccessErrors, PoisonedConns uint64
	// Limited reports whether the source's requests are being refused now.
	Limited bool
}

type source struct {
	st         SourceStats
	strikes    int
	lastStrike sim.Time
}

// sourceOf returns the source entry for addr, or nil if the table is full
// of sources that matter.
func (n *NIC) sourceOf(addr uint32) *source {
	if s := n.sources[addr]; s != nil {
		return s
	}
	if n.sources == nil {
		n.sources = make(map[uint32]*source)
	}
	if len(n.sources) >= maxSources {
		// Reuse the idle entry of the lowest address: deterministic,
		// whatever the map's order (sim mode's traces).
		victim, found := uint32(0), false
		for k, s := range n.sources {
			if s.st.HalfOpen == 0 && s.strikes == 0 && (!found || k < victim) {
				victim, found = k, true
			}
		}
		if !found {
			return nil
		}
		delete(n.sources, victim)
	}
	s := &source{st: SourceStats{Addr: netip.AddrFrom4([4]byte{byte(addr >> 24), byte(addr >> 16), byte(addr >> 8), byte(addr)})}}
	n.sources[addr] = s
	return s
}

// decay halves the source's strikes for every strikeDecay since its last.
func (s *source) decay(now sim.Time) {
	if s.strikes == 0 {
		return
	}
	if h := (now - s.lastStrike) / strikeDecay; h > 0 {
		s.strikes >>= min(h, 62)
		s.lastStrike += h * strikeDecay
	}
}

// limited reports whether the source's connection requests are refused at
// now.
func (s *source) limited(now sim.Time) bool {
	s.decay(now)
	if s.strikes <= freeStrikes {
		return false
	}
	back := min(strikeBackoff<<min(s.strikes-freeStrikes, 30), maxStrikeBackoff)
	return now < s.lastStrike+back
}

func (s *source) strike(now sim.Time) {
	s.decay(now)
	s.strikes++
	s.lastStrike = now
	s.st.PoisonedConns++
}

// Sources returns the NIC's per-source counters, by address.
func (n *NIC) Sources() []SourceStats {
	now := n.sched.Now()
	out := make([]SourceStats, 0, len(n.sources))
	for _, s := range n.sources {
		st := s.st
		st.Limited = s.limited(now)
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr.Less(out[j].Addr) })
	return out
}

// HalfOpen returns how many half-open connections the NIC holds.
func (n *NIC) HalfOpen() int {
	k := 0
	for _, q := range n.half {
		k += len(q)
	}
	return k
}

// admit decides whether a connection request from src for service may
// open a half-open connection, evicting the listener's oldest if need be.
func (n *NIC) admit(now sim.Time, src *source, service uint16) bool {
	if src == nil {
		n.stats.Drops[DropSetupLimit]++
		return false
	}
	src.st.Requests++
	switch {
	case src.limited(now):
		src.st.RefusedLimited++
		n.stats.Drops[DropSetupLimit]++
		return false
	case src.st.HalfOpen >= halfOpenPerSource:
		src.st.RefusedHalfOpen++
		n.stats.Drops[DropSetupLimit]++
		return false
	}
	if q := n.half[service]; len(q) >= halfOpenPerListener {
		old := q[0]
		n.unhalf(old)
		n.stats.HalfOpenEvicted++
		if old.src != nil {
			old.src.st.Evicted++
		}
		if a, ok := old.tc.(transport.Aborter); ok {
			a.Abort(now)
		} else {
			old.tc.Close(now)
		}
		n.rearm(old)
		n.checkState(old)
		n.retire(old)
	}
	return true
}

// addHalf records c as half-open on its service.
func (n *NIC) addHalf(c *Conn, src *source) {
	if n.half == nil {
		n.half = make(map[uint16][]*Conn)
	}
	c.halfOpen, c.src = true, src
	src.st.HalfOpen++
	n.half[c.service] = append(n.half[c.service], c)
	n.stats.HalfOpenOpened++
}

// unhalf removes a half-open connection from its listener's table.
func (n *NIC) unhalf(c *Conn) {
	if !c.halfOpen {
		return
	}
	c.halfOpen = false
	c.src.st.HalfOpen--
	q := n.half[c.service]
	for i, x := range q {
		if x == c {
			copy(q[i:], q[i+1:])
			q[len(q)-1] = nil
			q = q[:len(q)-1]
			break
		}
	}
	if len(q) == 0 {
		delete(n.half, c.service)
	} else {
		n.half[c.service] = q
	}
}

// checkHalf hands a half-open connection whose handshake completed to its
// listener, and forgets one that failed.
func (n *NIC) checkHalf(c *Conn) {
	switch {
	case c.state == transport.StateClosed || c.state == transport.StateError:
		n.unhalf(c)
	case handshakeDone(c.tc):
		n.unhalf(c)
		n.stats.Accepted++
		c.src.st.Established++
		l := n.listen[c.service]
		if l == nil {
			c.Close() // the listener went away meanwhile
			return
		}
		if l.OnConn != nil {
			l.OnConn(c)
		}
	}
}

// handshakeDone reports whether a passive connection's dialer has
// completed the handshake.
func handshakeDone(tc transport.Conn) bool {
	if h, ok := tc.(transport.Handshaker); ok {
		return h.HandshakeDone()
	}
	return tc.State() == transport.StateEstablished
}

// poison notes a remote access error on c: the first one strikes its
// peer's source and makes the NIC refuse every later remote access on c.
func (n *NIC) poison(c *Conn) {
	if c.src == nil {
		c.src = n.sourceOf(c.peerU32)
	}
	if c.src != nil {
		c.src.st.AccessErrors++
	}
	if c.poisoned {
		return
	}
	c.poisoned = true
	if c.src != nil {
		c.src.strike(n.sched.Now())
	}
}
