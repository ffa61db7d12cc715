package rocev2

import (
	"strings"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
)

func TestDebugSeed(t *testing.T) {
	seed, p := uint64(124), 0.10
	h := newHarness(t, harnessConfig{mtu: 256,
		opts: Options{AckTimeout: 100 * sim.Microsecond, CMTimeout: 50 * sim.Microsecond, MaxReads: 2, AckEvery: 3, Window: 40}})
	h.filter = lossy(p, seed)
	h.dial()
	ab := newWorkload(h.a, h.b, 0x10_0000_0000, seed, 30)
	ba := newWorkload(h.b, h.a, 0x20_0000_0000, seed+1000, 30)
	ab.post()
	ba.post()
	h.loop.RunUntil(h.loop.Now() + 100*sim.Millisecond)
	for i, o := range ab.ops {
		if o.op == 5 {
			t.Logf("op %d READ n=%d", i, o.n)
		}
	}
	n := 0
	for _, l := range h.trace.lines {
		if strings.Contains(l, "conn 1:") {
			n++
		}
	}
	k := 0
	for _, l := range h.trace.lines {
		if strings.Contains(l, "conn 1:") {
			k++
			if k > n-40 {
				t.Log(l)
			}
		}
	}
}
