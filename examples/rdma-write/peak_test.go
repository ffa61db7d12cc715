package main

import (
	"math"
	"testing"
	"time"
)

// TestPeakGbps: a link of 1 Gbit/s moves a 1 MB message in 8 ms. However
// the completions arrive, perftest's window (post to completion) never
// reads above that; a window between completions would.
func TestPeakGbps(t *testing.T) {
	const size = 1_000_000 // 8 ms at 1 Gbit/s
	ms := func(f float64) time.Time { return time.Unix(0, 0).Add(time.Duration(f * float64(time.Millisecond))) }
	steady := func(n int) (sent, done []time.Time) {
		for i := range n {
			sent = append(sent, ms(0))              // all posted at once (depth n)
			done = append(done, ms(8*float64(i+1))) // one per 8 ms: line rate
		}
		return
	}
	sent, done := steady(8)
	// Bunched: the first completion is late and the rest arrive together
	// right after it, as when a hole fills or the lab catches up.
	bunched := make([]time.Time, 8)
	for i := range bunched {
		bunched[i] = ms(64 + 0.001*float64(i))
	}
	for _, tc := range []struct {
		name       string
		sent, done []time.Time
		depth      int
		want       float64
	}{
		{"steady, depth 4", sent, done, 4, 1.0},
		{"steady, depth 8", sent, done, 8, 1.0},
		// Between completions the bunch would read 4 MB in 3 us: 10,000 Gb/s.
		{"bunched", sent, bunched, 4, 0.5},
		{"depth beyond n", sent[:2], done[:2], 16, 1.0},
		{"none", nil, nil, 4, 0},
	} {
		got := peakGbps(tc.sent, tc.done, size, tc.depth)
		if math.Abs(got-tc.want) > 1e-3 {
			t.Errorf("%s: peak %.4f Gb/s, want %.4f", tc.name, got, tc.want)
		}
		if got > 1+1e-9 {
			t.Errorf("%s: peak %.4f Gb/s above the 1 Gbit/s line", tc.name, got)
		}
	}
}
