package main

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/labs/live"
	"github.com/mrlab/mrlab/verbs"
	"github.com/mrlab/mrlab/workload"
	"github.com/mrlab/mrlab/workload/verbsperf"
)

// TestLivePerfLikeSim: live perf prints perftest's table as mrlab sim
// does for the same flags (the same title, test information lines and
// column header; the result line in the same columns), and --out_json
// carries perftest's keys, for a bandwidth and a latency test.
func TestLivePerfLikeSim(t *testing.T) {
	onTime := &verbs.Timing{LabTime: time.Second, WallTime: time.Second, Limit: 0.01}
	for _, tc := range []struct {
		op, workload string
		res          verbsperf.Result
		simArgs      []string
		jsonKeys     []string
	}{
		{"write", "write_bw", verbsperf.Result{Spec: verbsperf.Spec{Test: "write", Size: 65536, Count: 5000, Depth: 128}, Transport: "metaroce",
			Messages: 5000, Bytes: 5000 * 65536, Elapsed: 40 * time.Millisecond, BWPeakGbps: 70.5, CQMod: 1, MTU: 4096, Status: "ok", Verified: true, Checked: 5000, Timing: onTime},
			[]string{"--workload", "write_bw"}, []string{`"BW_peak"`, `"BW_average"`, `"MsgRate"`, `"CQ_Moderation": 1`, `"test": "RDMA_Write_BW_Test"`}},
		{"write_lat", "write_lat", verbsperf.Result{Spec: verbsperf.Spec{Test: "write_lat", Size: 2, Count: 1000, Depth: 1}, Transport: "metaroce",
			Messages: 1000, Bytes: 2000, Elapsed: 50 * time.Millisecond, MTU: 4096, Status: "ok", Verified: true, Checked: 1000, Timing: onTime,
			Latency: &verbsperf.Latency{N: 1000, Min: 20 * time.Microsecond, P50: 24 * time.Microsecond, Mean: 25 * time.Microsecond, P99: 40 * time.Microsecond, P999: 51 * time.Microsecond, Max: 60 * time.Microsecond, Stdev: 3 * time.Microsecond}},
			[]string{"--workload", "write_lat"}, []string{`"t_min": 20`, `"t_max": 60`, `"t_typical": 24`, `"t_avg": 25`, `"t_stdev": 3`, `"percentile_99.9": 51`}},
	} {
		req := live.PerfRequest{From: "h0", To: "h1", Op: tc.op, Verify: true}
		var b strings.Builder
		if err := writePerf(&b, req, workload.Format{}, &tc.res, nil, nil, false, false); err != nil {
			t.Fatalf("%s: %v", tc.workload, err)
		}
		code, simOut, errs := runCLI(t, append([]string{"sim", "b2b", "-n", "200"}, tc.simArgs...)...)
		if code != 0 {
			t.Fatalf("sim %s: exit %d: %s", tc.workload, code, errs)
		}
		// Lines perftest prints the same whatever the run's figures.
		fixed := func(out string) []string {
			var keep []string
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, " Test") || strings.HasPrefix(l, " #bytes") || strings.Contains(l, "TX depth") ||
					strings.Contains(l, "Mtu ") || strings.Contains(l, "CQ Moderation") || strings.Contains(l, "Connection type") {
					keep = append(keep, strings.TrimSpace(l))
				}
			}
			return keep
		}
		if l, s := fixed(b.String()), fixed(simOut); strings.Join(l, "\n") != strings.Join(s, "\n") || len(l) < 4 {
			t.Errorf("%s: live and sim differ:\nlive: %q\nsim:  %q\nlive output:\n%s", tc.workload, l, s, b.String())
		}
		data, err := workload.MarshalPerftestJSON(liveResult(req, &tc.res), workload.Format{})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range tc.jsonKeys {
			if !strings.Contains(string(data), k) {
				t.Errorf("%s: --out_json lacks %s:\n%s", tc.workload, k, data)
			}
		}
	}
}

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
		{"on time", verbsperf.Result{Status: "ok", Verified: true, Timing: onTime}, false, false, "-----"},
		{"lagging", verbsperf.Result{Status: "ok", Verified: true, Timing: lagged}, false, true, "LAGGING: the lab fell up to 11.9s behind"},
		{"lagging, allowed", verbsperf.Result{Status: "ok", Verified: true, Timing: lagged}, true, false, "LAGGING"},
		{"failed", verbsperf.Result{Status: "remote access error", Errors: 1, Timing: onTime}, true, true, "-----"},
		{"unverified", verbsperf.Result{Status: "ok", Timing: onTime}, true, true, "-----"},
	} {
		var b strings.Builder
		err := writePerf(&b, req, workload.Format{}, &tc.res, nil, fabric, false, tc.allowLag)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: error %v, want error %v", tc.name, err, tc.wantErr)
		}
		first, _, _ := strings.Cut(b.String(), "\n")
		if !strings.HasPrefix(first, tc.wantFirst) {
			t.Errorf("%s: first line %q, want it to start %q", tc.name, first, tc.wantFirst)
		}
		for _, want := range []string{"RDMA_Write BW Test", "BW peak[MiB/sec]", "run: lab time:", "run: wall time:", "lab's worst lateness:", "data:", "retransmits", "drops_fabric link-down  31482"} {
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
