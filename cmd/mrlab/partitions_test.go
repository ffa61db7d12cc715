package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
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
// bytes, writes the same captures and telemetry and has the same trace
// hash on one plain loop (--partitions 1) and on 2 and 4 partitions
// through the lab's fault timeline, and says when it falls back to one
// (a transport trace) and why.
func TestSimPartitionsSameOutput(t *testing.T) {
	dir := t.TempDir()
	args := []string{"sim", "leafspine-faults", "--workload", "write_bw", "--from", "h0", "--to", "h5", "-n", "50", "--json", "--trace-hash"}
	run := func(parts string) (string, map[string][]byte) {
		out := filepath.Join(dir, parts)
		code, stdout, stderr := runCLI(t, append(args, "--partitions", parts, "--capture", "h0,p0-leaf0,p1-spine1",
			"--capture-dir", out, "--telemetry", filepath.Join(out, "t.csv"))...)
		if code != 0 {
			t.Fatalf("--partitions %s: exit %d: %s", parts, code, stderr)
		}
		if parts != "1" && !strings.Contains(stderr, parts+" partition(s)") {
			t.Errorf("--partitions %s: stderr does not give the plan:\n%s", parts, stderr)
		}
		files := map[string][]byte{}
		for _, f := range []string{"h0.pcapng", "p0-leaf0.pcapng", "p1-spine1.pcapng", "t.csv"} {
			b, err := os.ReadFile(filepath.Join(out, f))
			if err != nil || len(b) == 0 {
				t.Fatalf("--partitions %s: %s: %v (%d bytes)", parts, f, err, len(b))
			}
			files[f] = b
		}
		return stdout, files
	}
	out1, files1 := run("1")
	if !strings.Contains(out1, `"trace_hashes"`) {
		t.Fatalf("no trace hash in the output:\n%s", out1)
	}
	for _, parts := range []string{"2", "4"} {
		out, files := run(parts)
		if out != out1 {
			t.Errorf("1 and %s partitions print different results:\n%s\n%s", parts, out1, out)
		}
		for f, b := range files {
			if !bytes.Equal(b, files1[f]) {
				t.Errorf("1 and %s partitions write different %s (%d and %d bytes)", parts, f, len(files1[f]), len(b))
			}
		}
	}
	_, _, err3 := runCLI(t, append(args, "-n", "20", "--partitions", "2", "--trace", filepath.Join(dir, "trace.txt"))...)
	if !strings.Contains(err3, "running on 1 partition: transport traces") {
		t.Errorf("--trace does not say it runs on 1 partition:\n%s", err3)
	}
}
