package conformance

import (
	"testing"

	"github.com/mrlab/mrlab/transport/metaroce"
)

// TestMutationsKilled is the suite's self-check: against an engine with
// each planted fault, at least one built-in test must fail, and at least
// 90% of the faults must be caught.
func TestMutationsKilled(t *testing.T) {
	all, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, m := range metaroce.Mutations() {
		var by []string
		for _, s := range all {
			if s.XFail != "" {
				continue // a known failure proves nothing about the fault
			}
			if r := Run(SimTarget{Mutations: m.M}, s, nil); r.Result == Fail {
				by = append(by, s.Name)
			}
		}
		if len(by) > 0 {
			killed++
			t.Logf("%-18s killed by %d: %v", m.Name, len(by), by)
		} else {
			t.Logf("%-18s SURVIVED", m.Name)
		}
	}
	n := len(metaroce.Mutations())
	t.Logf("%d of %d planted faults killed", killed, n)
	if n < 12 || killed*10 < n*9 {
		t.Errorf("%d of %d planted faults killed; want at least 90%% of at least 12", killed, n)
	}
}
