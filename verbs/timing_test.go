package verbs

import (
	"strings"
	"testing"
	"time"
)

// TestTimingClientStarved: a program that waited for a CPU more than
// Limit of the interval says so in its verdict, whether the lab kept real
// time or not; a short wait is reported, not flagged.
func TestTimingClientStarved(t *testing.T) {
	base := Timing{LabTime: 2 * time.Second, WallTime: 2 * time.Second, Limit: 0.01}
	for _, tc := range []struct {
		name    string
		wait    time.Duration
		lagging bool
		starved bool
		want    string
	}{
		{"unknown", -1, false, false, "real time kept"},
		{"short wait", 5 * time.Millisecond, false, false, "this program's threads waited 5ms for a CPU"},
		{"starved", 425 * time.Millisecond, false, true, "CLIENT STARVED: this program's threads waited 425ms for a CPU in all (21.2% of the wall time"},
		{"lab and client", 30 * time.Millisecond, true, true, "LAGGING"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm := base
			tm.ClientWait, tm.Lagging = tc.wait, tc.lagging
			if got := tm.ClientStarved(); got != tc.starved {
				t.Errorf("ClientStarved() = %v, want %v", got, tc.starved)
			}
			s := tm.String()
			if !strings.Contains(s, tc.want) {
				t.Errorf("String() = %q, want it to contain %q", s, tc.want)
			}
			if tc.starved != strings.Contains(s, "CLIENT STARVED") {
				t.Errorf("String() = %q: says starved %v, want %v", s, !tc.starved, tc.starved)
			}
		})
	}
}

// TestTimingLoopStarved: the lab's verdict that its loop waited for a CPU
// beyond the limit leads the line when the lab was not lagging (it no
// longer says real time kept), and is added to a LAGGING one.
func TestTimingLoopStarved(t *testing.T) {
	base := Timing{LabTime: 3 * time.Second, WallTime: 3 * time.Second, Limit: 0.01, ClientWait: -1, LoopStarved: true}
	on := base
	on.MaxLateness = 2 * time.Millisecond
	if s := on.String(); !strings.HasPrefix(s, "LOOP STARVED: the lab's loop waited for a CPU beyond 1% of the run") {
		t.Errorf("a starved loop on time: %q", s)
	}
	late := base
	late.MaxLateness, late.Lagging = 84*time.Millisecond, true
	if s := late.String(); !strings.HasPrefix(s, "LAGGING") || !strings.Contains(s, "LOOP STARVED too") {
		t.Errorf("a starved loop also late: %q", s)
	}
	kept := base
	kept.LoopStarved = false
	if s := kept.String(); !strings.HasPrefix(s, "real time kept") || strings.Contains(s, "STARVED") {
		t.Errorf("a kept run: %q", s)
	}
}
