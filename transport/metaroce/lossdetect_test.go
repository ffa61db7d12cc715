package metaroce

import (
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// TestRack: the rule of lossdetect.go from sequences of deliveries, with
// transmission orders across the 32-bit wrap.
func TestRack(t *testing.T) {
	const us = sim.Microsecond
	type delivery struct {
		order       uint32
		sentAt, now sim.Time
	}
	type query struct {
		order       uint32
		sentAt, now sim.Time
		reo, floor  sim.Time // floor: rackFloor
		lost        bool
		at          sim.Time
	}
	for _, tc := range []struct {
		name string
		del  []delivery
		q    []query
	}{{
		name: "nothing delivered: nothing is lost",
		q:    []query{{order: 1, sentAt: 0, now: 100 * us, reo: us, at: sim.Never}},
	}, {
		name: "sent before a delivered packet, its RTT and the window passed: lost",
		del:  []delivery{{order: 5, sentAt: 10 * us, now: 20 * us}},
		q: []query{
			{order: 4, sentAt: 9 * us, now: 20 * us, reo: 2 * us, at: 21 * us},
			{order: 4, sentAt: 9 * us, now: 21 * us, reo: 2 * us, lost: true, at: 21 * us},
			{order: 5, sentAt: 10 * us, now: 50 * us, reo: 2 * us, at: sim.Never},
			{order: 6, sentAt: 11 * us, now: 50 * us, reo: 2 * us, at: sim.Never},
		},
	}, {
		name: "an older delivery does not move the record",
		del:  []delivery{{order: 5, sentAt: 10 * us, now: 20 * us}, {order: 3, sentAt: 8 * us, now: 30 * us}},
		q:    []query{{order: 4, sentAt: 9 * us, now: 21 * us, reo: 2 * us, lost: true, at: 21 * us}},
	}, {
		name: "a newer delivery takes its own RTT",
		del:  []delivery{{order: 5, sentAt: 10 * us, now: 20 * us}, {order: 7, sentAt: 12 * us, now: 15 * us}},
		q:    []query{{order: 6, sentAt: 11 * us, now: 15 * us, reo: us, at: 15 * us, lost: true}},
	}, {
		// A reference with a quick trip (10us) while this packet's queue
		// holds it: the floor (srtt + 4 rttvar + the ACK delay, here
		// 30us) decides, not the reference's round trip plus the window.
		name: "not lost before the floor",
		del:  []delivery{{order: 5, sentAt: 10 * us, now: 20 * us}},
		q: []query{
			{order: 4, sentAt: 9 * us, now: 21 * us, reo: 2 * us, floor: 30 * us, at: 39 * us},
			{order: 4, sentAt: 9 * us, now: 39 * us, reo: 2 * us, floor: 30 * us, lost: true, at: 39 * us},
			{order: 4, sentAt: 9 * us, now: 21 * us, reo: 2 * us, floor: 5 * us, lost: true, at: 21 * us},
		},
	}, {
		name: "orders across the wrap",
		del:  []delivery{{order: 2, sentAt: 10 * us, now: 20 * us}},
		q: []query{
			{order: 0xffffffff, sentAt: 9 * us, now: 30 * us, reo: us, lost: true, at: 20 * us},
			{order: 3, sentAt: 9 * us, now: 30 * us, reo: us, at: sim.Never},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var r rackState
			for _, d := range tc.del {
				r.delivered(d.order, d.sentAt, d.now)
			}
			for i, q := range tc.q {
				lost, at := r.verdict(q.order, q.sentAt, q.now, q.reo, q.floor)
				if lost != q.lost || at != q.at {
					t.Errorf("query %d: verdict = %v, %v; want %v, %v", i, lost, at, q.lost, q.at)
				}
			}
		})
	}
}

// TestReorderWindow: the window is the paths' RTT spread plus four
// variations plus the peer's ACK delay, at least a packet time, at most
// the smoothed RTT.
func TestReorderWindow(t *testing.T) {
	const us = sim.Microsecond
	for _, tc := range []struct {
		name                                   string
		maxRTT, minRTT, v, ackDelay, gran, rtt sim.Time
		want                                   sim.Time
	}{
		{"quiet symmetric fabric: a packet time", 10 * us, 10 * us, 0, 0, us / 3, 10 * us, us / 3},
		{"spread, variation and ACK delay add", 14 * us, 10 * us, us, 2 * us, us / 3, 12 * us, 10 * us},
		{"never above the smoothed RTT", 40 * us, 10 * us, 4 * us, 2 * us, us / 3, 20 * us, 20 * us},
		{"no RTT yet: no cap", 0, 0, 0, 10 * us, us / 3, 0, 10 * us},
	} {
		if got := reorderWindow(tc.maxRTT, tc.minRTT, tc.v, tc.ackDelay, tc.gran, tc.rtt); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestEntropyMemory: every entropy a path leaves is remembered, those
// left while re-probing too, and a new entropy is never one of the last
// eight (spec §10).
func TestEntropyMemory(t *testing.T) {
	l := newLab(t, transporttest.Config{Seed: 3}, Options{Paths: 1})
	c := metaConn(l.ca)
	c.ensurePaths() // the paths are allocated on first use
	p := &c.s.paths[0]
	c.use(p)
	var left []uint16
	for i, why := range []repathReason{whyTimeout, whyReprobe, whyReprobe, whyLosses, whyReprobe, whyReprobe,
		whyReprobe, whyMarks, whyReprobe, whyReprobe, whyReprobe} {
		left = append(left, p.entropy)
		c.repath(p, why, false)
		recent := left[max(len(left)-badEntropies, 0):]
		for _, e := range recent {
			if p.entropy == e {
				t.Fatalf("repath %d (%v): new entropy %d is one of the last %d left %v", i, why, p.entropy, len(recent), recent)
			}
			found := false
			for _, b := range c.s.bad {
				found = found || b == e
			}
			if !found {
				t.Errorf("repath %d (%v): entropy %d left is not remembered (%v)", i, why, e, c.s.bad)
			}
		}
	}
	if c.State() != transport.StateEstablished {
		t.Errorf("state %v", c.State())
	}
}

// TestReoAdapt: spurious losses widen the window one step at a time up to
// maxReoMult; reoDecay recoveries without one narrow it by a step.
func TestReoAdapt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps string // s: spurious, r: recovered
		mult  uint8
	}{
		{"none", "", 0},
		{"recoveries alone change nothing", "rrrrrrrrrrrrrrrrrrrr", 0},
		{"each spurious loss widens", "sss", 3},
		{"capped", "ssssssssssss", maxReoMult},
		{"fifteen recoveries narrow one step", "ss" + "rrrrrrrrrrrrrrr", 1},
		{"fourteen do not", "ss" + "rrrrrrrrrrrrrr", 2},
		{"a spurious loss restarts the count", "ss" + "rrrrrrrrrr" + "s" + "rrrrrrrrrr", 3},
	} {
		var r reoAdapt
		for _, s := range tc.steps {
			if s == 's' {
				r.spurious()
			} else {
				r.recovered()
			}
		}
		if r.mult() != tc.mult {
			t.Errorf("%s: mult %d, want %d", tc.name, r.mult(), tc.mult)
		}
	}
}

// TestLateness: a packet overtaken by a later-sent one that had arrived
// gives its path a lateness sample (its echo_ts round trip minus the later
// packet's); only the largest recent sample counts, halved every half-life
// since it was taken; a packet not overtaken gives none; the connection's
// lateness is the largest over its paths.
func TestLateness(t *testing.T) {
	const us = sim.Microsecond
	l := newLab(t, transporttest.Config{Seed: 1}, Options{Paths: 2})
	c := metaConn(l.ca)
	half := c.lateHalfLife()
	c.ensurePaths() // path state is allocated on first use
	p, q := &c.s.paths[0], &c.s.paths[1]
	c.use(p)
	c.use(q)
	c.s.rack = rackState{}
	c.s.rack.delivered(10, 0, 8*us) // order 10 arrived, round trip 8us
	steps := []struct {
		name     string
		path     *sndPath
		order    uint32
		rtt      sim.Time
		after    sim.Time // run the clock this much first
		wantP    sim.Time // p's lateness after the step
		wantConn sim.Time
	}{
		{"overtaken: 12us against 8us", p, 9, 12 * us, 0, 4 * us, 4 * us},
		{"a smaller sample does not lower it", p, 8, 10 * us, 0, 4 * us, 4 * us},
		{"not overtaken: no sample", p, 11, 30 * us, 0, 4 * us, 4 * us},
		{"halved after one half-life", p, 11, 30 * us, half, 2 * us, 2 * us},
		{"another path's sample: the largest counts", q, 7, 11 * us, 0, 2 * us, 3 * us},
		{"gone after 32 half-lives", q, 11, 0, 32 * half, 0, 0},
	}
	for _, s := range steps {
		c.now += s.after
		c.noteLateness(s.path, s.order, s.rtt)
		if got := p.lateness(c.now, half); got != s.wantP {
			t.Errorf("%s: path 0 lateness %v, want %v", s.name, got, s.wantP)
		}
		if got := c.lateMax(half); got != s.wantConn {
			t.Errorf("%s: connection lateness %v, want %v", s.name, got, s.wantConn)
		}
	}
}

// TestPathLate: the lateness types alone. rackState.lateBy gives a sample
// only for a packet overtaken by the latest-sent one known to have arrived
// (transmission orders across the 32-bit wrap); pathLate keeps the largest
// sample at what it is worth now, halved per half-life, gone after 32.
func TestPathLate(t *testing.T) {
	const us = sim.Microsecond
	const half = 100 * us
	var none rackState
	if _, ok := none.lateBy(1, 5*us); ok {
		t.Error("lateBy before any delivery gave a sample")
	}
	var r rackState
	r.delivered(2, 0, 8*us) // order 2 (past the wrap) arrived, round trip 8us
	var l pathLate
	for _, s := range []struct {
		name     string
		order    uint32
		rtt      sim.Time
		now      sim.Time
		ok       bool
		wantLate sim.Time // the path's lateness after the step, at now
	}{
		{"overtaken across the wrap: 12us against 8us", 0xffff_fffe, 12 * us, 0, true, 4 * us},
		{"a smaller sample does not lower it", 1, 10 * us, 0, true, 4 * us},
		{"not overtaken: no sample", 2, 30 * us, 0, false, 4 * us},
		{"later-sent: no sample", 3, 30 * us, 0, false, 4 * us},
		{"halved after one half-life", 3, 30 * us, half, false, 2 * us},
		{"a sample above what the held one is worth now replaces it", 1, 11 * us, half, true, 3 * us},
		{"a quarter after two more half-lives", 3, 0, 3 * half, false, 3 * us / 4},
		{"gone after 32 half-lives", 3, 0, 33 * half, false, 0},
	} {
		late, ok := r.lateBy(s.order, s.rtt)
		if ok != s.ok || (ok && late != s.rtt-8*us) {
			t.Errorf("%s: lateBy = %v, %v; want ok %v", s.name, late, ok, s.ok)
		}
		if ok {
			l.note(late, s.now, half)
		}
		if got := l.lateness(s.now, half); got != s.wantLate {
			t.Errorf("%s: lateness %v, want %v", s.name, got, s.wantLate)
		}
	}
}

// TestArrivalRTT: the round trip of the copy a record proves arrived, from
// sequences of sends and resends on one path (sent 1us apart from 0) and
// the record (newest PSN top, echo_ts) read at now.
func TestArrivalRTT(t *testing.T) {
	const us = sim.Microsecond
	for _, tc := range []struct {
		name      string
		sends     int      // PSNs 0..sends-1, PSN i sent at i us
		resend    []uint32 // sent again at 10us, in this order
		psn, top  uint32
		echo, now sim.Time
		rtt       sim.Time
		ok        bool
	}{
		{"the PSN is top: now - echo", 3, nil, 1, 1, 1 * us, 10 * us, 9 * us, true},
		{"the receiver's hold is not counted", 3, nil, 1, 1, 1*us + 2*us, 12 * us, 9 * us, true},
		{"a later PSN is top: its round trip plus the gap", 3, nil, 0, 2, 2 * us, 11 * us, 11 * us, true},
		{"resent, echo older than the resend: the first copy's", 3, []uint32{1}, 1, 1, 1 * us, 9 * us, 8 * us, true},
		{"resent, echo of the resend: unknown", 3, []uint32{1}, 1, 1, 10 * us, 19 * us, 0, false},
		{"resent and not top: unknown", 3, []uint32{0}, 0, 2, 2 * us, 11 * us, 0, false},
		{"top resent: unknown", 3, []uint32{2}, 0, 2, 2 * us, 11 * us, 0, false},
		{"top no longer outstanding: unknown", 3, nil, 0, 5, 2 * us, 11 * us, 0, false},
	} {
		s := &scoreboard{}
		for i := range tc.sends {
			s.push(sbEntry{dsn: uint32(i), size: 1, sentAt: sim.Time(i) * us, order: uint32(i)})
		}
		for i, psn := range tc.resend {
			s.resend(psn, 10*us, uint32(tc.sends+i))
		}
		older := tc.echo < 10*us && len(tc.resend) > 0 // before the resends went
		rtt, ok := s.arrivalRTT(tc.psn, tc.top, tc.now-tc.echo, older)
		if rtt != tc.rtt || ok != tc.ok {
			t.Errorf("%s: %v %v, want %v %v", tc.name, rtt, ok, tc.rtt, tc.ok)
		}
	}
}

// TestOvertaken: a spurious declaration widens the reordering window only
// when the copy that arrived came later than the reference round trip
// plus the unscaled window allowed; one whose ACK was lost (it arrived on
// time) does not.
func TestOvertaken(t *testing.T) {
	const us = sim.Microsecond
	l := newLab(t, transporttest.Config{Seed: 1}, Options{Paths: 1})
	c := metaConn(l.ca)
	c.ensurePaths()
	p := &c.s.paths[0]
	c.use(p)
	c.now = 100 * us
	c.s.rack = rackState{}
	c.s.rack.delivered(50, c.now-8*us, c.now) // reference round trip 8us
	p.sb = scoreboard{}
	p.sb.push(sbEntry{size: 1, sentAt: 80 * us, order: 40})
	allowed := 8*us + c.reorderBase() + c.lateMax(c.lateHalfLife())
	for _, tc := range []struct {
		name string
		rtt  sim.Time
		want bool
	}{
		{"on time, its ACK lost", 8 * us, false},
		{"at the deadline", allowed, false},
		{"after it: overtaken", allowed + 1, true},
	} {
		if got := c.overtaken(p, 0, 0, tc.rtt, false); got != tc.want {
			t.Errorf("%s (%v, allowed %v): overtaken %v, want %v", tc.name, tc.rtt, allowed, got, tc.want)
		}
	}
	if !c.overtaken(p, 0, 3, 8*us, false) {
		t.Errorf("round trip unknown: not taken as overtaken")
	}
}
