package conformance

import (
	"testing"

	"github.com/mrlab/mrlab/transport/metaroce"
)

// TestScriptsKillTheirFaults: each of these scripts passes against the
// engine and fails against the engine with the fault it was written to
// catch planted (transport/metaroce/mutation.go), so it cannot pass by
// checking nothing.
func TestScriptsKillTheirFaults(t *testing.T) {
	all, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*Script{}
	for _, s := range all {
		byName[s.Name] = s
	}
	for _, c := range []struct {
		script string
		fault  metaroce.Mutation
	}{
		{"sack-long-run", metaroce.MutSACKFirstWord},
		{"read-resp-retx-bytes", metaroce.MutReadRetxStale},
		{"path-gray-repath", metaroce.MutNoGrayRepath},
		{"path-even-loss-stays", metaroce.MutRepathAnyLoss},
		{"paths-active-by-window", metaroce.MutNoPathCap},
		{"copy-unused-share", metaroce.MutNoCopies},
		{"ack-retx-probe-counts", metaroce.MutNoRetxProbeLoss},
		{"first-flight-whole-window", metaroce.MutPathShareFloor},
	} {
		t.Run(c.script, func(t *testing.T) {
			s := byName[c.script]
			if s == nil {
				t.Fatalf("no built-in script %s", c.script)
			}
			if r := Run(SimTarget{}, s, nil); r.Result != Pass {
				t.Errorf("against the engine: %s (%s)", r.Result, r.Detail)
			}
			if r := Run(SimTarget{Mutations: c.fault}, s, nil); r.Result != Fail {
				t.Errorf("with its fault planted: %s, want fail", r.Result)
			}
		})
	}
}
