package workload

import (
	"strings"
	"testing"

	"github.com/mrlab/mrlab/transport"
)

// TestSanity: a clean run reaches most of the no-loss bound; a run that
// collapses (RoCEv2's go-back-N at 5% loss) is flagged; latency runs are
// not judged.
func TestSanity(t *testing.T) {
	cases := []struct {
		name   string
		lab    lab
		spec   Spec
		judged bool
		ok     bool
		minFr  float64
	}{
		{"clean-write", lab{hosts: 2, seed: 1}, Spec{Name: WriteBW, Size: 64 << 10, Iterations: 200, QueueDepth: 16, Transport: transport.MetaRoCE}, true, true, 0.5},
		{"clean-read", lab{hosts: 2, seed: 1}, Spec{Name: ReadBW, Size: 64 << 10, Iterations: 200, QueueDepth: 16, Transport: transport.RoCEv2}, true, true, 0.5},
		// Small messages, depth 1: bound by the window, not the link.
		{"small-window", lab{hosts: 2, seed: 1}, Spec{Name: WriteBW, Size: 64, Iterations: 200, QueueDepth: 1, Transport: transport.RoCEv2}, true, true, 0.5},
		{"collapse", lab{hosts: 2, seed: 1, loss: 0.05}, Spec{Name: WriteBW, Size: 64 << 10, Iterations: 100, QueueDepth: 16, Transport: transport.RoCEv2}, true, false, 0},
		{"latency", lab{hosts: 2, seed: 1}, Spec{Name: WriteLat, Size: 64, Iterations: 50}, false, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl, _ := tc.lab.build(t)
			res, err := Run(cl, tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			s := res.Sanity
			if s.Judged != tc.judged || s.OK != tc.ok || s.Fraction < tc.minFr {
				t.Fatalf("sanity %+v (goodput %.3g Gb/s), want judged %v ok %v fraction >= %v", s, res.GoodputGbps, tc.judged, tc.ok, tc.minFr)
			}
			if !s.OK && !strings.Contains(s.Why, "no loss") {
				t.Errorf("why %q", s.Why)
			}
			if s.Judged && s.Fraction > 1.0001 {
				t.Errorf("goodput %.4g Gb/s above the bound %.4g: the bound is not an upper bound", res.GoodputGbps, s.BoundGbps)
			}
		})
	}
}
