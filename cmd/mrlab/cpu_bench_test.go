package main

import (
	"encoding/json"
	"os"
	"testing"
	"time"
)

// BenchmarkBenchCPU reports where the CPU time of a whole `mrlab bench
// --partitions 1 LAB` process goes, for the labs of issue #29's targets
// (htsim's figure is its whole process's): the run (what bench prints as
// its CPU time), the floor every process pays (`mrlab version`: the
// binary's package initialisation; the test binary's is larger than
// mrlab's, it links the tests' packages) and the rest (building the lab,
// bench's own GCs, sampling and digest), each as CPU seconds per process,
// and data packets per CPU second of the whole process and of the run.
// Each op is one child process of the test binary (see runMainEnv). Set
// MRLAB_BENCH_LAB to bench another lab (fattree-k16: about 15 s per op).
//
//	go test ./cmd/mrlab -run '^$' -bench BenchCPU -benchtime 5x
//
// Compare builds with benchstat over -count runs, or with htsim under
// /usr/bin/time -v (docs/speed.md): on a shared machine only ratios of
// runs interleaved in the same minutes mean anything.
func BenchmarkBenchCPU(b *testing.B) {
	lab := os.Getenv("MRLAB_BENCH_LAB")
	if lab == "" {
		lab = "leafspine-128h"
	}
	child := func(args ...string) (out []byte, cpu float64) {
		out, ru := runSelf(b, args...)
		return out, time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	var whole, run, setup, floor float64
	var pkts uint64
	for range b.N {
		_, v := child("version")
		floor += v
		out, cpu := child("bench", "--json", "--in-process", "--partitions", "1", lab)
		var res benchResult
		if err := json.Unmarshal(out, &res); err != nil {
			b.Fatalf("bench result: %v\n%s", err, out)
		}
		if res.DataPackets == 0 || res.Partitions != 1 {
			b.Fatalf("implausible bench result %+v", res)
		}
		whole += cpu
		run += res.CPUSeconds
		setup += res.SetupSeconds
		pkts += res.DataPackets
	}
	n := float64(b.N)
	b.ReportMetric(whole/n, "process-cpu-s/op")
	b.ReportMetric(run/n, "run-cpu-s/op")
	b.ReportMetric(floor/n, "init-cpu-s/op")
	b.ReportMetric((whole-run-floor)/n, "rest-cpu-s/op")
	b.ReportMetric(setup/n, "setup-wall-s/op")
	b.ReportMetric(float64(pkts)/whole, "data-pkts/process-cpu-s")
	b.ReportMetric(float64(pkts)/run, "data-pkts/run-cpu-s")
}
