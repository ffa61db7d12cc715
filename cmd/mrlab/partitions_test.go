package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchPartitions: --partitions N plans N partitions and says plainly
// that a full lab runs on 1 (and why); bench reports it with its CPU time.
func TestBenchPartitions(t *testing.T) {
	code, out, errOut := runCLI(t, "bench", "--json", "--size", "256KiB", "--partitions", "2", "leafspine")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r benchResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.Partitions != 1 || r.PartitionsAsked != 2 || !strings.HasPrefix(r.PartitionPlan, "2 partition(s)") || r.Speedup != 0 || r.CPUSeconds <= 0 {
		t.Errorf("partitions %d of %d, plan %q, speedup %v, CPU %v s", r.Partitions, r.PartitionsAsked, r.PartitionPlan, r.Speedup, r.CPUSeconds)
	}
	if !strings.Contains(errOut, "running on 1 partition") {
		t.Errorf("stderr does not say the run used 1 partition:\n%s", errOut)
	}
	for _, args := range [][]string{{"bench", "--partitions", "0", "leafspine"}, {"sim", "--partitions", "0", "-n", "1"}} {
		if code, _, _ := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
