package live

import (
	"testing"
	"time"
)

// TestWaitRule: given a window's timer wake-up latencies and a sleep's
// CPU cost, the loop arms its timer the horizon (the window's 99th
// percentile latency less the events' tolerance T, within its bound)
// before the next event, or the batch (T less that latency) after it, and
// sleeps through a gap only when the gap plus the batch is longer than the
// horizon plus a sleep's cost, watching the clock otherwise; a fixed
// horizon and FIFO's bound do not follow the measure.
func TestWaitRule(t *testing.T) {
	const us = time.Microsecond
	lag := time.Millisecond // bound 250 µs
	tol := 50 * us          // T: deadline's longest stop at the default share
	// n wake-ups late by d.
	rep := func(n int, d time.Duration) []time.Duration {
		w := make([]time.Duration, n)
		for i := range w {
			w[i] = d
		}
		return w
	}
	// Mostly on time, a 1% tail and one stall below the guest: the
	// window's maximum is the stall, its p99 the tail.
	tail := append(append(rep(980, 12*us), rep(19, 70*us)...), 3*time.Millisecond)
	type gap struct {
		wait  time.Duration
		sleep bool
	}
	for _, tc := range []struct {
		name    string
		fixed   time.Duration
		pol     Policy
		windows [][]time.Duration // each a window's wake-ups, then roll
		cost    time.Duration     // a sleep's measured CPU cost (0: not measured)
		horizon time.Duration
		batch   time.Duration
		gaps    []gap
	}{
		{"unmeasured", 0, PolicyDeadline, nil, 0, 250 * us, 0, []gap{
			{250 * us, false}, {261 * us, true}, // horizon 250 + minSpin
		}},
		{"window without wake-ups keeps the worst", 0, PolicyDeadline, [][]time.Duration{nil}, 0, 250 * us, 0, []gap{{255 * us, false}}},
		{"on time within T: batch, no horizon", 0, PolicyDeadline, [][]time.Duration{rep(100, 30*us)}, 25 * us, 0, 19 * us, []gap{
			// p99 31 µs (bucket top): a batch of 19 µs.
			{5 * us, false}, // the batch does not cover a sleep's cost
			{6 * us, false},
			{7 * us, true},
			{11 * us, true}, // a 1400-byte serialization at 1 Gbit/s
		}},
		{"prompt wake-ups: batch up to T", 0, PolicyDeadline, [][]time.Duration{rep(100, 2*us)}, 25 * us, 0, 47 * us, []gap{
			{1, true}, // a 47 µs batch covers a 25 µs sleep
		}},
		{"costly sleeps: watch the clock", 0, PolicyDeadline, [][]time.Duration{rep(100, 30*us)}, 40 * us, 0, 19 * us, []gap{
			{21 * us, false}, {22 * us, true},
		}},
		{"p99 not the stall", 0, PolicyDeadline, [][]time.Duration{tail}, 16 * us, 21 * us, 0, []gap{
			// p99 is the 70 µs tail's bucket top (71 µs), less T.
			{37 * us, false}, {38 * us, true},
		}},
		{"late machine: capped", 0, PolicyDeadline, [][]time.Duration{rep(100, 2*time.Millisecond)}, 16 * us, 250 * us, 0, []gap{
			{266 * us, false}, {267 * us, true},
		}},
		{"last measured window holds", 0, PolicyDeadline, [][]time.Duration{rep(10, 90*us), nil}, 16 * us, 41 * us, 0, []gap{
			{57 * us, false}, {58 * us, true},
		}},
		{"follows a quieter window", 0, PolicyDeadline, [][]time.Duration{rep(10, 300*us), rep(10, 20*us)}, 16 * us, 0, 29 * us, []gap{
			{1, true},
		}},
		{"fifo bound", 0, PolicyFIFO, [][]time.Duration{rep(10, 300*us)}, 16 * us, minSpin, 0, []gap{
			{26 * us, false}, {27 * us, true},
		}},
		{"fixed", 70 * us, PolicyFair, [][]time.Duration{rep(10, 300*us), rep(10, 2*us)}, 0, 70 * us, 0, []gap{
			{70 * us, false}, {71 * us, true},
		}},
		{"off", -1, PolicyFair, [][]time.Duration{rep(10, 300*us)}, 0, 0, 0, []gap{
			{1, true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSpinner(tc.fixed, tc.pol, lag, tol)
			if tc.cost > 0 {
				s.cost = tc.cost
			}
			for _, w := range tc.windows {
				for _, d := range w {
					s.woke(d)
				}
				s.roll()
			}
			if s.horizon != tc.horizon || s.batch != tc.batch {
				t.Fatalf("horizon %v, batch %v; want %v, %v", s.horizon, s.batch, tc.horizon, tc.batch)
			}
			if s.horizon > 0 && s.batch > 0 {
				t.Fatal("a horizon and a batch at once")
			}
			if off := s.offset(); off != s.batch-s.horizon {
				t.Fatalf("timer armed %v from the event, want batch - horizon", off)
			}
			for _, g := range tc.gaps {
				if got := s.sleeps(g.wait); got != g.sleep {
					t.Errorf("wait %v (horizon %v, sleep cost %v): sleeps %v, want %v", g.wait, s.horizon, s.cost, got, g.sleep)
				}
			}
		})
	}
}

// TestSleepCost: a sleep's cost is the moving average of the timed ones,
// one sleep in sleepCostEvery timed; a fixed horizon times none.
func TestSleepCost(t *testing.T) {
	const us = time.Microsecond
	s := newSpinner(0, PolicyDeadline, time.Millisecond, 50*us)
	if s.cost != minSpin {
		t.Fatalf("unmeasured cost %v, want minSpin", s.cost)
	}
	timed := 0
	for range 100 * sleepCostEvery {
		if s.timeSleep() {
			timed++
			s.slept(18 * us)
		}
	}
	if timed != 100 {
		t.Fatalf("%d of %d sleeps timed, want 100", timed, 100*sleepCostEvery)
	}
	if d := s.cost - 18*us; d < -us || d > us {
		t.Fatalf("cost %v after 100 sleeps of 18 µs", s.cost)
	}
	f := newSpinner(70*us, PolicyFair, time.Millisecond, 50*us)
	for range 2 * sleepCostEvery {
		if f.timeSleep() {
			t.Fatal("a fixed horizon timed a sleep")
		}
	}
}

// TestEventTolerance: T is deadline's longest stop, (1 - the kernel's
// real-time share) of the lag threshold.
func TestEventTolerance(t *testing.T) {
	lag := time.Millisecond
	rt, per, _ := deadlineShare(lag)
	if got := eventTolerance(lag); got != per-rt || got <= 0 || got >= lag/4 {
		t.Fatalf("tolerance %v, want %v (deadline runtime %v of %v), within (0, lag/4)", got, per-rt, rt, per)
	}
}
