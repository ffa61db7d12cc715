package main

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/labs/live"
	"github.com/mrlab/mrlab/verbs"
	"github.com/mrlab/mrlab/workload/verbsperf"
)

// TestWritePerf: a run during which the lab lagged says so on its first
// line and fails unless allowed; an on-time run prints its figures and
// passes; the fabric's counters during the run get their own table.
func TestWritePerf(t *testing.T) {
	req := live.PerfRequest{From: "h0", To: "h1", Op: "write", Verify: true}
	onTime := &verbs.Timing{LabTime: 2 * time.Second, WallTime: 2*time.Second + time.Millisecond, MaxLateness: time.Millisecond, Limit: 0.01}
	lagged := &verbs.Timing{LabTime: 2 * time.Second, WallTime: 13970 * time.Millisecond, MaxLateness: 11900 * time.Millisecond,
		Lagging: true, Limit: 0.01}
	fabric := map[string]uint64{"drops_fabric link-down": 31482}
	for _, tc := range []struct {
		name      string
		res       verbsperf.Result
		allowLag  bool
		wantErr   bool
		wantFirst string
	}{
		{"on time", verbsperf.Result{Status: "ok", Verified: true, Timing: onTime}, false, false, "lagging:"},
		{"lagging", verbsperf.Result{Status: "ok", Verified: true, Timing: lagged}, false, true, "LAGGING: the lab fell up to 11.9s behind"},
		{"lagging, allowed", verbsperf.Result{Status: "ok", Verified: true, Timing: lagged}, true, false, "LAGGING"},
		{"failed", verbsperf.Result{Status: "remote access error", Errors: 1, Timing: onTime}, true, true, "lagging:"},
		{"unverified", verbsperf.Result{Status: "ok", Timing: onTime}, true, true, "lagging:"},
	} {
		var b strings.Builder
		err := writePerf(&b, req, &tc.res, fabric, false, tc.allowLag)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: error %v, want error %v", tc.name, err, tc.wantErr)
		}
		first, _, _ := strings.Cut(b.String(), "\n")
		if !strings.HasPrefix(first, tc.wantFirst) {
			t.Errorf("%s: first line %q, want it to start %q", tc.name, first, tc.wantFirst)
		}
		for _, want := range []string{"run: lab time:", "run: wall time:", "lab's worst lateness:", "retransmits", "drops_fabric link-down  31482"} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, want, b.String())
			}
		}
	}
}

// TestFabricDelta: perf reports what the fabric's counters grew by during
// the run, drops named as sim's results name them.
func TestFabricDelta(t *testing.T) {
	before := map[string]uint64{"drops_link-down": 10, "ecn_marks": 5, "drops_impairment": 3}
	after := map[string]uint64{"drops_link-down": 42, "ecn_marks": 5, "drops_impairment": 3, "drops_queue": 7}
	want := map[string]uint64{"drops_fabric link-down": 32, "drops_fabric queue": 7}
	if got := fabricDelta(before, after); !maps.Equal(got, want) {
		t.Errorf("fabricDelta = %v, want %v", got, want)
	}
}
