package workload

import (
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// TestEveryWorkloadUnderLoss runs every workload with 1% random loss on
// every link; all data checks must pass. RoCEv2 only has to be correct
// (it is slow under loss: that is the point of the comparison).
func TestEveryWorkloadUnderLoss(t *testing.T) {
	for _, kind := range lossKinds() {
		for _, s := range smallSpecs() {
			t.Run(kind.String()+"/"+string(s.Name), func(t *testing.T) {
				cl, _ := lab{hosts: 4, leaves: 2, planes: 2, seed: 11, loss: 0.01}.build(t)
				s.Transport = kind
				s.Timeout = 100 * sim.Second
				res, err := Run(cl, s)
				if err != nil {
					t.Fatal(err)
				}
				if !res.Check.OK || res.Errors != 0 {
					t.Fatalf("check %+v errors %d %s", res.Check, res.Errors, res.FirstError)
				}
				if res.Drops["fabric impairment"] == 0 {
					t.Errorf("no packet lost to the 1%% loss: %v", res.Drops)
				}
				t.Logf("%.2f Gb/s, retx %d, drops %v, %v", res.GoodputGbps, res.Retransmits, res.Drops, res.Elapsed)
			})
		}
	}
}

func lossKinds() []transport.Kind { return []transport.Kind{transport.RoCEv2} }
