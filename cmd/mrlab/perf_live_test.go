package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/labs/live"
)

// TestLivePerfAcrossSpines is issue 26's MetaRoCE target: `mrlab perf`
// (write_bw, 64 KiB, one connection) from h0 to a host on the other leaf
// of the loss-free default lab at its 1 Gbit/s cap moves at least 0.95 of
// 2 planes x the cap (what sim's run of the same lab reaches: 0.975).
//
// Two runs in one lab, one after the other, so their ratio is the cost of
// the programs' side: the lab's own run (in its loop: POST /perf), then
// `mrlab perf` (two programs on the hosts' verbs endpoints). The in-loop
// run is asserted whatever the machine's load: it involves no program
// and no kernel, so its goodput in lab time is the lab's transports' as
// sim runs them (0.977 at load 16-18, where the loop fell 39-69 ms behind
// the wall clock; the events it ran were the same), and under 0.9 of the
// bound is a fault of the live engine, not of the load.
// The `mrlab perf` figure needs CPU for two programs besides the lab: it
// skips, saying why, when the lab fell behind during it or its client
// waited for a CPU (CLIENT STARVED, the machine's load), and is a known
// miss when it falls short of 0.95 with neither.
func TestLivePerfAcrossSpines(t *testing.T) {
	testenv.RequireNamespaces(t)
	lb := newCLILab(t, "pf")
	src, err := labs.Source(labs.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(src), "  fabric:\n    impair: \"loss random 0.1%\"\n", "", 1)
	if s == string(src) {
		t.Fatal("the default lab's loss line changed: update this test")
	}
	s = strings.Replace(s, "name: "+labs.DefaultName, "name: "+lb.name, 1)
	lb.file = filepath.Join(t.TempDir(), "lossfree.yaml")
	if err := os.WriteFile(lb.file, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := lb.sh(t, "up", lb.file); code != 0 {
		t.Fatalf("up: %d\n%s", code, out)
	}
	st := labStatus(t, lb.dir, lb.name)
	bound := float64(st.Engine.Planes) * live.DefaultMaxRate
	if st.Engine.Planes != 2 {
		t.Fatalf("the default lab has %d planes, want 2", st.Engine.Planes)
	}
	to := "h4" // h0's first host on the other leaf (leaves of 4 hosts)

	// The lab's own run.
	cl, err := live.Dial(lb.dir, lb.name)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in, err := cl.Perf(ctx, live.PerfRequest{From: "h0", To: to, Op: "write", Transport: "metaroce", Size: 64 << 10, Duration: 2 * time.Second, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	inRatio := in.Goodput / bound
	t.Logf("in the lab's loop: %.3f Gbit/s = %.3f of %d planes x the cap; %s (load %s)", in.Goodput/1e9, inRatio, st.Engine.Planes, in.Timing.Verdict(), loadavg())
	if !in.Verified || in.Errors != 0 {
		t.Fatalf("in-loop run: status %q, verified %v, %d errors", in.Status, in.Verified, in.Errors)
	}
	if inRatio < 0.9 {
		t.Errorf("in-loop MetaRoCE write_bw h0 -> %s moved %.3f of 2 planes x the cap in lab time (sim: 0.975; want >= 0.9)", to, inRatio)
	}

	// mrlab perf, as a user runs it.
	code, out := lb.sh(t, "perf", "--from", "h0", "--to", to, "-D", "2", "--json", "--allow-lag")
	if code != 0 {
		t.Fatalf("perf: code %d\n%s", code, out)
	}
	var r struct {
		Lagging   bool   `json:"lagging"`
		Goodput   string `json:"goodput_gbps"`
		Wall      string `json:"run_wall_time"`
		Lateness  string `json:"max_lateness"`
		Wait      string `json:"client_cpu_wait"`
		Verified  bool   `json:"verified"`
		Errors    int    `json:"errors"`
		Transport string `json:"transport"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("perf --json: %v\n%s", err, out)
	}
	gbps, err := strconv.ParseFloat(r.Goodput, 64)
	if err != nil || !r.Verified || r.Errors != 0 || r.Transport != "metaroce" {
		t.Fatalf("perf: goodput %q (%v), verified %v, %d errors, transport %q\n%s", r.Goodput, err, r.Verified, r.Errors, r.Transport, out)
	}
	wall, _ := time.ParseDuration(r.Wall)
	wait, _ := time.ParseDuration(r.Wait)
	ratio := gbps * 1e9 / bound
	msg := func() string {
		return fmt.Sprintf("mrlab perf: %.3f Gbit/s = %.3f of 2 planes x the cap (%.3f of the in-loop run's); lab's worst lateness %s, client's CPU wait %s in %s; load %s",
			gbps, ratio, ratio/inRatio, r.Lateness, r.Wait, r.Wall, loadavg())
	}
	t.Log(msg())
	switch {
	case ratio >= 0.95:
	case r.Lagging:
		t.Skipf("the lab fell behind the wall clock during the run, so its rate is not the lab's figure: %s", msg())
	case wall > 0 && float64(wait) > 0.01*float64(wall):
		t.Skipf("the machine kept perf's client from a CPU (CLIENT STARVED): %s", msg())
	default:
		testenv.KnownMiss(t, "cmd/mrlab", "#26", "MetaRoCE perf across the spines moved %.3f of 2 planes x the cap (want >= 0.95) while the lab kept real time and its client was not starved: %s", ratio, msg())
	}
}
