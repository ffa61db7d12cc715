package live

import (
	"testing"

	"github.com/mrlab/mrlab/workload"
)

// TestPerfResultCarriesOracle: a live perf run's counters say how many
// messages the data oracle checked at completion and how many failed, and
// how many packets were corrupted or duplicated; a failed check is not
// reported as verified.
func TestPerfResultCarriesOracle(t *testing.T) {
	r := &workload.Result{Messages: 10, Corrupted: 3, CorruptDropped: 2, Duplicated: 4, DupReceived: 5,
		Check: workload.DataCheck{OK: false, Messages: 10, Failures: 1, FirstFailure: "flow 0 slot 1: completed with byte 4096 of 65536 wrong"}}
	res := perfResult(PerfRequest{Op: "write"}, r, nil)
	want := map[string]uint64{"messages_checked": 10, "check_failures": 1, "corrupted": 3, "corrupt_dropped": 2, "duplicated": 4, "dup_received": 5}
	for k, v := range want {
		if res.Counters[k] != v {
			t.Errorf("counter %s = %d, want %d", k, res.Counters[k], v)
		}
	}
	if res.Verified {
		t.Error("a failed data check reported as verified")
	}
}
