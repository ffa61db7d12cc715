package metaroce

import (
	"math"
	"testing"
)

// TestMarkAvg: a table of ACK record histories (rx received, ce marked)
// and the average and weight each leaves.
func TestMarkAvg(t *testing.T) {
	const g = 1.0 / 16
	type rec struct{ rx, ce int }
	tests := []struct {
		name   string
		start  markAvg
		recs   []rec
		want   float64
		weight uint8
	}{
		{"new route, no records", 0, nil, 0, 16},
		{"no arrivals change nothing", 0.5, []rec{{0, 0}, {0, 3}, {-1, 0}}, 0.5, 8},
		{"one marked packet moves it by g", 0, []rec{{1, 1}}, g, 15},
		{"one unmarked packet decays it by g", 1, []rec{{1, 0}}, 1 - g, 1},
		{"a record of 4 weighs as 4 records of 1", 0, []rec{{4, 4}}, 1 - math.Pow(1-g, 4), 12},
		{"a fraction: half of 2 marked", 0, []rec{{2, 1}}, (1 - math.Pow(1-g, 2)) / 2, 15},
		{"more marks than arrivals count as all", 0, []rec{{2, 5}}, 1 - math.Pow(1-g, 2), 14},
		{"all marked for long: weight floors at minWeight", 0, []rec{{1000, 1000}}, 1 - math.Pow(1-g, 1000), 1},
		{"unmarked for long: back to full weight", 1, []rec{{1000, 0}}, math.Pow(1-g, 1000), 16},
	}
	for _, tc := range tests {
		a := tc.start
		for _, r := range tc.recs {
			a.add(g, r.rx, r.ce)
		}
		if math.Abs(float64(a)-tc.want) > 1e-12 {
			t.Errorf("%s: average %v, want %v", tc.name, float64(a), tc.want)
		}
		if w := a.weight(); w != tc.weight {
			t.Errorf("%s: weight %d/16, want %d/16", tc.name, w, tc.weight)
		}
	}
	// Coalescing does not change the average: 4 records of 1 equal one of 4.
	var one, four markAvg
	for range 4 {
		one.add(g, 1, 1)
	}
	four.add(g, 4, 4)
	if math.Abs(float64(one-four)) > 1e-12 {
		t.Errorf("4 records of 1: %v; one of 4: %v", float64(one), float64(four))
	}
}
