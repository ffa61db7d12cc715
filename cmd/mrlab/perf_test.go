package main

import (
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/labs/live"
)

// TestWritePerf: a run during which the lab lagged says so on its first
// line and fails unless allowed; an on-time run prints its figures and
// passes.
func TestWritePerf(t *testing.T) {
	req := live.PerfRequest{From: "h0", To: "h1", Op: "write", Verify: true}
	onTime := live.Timing{LabTime: 2 * time.Second, WallTime: 2*time.Second + time.Millisecond, MaxLateness: time.Millisecond}
	lagged := live.Timing{LabTime: 2 * time.Second, WallTime: 13970 * time.Millisecond, MaxLateness: 11900 * time.Millisecond}
	for _, tc := range []struct {
		name      string
		res       live.PerfResult
		allowLag  bool
		wantErr   bool
		wantFirst string
	}{
		{"on time", live.PerfResult{Status: "ok", Verified: true, Timing: onTime}, false, false, "lagging:"},
		{"lagging", live.PerfResult{Status: lagged.Verdict(), Verified: true, Timing: lagged}, false, true, "LAGGING: the lab fell up to 11.9s behind"},
		{"lagging, allowed", live.PerfResult{Status: lagged.Verdict(), Verified: true, Timing: lagged}, true, false, "LAGGING"},
		{"failed", live.PerfResult{Status: "remote access error", Errors: 1, Timing: onTime}, true, true, "lagging:"},
	} {
		var b strings.Builder
		err := writePerf(&b, req, tc.res, false, tc.allowLag)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: error %v, want error %v", tc.name, err, tc.wantErr)
		}
		first, _, _ := strings.Cut(b.String(), "\n")
		if !strings.HasPrefix(first, tc.wantFirst) {
			t.Errorf("%s: first line %q, want it to start %q", tc.name, first, tc.wantFirst)
		}
		for _, want := range []string{"run: lab time:", "run: wall time:", "lab's worst lateness:"} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, want, b.String())
			}
		}
	}
}
