package live

import (
	"strings"
	"testing"

	"github.com/mrlab/mrlab/labs"
)

func TestDefaultPartitions(t *testing.T) {
	for _, tc := range []struct{ cores, want int }{{1, 1}, {2, 1}, {4, 3}, {16, 15}} {
		if got := DefaultPartitions(tc.cores); got != tc.want {
			t.Errorf("DefaultPartitions(%d) = %d; want %d", tc.cores, got, tc.want)
		}
	}
}

// TestLivePartitionPlan: a live lab plans its partitions with the sim
// rule (the same plan sim runs), runs on one, and says why whenever it
// runs fewer than asked; a lab that allows fewer than asked says that too.
func TestLivePartitionPlan(t *testing.T) {
	for _, tc := range []struct {
		lab       string
		asked     int
		plan      string // in the plan's text
		reason    []string
		lookahead bool
	}{
		{"leafspine", 1, "1 partition(s) one partition", nil, false},
		{"leafspine", 2, "2 partition(s) by plane", []string{errNoLivePartitions}, true},
		{"b2b", 2, "2 partition(s)", []string{errNoLivePartitions}, true},
		{"b2b", 4, "2 partition(s)", []string{"the lab allows 2: only 2 units to place", errNoLivePartitions}, true},
	} {
		lab, err := labs.Builtin(tc.lab)
		if err != nil {
			t.Fatal(err)
		}
		eng, err := NewLabEngine(lab, EngineConfig{MaxRate: DefaultMaxRate})
		if err != nil {
			t.Fatal(err)
		}
		s := planLive(eng, tc.asked)
		sim := lab.PlanPartitions(tc.asked)
		if s.Asked != tc.asked || s.Running != 1 || s.Plan != sim.String() || !strings.Contains(s.Plan, tc.plan) {
			t.Errorf("%s asked %d: %+v; want running 1 and sim's plan %q containing %q", tc.lab, tc.asked, s, sim, tc.plan)
		}
		if (s.Lookahead > 0) != tc.lookahead {
			t.Errorf("%s asked %d: lookahead %v", tc.lab, tc.asked, s.Lookahead)
		}
		if len(tc.reason) == 0 && s.Reason != "" {
			t.Errorf("%s asked %d: reason %q; want none", tc.lab, tc.asked, s.Reason)
		}
		for _, r := range tc.reason {
			if !strings.Contains(s.Reason, r) {
				t.Errorf("%s asked %d: reason %q; want it to say %q", tc.lab, tc.asked, s.Reason, r)
			}
		}
	}
}
