package rocev2

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

func TestStressTemp(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("STRESS"))
	for seed := uint64(1000); seed < uint64(1000+n); seed++ {
		for _, p := range []float64{0.02, 0.10} {
			label := fmt.Sprintf("seed %d loss %.0f%%", seed, p*100)
			h := newHarness(t, harnessConfig{mtu: 256, noTrace: true,
				opts: Options{AckTimeout: 100 * sim.Microsecond, CMTimeout: 50 * sim.Microsecond, MaxReads: 2, AckEvery: 3, Window: 40}})
			r := sim.NewRand(seed, "imp")
			h.filter = func(*endpoint, *ib.Packet) verdict {
				x := r.Float64()
				switch {
				case x < p:
					return drop
				case x < p+0.01:
					return duplicate
				case x < p+0.06:
					return markCE
				}
				return pass
			}
			h.dial()
			ab := newWorkload(h.a, h.b, 0x10_0000_0000, seed, 30)
			ba := newWorkload(h.b, h.a, 0x20_0000_0000, seed+1000, 30)
			ab.post()
			ba.post()
			h.runUntil(func() bool {
				return h.a.nComp == len(ab.ops)+ba.nrecv && h.b.nComp == len(ba.ops)+ab.nrecv
			}, 100*sim.Second)
			ab.check(t, label+" a->b")
			ba.check(t, label+" b->a")
		}
	}
}
