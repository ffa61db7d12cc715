package metaroce

import (
	"math/rand/v2"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
)

// TestLateMemoMatchesScan checks Conn.lateMax's memo (the last answer and
// the set of paths with samples) against the largest lateness over every
// path, through samples, instants and half-lives that move both ways and
// two connections of one NIC taking turns (each turn rebuilds the set).
func TestLateMemoMatchesScan(t *testing.T) {
	proto := &Protocol{}
	mk := func(id uint32, n int) *Conn {
		c := &Conn{proto: proto, id: id}
		c.s.paths = make([]sndPath, n)
		for i := range c.s.paths {
			c.s.paths[i].pathCold, c.s.paths[i].id = &pathCold{c: c}, uint8(i)
		}
		return c
	}
	conns := []*Conn{mk(1, 256), mk(2, 7)}
	scan := func(c *Conn, half sim.Time) sim.Time {
		late := sim.Time(0)
		for i := range c.s.paths {
			late = max(late, c.s.paths[i].lateness(c.now, half))
		}
		return late
	}
	rng := rand.New(rand.NewPCG(1, 2))
	now := sim.Time(0)
	positive := 0
	for step := range 20000 {
		c := conns[0]
		if rng.IntN(50) == 0 {
			c = conns[1]
		}
		if rng.IntN(4) == 0 {
			now += sim.Time(rng.IntN(5000))
		}
		c.now = now
		half := sim.Time(1000 + rng.IntN(3)*500)
		if rng.IntN(8) == 0 {
			p := &c.s.paths[rng.IntN(len(c.s.paths))]
			p.note(sim.Time(rng.IntN(4000)-500), now, half)
			proto.lateMemo.noted(c, p)
		}
		want := scan(c, half)
		if got := c.lateMax(half); got != want {
			t.Fatalf("step %d: conn %d lateMax = %d, every path gives %d", step, c.id, got, want)
		}
		if want > 0 {
			positive++
		}
	}
	if positive < 1000 {
		t.Fatalf("only %d answers were positive: the test does not exercise the set", positive)
	}
}

// TestLateUntil: lateUntil's lateness is lateness at now, and lateness
// holds that value at every instant from now until the instant it names.
func TestLateUntil(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 2000; trial++ {
		l := pathLate{late: sim.Time(rng.Int64N(1 << 20)), lateAt: sim.Time(rng.Int64N(1 << 30))}
		half := sim.Time(1 + rng.Int64N(1<<16))
		now := l.lateAt + sim.Time(rng.Int64N(40*int64(half)))
		late, until := l.lateUntil(now, half)
		if want := l.lateness(now, half); late != want {
			t.Fatalf("%+v at %d half %d: lateUntil %d, lateness %d", l, now, half, late, want)
		}
		if until <= now {
			t.Fatalf("%+v at %d half %d: until %d not after now", l, now, half, until)
		}
		end := min(until, now+50*half)
		for k := 0; k < 20; k++ {
			at := now + sim.Time(rng.Int64N(int64(end-now)))
			if got := l.lateness(at, half); got != late {
				t.Fatalf("%+v half %d: lateness %d at %d, %d at %d, before until %d", l, half, late, now, got, at, until)
			}
		}
		if until != sim.Never && l.lateness(until, half) == late && late != 0 {
			t.Fatalf("%+v half %d: lateness unchanged at until %d", l, half, until)
		}
	}
}
