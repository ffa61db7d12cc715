package experiment

import (
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

// TestLossCostsWireTime: on one 100 Gbit/s link (the b2b lab) a lost
// packet has used the wire, so MetaRoCE's write_bw at loss p cannot beat
// the wire's (1-p) x its loss-free goodput (+1% of it for the draw's
// noise), at 1% and 10% random loss. With loss_at: enqueue (tc-netem's
// drop before the queue) a lost packet costs no wire time and the same
// run exceeds that ceiling at 10%: the flattery the default removes.
func TestLossCostsWireTime(t *testing.T) {
	point := func(loss string, enqueue bool, seed uint64) Point {
		pt := Point{Lab: "b2b", Seed: seed, Spec: workload.Spec{Name: workload.WriteBW, Transport: transport.MetaRoCE,
			Size: 64 << 10, QueueDepth: 128, Duration: 500 * sim.Microsecond, Timeout: sim.Second}}
		if loss != "" {
			pt.Impair = []string{"all=loss random " + loss}
		}
		if enqueue {
			pt.Set = []string{"links.default.loss_at=enqueue"}
		}
		return pt
	}
	goodput := func(pt Point) float64 {
		r, err := pt.run(probe{})
		if err != nil || r.err != nil {
			t.Fatalf("%s: %v %v", pt.Command(), err, r.err)
		}
		return r.res.GoodputGbps
	}
	for _, seed := range []uint64{1, 2} {
		clean := goodput(point("", false, seed))
		for _, c := range []struct {
			loss string
			p    float64
		}{{"1%", 0.01}, {"10%", 0.1}} {
			ceiling := (1-c.p)*clean + 0.01*clean
			wire := goodput(point(c.loss, false, seed))
			t.Logf("seed %d, %s loss: %.2f Gb/s (clean %.2f, wire ceiling %.2f)", seed, c.loss, wire, clean, ceiling)
			if wire > ceiling {
				t.Errorf("seed %d, %s loss on the wire: %.2f Gb/s, above the wire's (1-p) x %.2f + 1%% = %.2f", seed, c.loss, wire, clean, ceiling)
			}
			if c.p == 0.1 {
				netem := goodput(point(c.loss, true, seed))
				t.Logf("seed %d, %s loss at enqueue (netem): %.2f Gb/s", seed, c.loss, netem)
				if netem <= ceiling {
					t.Errorf("seed %d: loss_at enqueue gave %.2f Gb/s, not above the wire ceiling %.2f: is the key applied?", seed, netem, ceiling)
				}
			}
		}
	}
}
