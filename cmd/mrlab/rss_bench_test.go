package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// runMainEnv set makes the test binary run mrlab's main on its arguments
// (TestMain), so a benchmark can measure a whole process.
const runMainEnv = "MRLAB_TEST_RUN_MAIN"

// BenchmarkProcessRSS reports the whole-process peak RSS of `mrlab
// version` (the binary's own pages and package initialisation: the floor
// every command pays) and of `mrlab bench leafspine-128h` (htsim's 128-host
// bed, issue #29's ≤ 24 MiB target), each a child process of the test
// binary. The test binary also links the tests' packages (chromedp among
// them): its `version` peaks about 5 MiB above the mrlab binary's (24.2
// against about 19 MiB), so compare its figures with each other, not with
// `/usr/bin/time -v mrlab`. Also the bench run's own heap figures: state per
// host (after the build) and per connection (the run's peak growth).
//
//	go test ./cmd/mrlab -run '^$' -bench ProcessRSS -benchtime 3x
func BenchmarkProcessRSS(b *testing.B) {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	child := func(args ...string) ([]byte, int64) {
		cmd := exec.Command(self, args...)
		cmd.Env = append(os.Environ(), runMainEnv+"=1")
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			b.Fatalf("mrlab %v: %v\n%s", args, err, errOut.String())
		}
		return out.Bytes(), cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
	}
	var version, bench, host, conn int64
	for range b.N {
		_, v := child("version")
		out, r := child("bench", "--json", "--in-process", "leafspine-128h")
		var res benchResult
		if err := json.Unmarshal(out, &res); err != nil {
			b.Fatalf("bench result: %v\n%s", err, out)
		}
		if res.Hosts != 128 || res.DataPackets == 0 {
			b.Fatalf("implausible bench result %+v", res)
		}
		version, bench = max(version, v), max(bench, r)
		host, conn = max(host, res.HostState), max(conn, res.ConnState)
	}
	b.ReportMetric(float64(version)/(1<<20), "version-maxrss-MiB")
	b.ReportMetric(float64(bench)/(1<<20), "bench128-maxrss-MiB")
	b.ReportMetric(float64(host), "bench128-B/host")
	b.ReportMetric(float64(conn), "bench128-B/conn")
}
