package workload

import (
	"errors"
	"testing"

	"github.com/mrlab/mrlab/transport"
)

// smallSpecs are quick runs of every workload.
func smallSpecs() []Spec {
	return []Spec{
		{Name: WriteBW, Size: 16384, Iterations: 64, QueueDepth: 8},
		{Name: SendBW, Size: 16384, Iterations: 64, QueueDepth: 8},
		{Name: ReadBW, Size: 16384, Iterations: 64, QueueDepth: 8},
		{Name: WriteLat, Size: 64, Iterations: 50},
		{Name: Permutation, Size: 16384, Iterations: 32},
		{Name: Incast, Size: 16384, Iterations: 32},
		{Name: AllToAll, Size: 64 << 10, Iterations: 4},
		{Name: AllReduce, Size: 64 << 10, Iterations: 3},
	}
}

func TestEveryWorkload(t *testing.T) {
	for _, kind := range []transport.Kind{transport.RoCEv2} {
		for _, s := range smallSpecs() {
			t.Run(kind.String()+"/"+string(s.Name), func(t *testing.T) {
				cl, pool := lab{hosts: 4, leaves: 2, planes: 2, seed: 3}.build(t)
				s.Transport = kind
				res, err := Run(cl, s)
				if err != nil {
					t.Fatal(err)
				}
				if !res.Check.OK || res.Check.Regions == 0 || res.Errors != 0 {
					t.Fatalf("check %+v errors %d %s", res.Check, res.Errors, res.FirstError)
				}
				if res.Messages == 0 || res.GoodputGbps <= 0 {
					t.Errorf("nothing measured: %+v", res)
				}
				_ = pool
				t.Logf("%s: %.2f Gb/s, %d msgs, msg p50 %v, flows %d, %v", s.Name, res.GoodputGbps, res.Messages, res.MessageTime.P50, res.Flows, res.Elapsed)
			})
		}
	}
}

// TestDataCheckCatchesCorruption flips one byte in every registered region
// just before the check: every workload's check must fail.
func TestDataCheckCatchesCorruption(t *testing.T) {
	testBeforeVerify = func(r *runner) {
		for _, mr := range r.regions {
			mr.Bytes()[len(mr.Bytes())/2+1] ^= 0x5a
		}
	}
	defer func() { testBeforeVerify = nil }()
	for _, s := range smallSpecs() {
		t.Run(string(s.Name), func(t *testing.T) {
			cl, _ := lab{hosts: 4, leaves: 2, seed: 3}.build(t)
			s.Transport = transport.RoCEv2
			s.Iterations = min(s.Iterations, 20) // several slots stay unused: zero must be checked too
			res, err := Run(cl, s)
			if !errors.Is(err, ErrDataDiff) || res == nil || res.Check.OK || res.Check.BadRegions == 0 {
				t.Fatalf("corruption not caught: err %v check %+v", err, res.Check)
			}
		})
	}
}
