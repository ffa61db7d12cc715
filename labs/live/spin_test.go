package live

import (
	"testing"
	"time"
)

// TestSpinner: the horizon follows the measured wake-up latency within its
// bounds; a fixed one and FIFO's do not move.
func TestSpinner(t *testing.T) {
	const us = time.Microsecond
	lag := time.Millisecond // bound: 250 µs
	type step struct {
		wake time.Duration // a timer wake-up this late; -1: end the window
		want time.Duration // horizon after the step
	}
	for _, tc := range []struct {
		name  string
		fixed time.Duration
		pol   Policy
		start time.Duration
		steps []step
	}{
		{"measured", 0, PolicyDeadline, 250 * us, []step{
			{-1, minSpin},        // a window without wake-ups: the last measure (none yet)
			{20 * us, 40 * us},   // raised at once to twice a late wake-up
			{5 * us, 40 * us},    // an earlier one does not lower it
			{-1, 40 * us},        // the window's worst
			{3 * us, 40 * us},    // within the window, kept
			{-1, minSpin},        // next window: twice 3 µs, floored at minSpin
			{-1, minSpin},        // no wake-up: the last window that had one
			{400 * us, 250 * us}, // capped at a quarter of the lag threshold
			{-1, 250 * us},
		}},
		{"fifo", 0, PolicyFIFO, minSpin, []step{{300 * us, minSpin}, {-1, minSpin}}},
		{"fixed", 70 * us, PolicyFair, 70 * us, []step{{300 * us, 70 * us}, {-1, 70 * us}}},
		{"off", -1, PolicyFair, 0, []step{{300 * us, 0}, {-1, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSpinner(tc.fixed, tc.pol, lag)
			if s.horizon != tc.start {
				t.Fatalf("initial horizon %v, want %v", s.horizon, tc.start)
			}
			for i, st := range tc.steps {
				if st.wake < 0 {
					s.roll()
				} else {
					s.woke(st.wake)
				}
				if s.horizon != st.want {
					t.Fatalf("step %d (%v): horizon %v, want %v", i, st.wake, s.horizon, st.want)
				}
			}
		})
	}
}
