package live

import (
	"testing"
	"time"
)

// TestWaitRule: given a window's timer wake-ups (each a sleep's length
// and its lateness) and a sleep's CPU cost, the loop arms its timer the
// horizon (the 99th percentile latency of sleeps of that length's class
// less the events' tolerance T, within its bound) before the next event,
// or the batch (T less that latency) after it, and sleeps through a gap
// only when the gap is longer than the horizon plus a sleep's cost (the
// batch buys no sleep), watching the clock otherwise; a fixed horizon and
// FIFO's bound do not follow the measure.
func TestWaitRule(t *testing.T) {
	const us = time.Microsecond
	lag := time.Millisecond                       // bound 250 µs
	tol := 50 * us                                // T: deadline's longest stop at the default share
	type wake struct{ sleep, late time.Duration } // sleep: the wait the loop slept for
	// n wake-ups from sleeps of 10 µs (class 4: 8-15 µs) late by d.
	rep := func(n int, d time.Duration) []wake {
		w := make([]wake, n)
		for i := range w {
			w[i] = wake{10 * us, d}
		}
		return w
	}
	// Mostly on time, a 1% tail and one stall below the guest: the
	// window's maximum is the stall, its p99 the tail.
	tail := append(append(rep(980, 12*us), rep(19, 70*us)...), wake{10 * us, 3 * time.Millisecond})
	// Short sleeps on time, long ones (an idle CPU's) late.
	mixed := append(rep(500, 4*us), rep(100, 600*us)...)
	for i := 500; i < len(mixed); i++ {
		mixed[i].sleep = 2 * time.Millisecond
	}
	// Wake-ups of 2 µs waits (class 2), 2 µs late.
	short := make([]wake, 100)
	for i := range short {
		short[i] = wake{2 * us, 2 * us}
	}
	type gap struct {
		wait    time.Duration
		horizon time.Duration
		batch   time.Duration
		sleep   bool
	}
	for _, tc := range []struct {
		name    string
		fixed   time.Duration
		pol     Policy
		windows [][]wake      // each a window's wake-ups, then roll
		cost    time.Duration // a sleep's measured CPU cost (0: not measured)
		gaps    []gap
	}{
		{"unmeasured", 0, PolicyDeadline, nil, 0, []gap{
			{250 * us, 250 * us, 0, false}, {261 * us, 250 * us, 0, true}, // horizon 250 + minSpin
		}},
		{"a window without wake-ups ages the measure", 0, PolicyDeadline, [][]wake{nil}, 0, []gap{{255 * us, 100 * us, 0, true}}}, // (250+50)/2 - 50
		{"until the loop sleeps again", 0, PolicyDeadline, [][]wake{nil, nil, nil}, 0, []gap{{12 * us, 0, 12500, true}}},          // 300/8 = 37.5 µs
		{"on time within T: batch, no horizon", 0, PolicyDeadline, [][]wake{rep(100, 30*us)}, 5 * us, []gap{
			// p99 30 µs: a batch of 20 µs.
			{5 * us, 100 * us, 0, false}, // class 3: not measured, aged once
			{8 * us, 0, 20 * us, true},   // longer than a sleep's cost
			{11 * us, 0, 20 * us, true},  // a 1400-byte serialization at 1 Gbit/s
			{16 * us, 100 * us, 0, false},
		}},
		{"prompt wake-ups: batch up to T", 0, PolicyDeadline, [][]wake{rep(100, 2*us)}, 5 * us, []gap{
			{9 * us, 0, 48 * us, true},
		}},
		{"a batch buys no sleep", 0, PolicyDeadline, [][]wake{short}, 15 * us, []gap{
			// A ping's next hop, 2 µs away, wake-ups on time: a batch
			// of 48 µs, yet the wait is shorter than a sleep's cost.
			{2 * us, 0, 48 * us, false},
		}},
		{"costly sleeps: watch the clock", 0, PolicyDeadline, [][]wake{rep(100, 30*us)}, 40 * us, []gap{
			{9 * us, 0, 20 * us, false}, {15 * us, 0, 20 * us, false},
		}},
		{"p99 not the stall", 0, PolicyDeadline, [][]wake{tail}, 16 * us, []gap{
			// p99 is the 70 µs tail's bucket top (71 µs), less T.
			{15 * us, 21 * us, 0, false},
		}},
		{"per class", 0, PolicyDeadline, [][]wake{mixed}, 5 * us, []gap{
			{10 * us, 0, 46 * us, true},               // short sleeps: on time
			{2 * time.Millisecond, 250 * us, 0, true}, // long ones: 600 µs late, capped
		}},
		{"late machine: capped", 0, PolicyDeadline, [][]wake{rep(100, 2*time.Millisecond)}, 16 * us, []gap{
			{10 * us, 250 * us, 0, false},
		}},
		{"last measured window holds", 0, PolicyDeadline, [][]wake{rep(10, 90*us)}, 16 * us, []gap{
			{10 * us, 40 * us, 0, false},
		}},
		{"then ages", 0, PolicyDeadline, [][]wake{rep(10, 90*us), nil}, 16 * us, []gap{
			{10 * us, 0, 5 * us, false}, // 90/2 = 45 µs: a batch of 5
		}},
		{"follows a quieter window", 0, PolicyDeadline, [][]wake{rep(10, 300*us), rep(10, 20*us)}, 5 * us, []gap{
			{8 * us, 0, 30 * us, true},
		}},
		{"fifo bound", 0, PolicyFIFO, [][]wake{rep(10, 300*us)}, 16 * us, []gap{
			{10 * us, minSpin, 0, false},
		}},
		{"fixed", 70 * us, PolicyFair, [][]wake{rep(10, 300*us), rep(10, 2*us)}, 0, []gap{
			{70 * us, 70 * us, 0, false}, {71 * us, 70 * us, 0, true}, {10 * us, 70 * us, 0, false},
		}},
		{"off", -1, PolicyFair, [][]wake{rep(10, 300*us)}, 0, []gap{
			{1, 0, 0, true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSpinner(tc.fixed, tc.pol, lag, tol)
			if tc.cost > 0 {
				s.cost = tc.cost
			}
			for _, w := range tc.windows {
				for _, d := range w {
					s.woke(d.sleep, d.late)
				}
				s.roll()
			}
			for _, g := range tc.gaps {
				k := wakeClass(g.wait)
				if s.horizon[k] != g.horizon || s.batch[k] != g.batch {
					t.Errorf("wait %v: horizon %v, batch %v; want %v, %v", g.wait, s.horizon[k], s.batch[k], g.horizon, g.batch)
				}
				if s.horizon[k] > 0 && s.batch[k] > 0 {
					t.Errorf("wait %v: a horizon and a batch at once", g.wait)
				}
				if off := s.offset(g.wait); off != g.batch-g.horizon {
					t.Errorf("wait %v: timer armed %v from the event, want batch - horizon", g.wait, off)
				}
				if got := s.sleeps(g.wait); got != g.sleep {
					t.Errorf("wait %v (horizon %v, batch %v, sleep cost %v): sleeps %v, want %v", g.wait, s.horizon[k], s.batch[k], s.cost, got, g.sleep)
				}
			}
		})
	}
}

// TestWakeClass: one class per doubling of the sleep from 1 µs, the last
// holding everything from about a millisecond.
func TestWakeClass(t *testing.T) {
	const us = time.Microsecond
	for _, c := range []struct {
		d time.Duration
		k int
	}{{0, 0}, {-us, 0}, {999, 0}, {us, 1}, {3 * us, 2}, {8 * us, 4}, {15 * us, 4}, {16 * us, 5}, {1023 * us, 10}, {1024 * us, 11}, {time.Hour, wakeClasses - 1}} {
		if k := wakeClass(c.d); k != c.k {
			t.Errorf("wakeClass(%v) = %d, want %d", c.d, k, c.k)
		}
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

// TestWakeHistQuantile: 1 µs buckets below 128 µs, doublings above, and
// never more than the largest latency recorded.
func TestWakeHistQuantile(t *testing.T) {
	const us = time.Microsecond
	var h wakeHist
	if q := h.quantile(0.99); q != 0 {
		t.Fatalf("empty: %v", q)
	}
	for range 99 {
		h.add(10 * us)
	}
	h.add(137 * us)
	if q := h.quantile(0.99); q != 11*us {
		t.Errorf("p99 of 99 x 10 µs and one 137 µs: %v, want 11 µs (the bucket's top)", q)
	}
	if q := h.quantile(1); q != 137*us {
		t.Errorf("max: %v, want 137 µs (not the bucket's top, 256 µs)", q)
	}
	h.add(time.Hour)
	if q := h.quantile(1); q != time.Hour {
		t.Errorf("beyond the last bucket: %v", q)
	}
}
