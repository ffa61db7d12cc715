package workload

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// TestPayloadModesAgree runs each workload once with real bytes and once
// with synthetic payload and checks that nothing but payload bytes
// differs: the same completions at the same times, the same packets (by
// length and IPv4/UDP headers) at the same places and times, and a data
// check that passes in both.
func TestPayloadModesAgree(t *testing.T) {
	specs := []Spec{
		{Name: WriteBW, Size: 100000, Iterations: 20, QueueDepth: 4},
		{Name: SendBW, Size: 10000, Iterations: 20, QueueDepth: 4},
		{Name: ReadBW, Size: 50000, Iterations: 10, QueueDepth: 2},
		{Name: Permutation, Size: 300000, Iterations: 2, QueueDepth: 1},
		{Name: AllToAll, Size: 64 << 10, Iterations: 2},
		{Name: AllToAll, Size: 64 << 10, Iterations: 2, Conns: 2},
		{Name: WriteLat, Size: 8192, Iterations: 20},
		{Name: SendLat, Size: 8192, Iterations: 20},
		{Name: ReadLat, Size: 8192, Iterations: 20},
		{Name: WriteBW, Size: 100000, Iterations: 20, QueueDepth: 4, Conns: 2},
	}
	for _, k := range []transport.Kind{transport.MetaRoCE, transport.RoCEv2} {
		for _, spec := range specs {
			t.Run(k.String()+"/"+string(spec.Name), func(t *testing.T) {
				var res [2]*Result
				var hash [2]uint64
				for i, mode := range []softnic.PayloadMode{softnic.PayloadBytes, softnic.PayloadSynthetic} {
					h := fabric.NewHeaderTraceHash()
					cl, pool := lab{hosts: 4, leaves: 2, seed: 3, loss: 0.02, obs: h}.build(t)
					s := spec
					s.Transport, s.Seed, s.Payload = k, 5, mode
					regions := 0
					testBeforeVerify = func(r *runner) {
						for _, mr := range r.regions {
							regions++
							if mr.Synthetic() != (mode == softnic.PayloadSynthetic) {
								t.Errorf("%v run registered a region with Synthetic() = %v", mode, mr.Synthetic())
							}
						}
					}
					r, err := Run(cl, s)
					testBeforeVerify = nil
					if regions == 0 {
						t.Fatal("no regions registered")
					}
					if err != nil {
						t.Fatalf("%v: %v", mode, err)
					}
					if !r.Check.OK || r.Errors != 0 {
						t.Fatalf("%v: data check %+v, %d errors", mode, r.Check, r.Errors)
					}
					for cl.Loop.Step() {
					}
					if pool.Outstanding() != 0 {
						t.Errorf("%v: %d packets leaked", mode, pool.Outstanding())
					}
					if r.Payload != mode.String() {
						t.Errorf("result says payload %q, ran %v", r.Payload, mode)
					}
					r.Payload = ""
					res[i], hash[i] = r, h.Sum()
				}
				if d := cmp.Diff(res[0], res[1], cmpopts.EquateComparable(netip.Addr{})); d != "" {
					t.Errorf("results differ (-bytes +synthetic):\n%s", d)
				}
				if res[0].Retransmits == 0 {
					t.Errorf("no retransmissions: the lab's loss should exercise them")
				}
				if hash[0] != hash[1] {
					t.Errorf("header trace hash %016x with bytes, %016x synthetic", hash[0], hash[1])
				}
			})
		}
	}
}
