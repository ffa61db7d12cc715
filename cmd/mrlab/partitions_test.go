package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchPartitions: --partitions 1,2 runs the lab on one loop, then on
// 2 partitions, and reports the second's speedup over the first and that
// its result is the same (a different one would exit non-zero).
func TestBenchPartitions(t *testing.T) {
	code, out, errOut := runCLI(t, "bench", "--json", "--in-process", "--size", "256KiB", "--partitions", "1,2", "leafspine")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	var rs []benchResult
	for dec.More() {
		var r benchResult
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		rs = append(rs, r)
	}
	if len(rs) != 2 {
		t.Fatalf("%d results, want 2:\n%s", len(rs), out)
	}
	one, two := rs[0], rs[1]
	if one.Partitions != 1 || one.SameResult != nil || one.Speedup != 0 || one.CPUSeconds <= 0 {
		t.Errorf("first run: partitions %d, same %v, speedup %v, CPU %v s", one.Partitions, one.SameResult, one.Speedup, one.CPUSeconds)
	}
	if two.Partitions != 2 || !strings.HasPrefix(two.PartitionPlan, "2 partition(s)") || two.SameResult == nil || !*two.SameResult ||
		two.Speedup <= 0 || two.Windows == 0 || two.DataPackets != one.DataPackets || two.Events != one.Events {
		t.Errorf("second run: partitions %d, plan %q, same %v, speedup %v, windows %d, %d/%d data packets, %d/%d events",
			two.Partitions, two.PartitionPlan, two.SameResult, two.Speedup, two.Windows, two.DataPackets, one.DataPackets, two.Events, one.Events)
	}
	for _, args := range [][]string{{"bench", "--partitions", "0", "leafspine"}, {"bench", "--partitions", "1,x", "leafspine"}, {"sim", "--partitions", "0", "-n", "1"}} {
		if code, _, _ := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// TestSimPartitionsSameOutput: mrlab sim's RDMA workload prints the same
// bytes on one partition and on two, and says when it falls back to one
// (an observer) and why.
func TestSimPartitionsSameOutput(t *testing.T) {
	args := []string{"sim", "leafspine-faults", "--workload", "write_bw", "--from", "h0", "--to", "h5", "-n", "200", "--json"}
	code1, out1, err1 := runCLI(t, append(args, "--partitions", "1")...)
	code2, out2, err2 := runCLI(t, append(args, "--partitions", "2")...)
	if code1 != 0 || code2 != 0 {
		t.Fatalf("exit %d, %d: %s %s", code1, code2, err1, err2)
	}
	if out1 != out2 {
		t.Errorf("1 and 2 partitions print different results:\n%s\n%s", out1, out2)
	}
	if !strings.Contains(err2, "2 partition(s) by plane") {
		t.Errorf("stderr does not give the plan:\n%s", err2)
	}
	_, out3, err3 := runCLI(t, append(args, "--partitions", "2", "--trace-hash")...)
	if !strings.Contains(err3, "running on 1 partition: observers") {
		t.Errorf("--trace-hash does not say it runs on 1 partition:\n%s", err3)
	}
	// The trace hash adds a field; the result is the same.
	var a, b struct{ Results json.RawMessage }
	if json.Unmarshal([]byte(out1), &a) != nil || json.Unmarshal([]byte(out3), &b) != nil || string(a.Results) != string(b.Results) {
		t.Errorf("--trace-hash on one loop gives other results than 2 partitions:\n%s\n%s", out1, out3)
	}
}
