package metaroce

import (
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// TestPacer: a table of pacer histories, each a sequence of steps from a
// pacer whose next packet may go at start, and where it ends.
func TestPacer(t *testing.T) {
	const (
		line = 12.5e9 // bytes/s: 100 Gb/s
		rate = 1e9    // bytes/s
		full = wire.DataSize + wire.TrailerSize + 4096
	)
	gapOf := func(n int, r float64) sim.Time { return sim.Time(float64(n+ipUDPOverhead) / r * 1e9) }
	g := gapOf(full, rate) // 4188 ns
	type step struct {
		op       string // sent, release, speedUp
		now      sim.Time
		n        int
		rate     float64 // sent: rate; speedUp: to (from is rate)
		wantNext sim.Time
	}
	tests := []struct {
		name  string
		start sim.Time
		steps []step
	}{
		{"a full packet waits its time at R", 0, []step{{"sent", 100, full, rate, 100 + g}}},
		{"back to back: gaps add up, no burst", 0, []step{{"sent", 100, full, rate, 100 + g}, {"sent", 100, full, rate, 100 + 2*g}}},
		{"idle: the gap starts now, not at the old next", 50, []step{{"sent", 1000, full, rate, 1000 + g}}},
		{"no payload: not paced", 0, []step{{"sent", 100, wire.DataSize + wire.TrailerSize, 1, 0}}},
		{"a control packet: not paced", 0, []step{{"sent", 100, wire.CommonSize + wire.TrailerSize, 1, 0}}},
		{"at line rate: not paced", 0, []step{{"sent", 100, full, line, 0}}},
		{"above line rate: not paced", 0, []step{{"sent", 100, full, 2 * line, 0}}},
		{"one byte of payload is paced", 0, []step{{"sent", 0, wire.DataSize + wire.TrailerSize + 1, rate, gapOf(wire.DataSize+wire.TrailerSize+1, rate)}}},
		{"release ends a wait", 0, []step{{"sent", 100, full, rate, 100 + g}, {"release", 200, 0, 0, 200}}},
		{"release does not move a past next on", 100, []step{{"release", 500, 0, 0, 100}}},
		{"rate doubles: the rest halves", 1000, []step{{"speedUp", 0, 0, 2 * rate, 500}}},
		{"rate falls: the gap stays", 1000, []step{{"speedUp", 0, 0, rate / 2, 1000}}},
		{"rate the same: the gap stays", 1000, []step{{"speedUp", 0, 0, rate, 1000}}},
		{"no wait left: nothing to shorten", 1000, []step{{"speedUp", 1000, 0, 2 * rate, 1000}}},
	}
	for _, tc := range tests {
		p := pacer{next: tc.start}
		for i, s := range tc.steps {
			switch s.op {
			case "sent":
				p.sent(s.now, s.n, s.rate, line)
			case "release":
				p.release(s.now)
			case "speedUp":
				p.speedUp(s.now, rate, s.rate)
			}
			if p.next != s.wantNext {
				t.Errorf("%s: step %d (%s at %v): next %v, want %v", tc.name, i, s.op, s.now, p.next, s.wantNext)
			}
			if until, wait := p.wait(s.now); wait != (s.wantNext > s.now) || until != p.next {
				t.Errorf("%s: step %d: wait(%v) = %v, %v with next %v", tc.name, i, s.now, until, wait, p.next)
			}
		}
	}
}
