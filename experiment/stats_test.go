package experiment

import (
	"strings"
	"testing"
)

// TestSharpen: a missed figure that prints like its target gets the digits
// that tell it apart; every other figure prints as its format says.
func TestSharpen(t *testing.T) {
	for _, tc := range []struct {
		x, target float64
		want      string
	}{
		{0.9999966, 1, "0.999997"},
		{0.9876, 1, "0.988"},
		{1, 1, "1.000"},
		{1.0000004, 1, "1.0000004"},
		{0.5, 0.5004, "0.5"},
		{3.4e-6, 0, "3.4e-06"},
	} {
		if got := sharpen(f3, tc.target)(tc.x); got != tc.want {
			t.Errorf("sharpen(f3, %v)(%v) = %q, want %q", tc.target, tc.x, got, tc.want)
		}
	}
}

// TestStatCheckMissShowsDigits: a median a few millionths short of its
// target is reported with them, not as the target itself.
func TestStatCheckMissShowsDigits(t *testing.T) {
	s := statOf([]float64{0.9999966, 0.99981, 1.000007})
	c := statCheck("ratio", ">= 1", s, goal{median: 1, floor: 0.99, atLeast: true}, f3)
	if c.Met {
		t.Fatal("met, want missed")
	}
	if !strings.HasPrefix(c.Measured, "0.999997 ") || !strings.Contains(c.Note, "3.4e-06") {
		t.Errorf("measured %q, note %q: want the median's digits and the shortfall", c.Measured, c.Note)
	}
	met := statCheck("ratio", ">= 1", statOf([]float64{1.2, 1.3}), goal{median: 1, floor: 0.99, atLeast: true}, f3)
	if met.Measured != "1.250 (1.200–1.300) over 2 seeds" {
		t.Errorf("met check measured %q", met.Measured)
	}
}
