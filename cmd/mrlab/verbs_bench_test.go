package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/labs/live"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

// BenchmarkVerbsEndpoint measures the targets in one run, as
// root: the examples through the verbs endpoint against the same
// workload run inside the lab's loop (what the NICs do with no program
// outside the lab), on the same live lab.
//
//	sudo go test ./cmd/mrlab -run '^$' -bench VerbsEndpoint -benchtime 1x -count 5
//
// goodput-ratio: examples/rdma-write (1 MiB WRITEs, 64, 16 in flight)
// h0 -> h4 of the default lab over mrlab perf's write with the same size,
// count and depth (itself a verbs client); inlab-ratio: the example over
// the same write_bw run inside the lab's loop (what the NICs do with no
// program outside the lab). lat-ratio: examples/pingpong --op write
// (2-byte WRITE_IMM ping-pong, median one-way) over mrlab perf --op
// write_lat on b2b; inlab-lat-ratio: over the in-lab write_lat.
func BenchmarkVerbsEndpoint(b *testing.B) {
	testenv.RequireNamespaces(b)
	bin := b.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", ".", "../../examples/rdma-write", "../../examples/pingpong").CombinedOutput(); err != nil {
		b.Fatalf("building mrlab and the examples: %v\n%s", err, out)
	}
	for i := 0; i < b.N; i++ {
		bw := upBench(b, "leafspine", "vbw")
		inGbps := bw.inLab(b, workload.Spec{Name: workload.WriteBW, Size: 1 << 20, Iterations: 64, QueueDepth: 16,
			From: []string{"h0"}, To: []string{"h4"}}).GoodputGbps
		out := bw.pair(b, bin, "h4", "h0", "rdma-write", "--size", "1MiB", "-n", "64", "--depth", "16")
		exGbps := column(b, out, "BW average[Gb/sec]", 3)
		bwLag := lagged(out)
		perfGbps := column(b, bw.perf(b, bin, "--from", "h0", "--to", "h4", "--size", "1MiB", "--count", "64", "--depth", "16", "--report_gbits"), "BW average[Gb/sec]", 3)
		bw.down()

		lat := upBench(b, "b2b", "vlat")
		inLat := lat.inLab(b, workload.Spec{Name: workload.WriteLat, Size: 2, Iterations: 1000,
			From: []string{"h0"}, To: []string{"h1"}}).Latency.P50
		out = lat.pair(b, bin, "h1", "h0", "pingpong", "--op", "write", "--size", "2", "-n", "1000")
		exLat := column(b, out, "t_typical[usec]", 4)
		latLag := lagged(out)
		perfLat := column(b, lat.perf(b, bin, "--from", "h0", "--to", "h1", "--op", "write_lat", "--size", "2", "--count", "1000"), "t_typical[usec]", 4)
		lat.down()

		// The examples' own verdicts on the lab's timing: a lagging
		// run measures the machine's load, not the endpoint.
		b.ReportMetric(bwLag+latLag, "runs-lagging")
		b.ReportMetric(exGbps/perfGbps, "goodput-ratio")
		b.ReportMetric(exGbps/inGbps, "inlab-ratio")
		b.ReportMetric(exGbps, "example-Gb/s")
		b.ReportMetric(perfGbps, "perf-Gb/s")
		b.ReportMetric(inGbps, "inlab-Gb/s")
		b.ReportMetric(exLat/perfLat, "lat-ratio")
		b.ReportMetric(exLat/inLat.Micros(), "inlab-lat-ratio")
		b.ReportMetric(exLat, "example-us")
		b.ReportMetric(perfLat, "perf-us")
		b.ReportMetric(inLat.Micros(), "inlab-us")
	}
}

type benchLab struct {
	l    *live.Lab
	dir  string
	name string
}

func upBench(b testing.TB, builtin, tag string) *benchLab {
	b.Helper()
	src, err := os.ReadFile(filepath.Join("../../labs/examples", builtin+".yaml"))
	if err != nil {
		b.Fatal(err)
	}
	name := fmt.Sprintf("%s%d", tag, os.Getpid()%100000)
	file := filepath.Join(b.TempDir(), "lab.yaml")
	os.WriteFile(file, bytes.Replace(src, []byte("name: "+builtin), []byte("name: "+name), 1), 0o644)
	lab, err := labs.Load(file)
	if err != nil {
		b.Fatal(err)
	}
	eng, err := live.NewLabEngine(lab, live.EngineConfig{MaxRate: live.DefaultMaxRate})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	l, err := live.Up(context.Background(), name, eng, live.Options{RunDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	bl := &benchLab{l: l, dir: dir, name: name}
	b.Cleanup(bl.down)
	return bl
}

func (bl *benchLab) down() {
	if bl.l != nil {
		bl.l.Close()
		bl.l = nil
	}
}

// inLab runs spec on the lab's NICs inside its loop and waits for it.
func (bl *benchLab) inLab(b testing.TB, spec workload.Spec) *workload.Result {
	b.Helper()
	vh := bl.l.Engine().(live.VerbsHost)
	st := bl.l.State()
	cl := &workload.Cluster{Name: bl.name, Loop: bl.l.Pacer().Loop()}
	for i, h := range st.Hosts {
		cl.Hosts = append(cl.Hosts, h.Name)
		cl.NICs = append(cl.NICs, vh.NIC(i))
	}
	spec.Transport = transport.MetaRoCE
	done := make(chan *workload.Result, 1)
	var serr error
	if err := bl.l.Pacer().Do(context.Background(), func(sim.Time) {
		serr = workload.Start(cl, spec, func(r *workload.Result, err error) {
			if err != nil {
				b.Errorf("in-lab %s: %v", spec.Name, err)
			}
			done <- r
		})
	}); err != nil || serr != nil {
		b.Fatal(err, serr)
	}
	select {
	case r := <-done:
		return r
	case <-time.After(2 * time.Minute):
		b.Fatalf("in-lab %s did not finish", spec.Name)
	}
	return nil
}

// pair runs prog --listen on srv and prog --to SRV args on cli; it
// returns the client's output.
func (bl *benchLab) pair(b testing.TB, bin, srv, cli, prog string, args ...string) string {
	b.Helper()
	st := bl.l.State()
	h, _ := st.Host(srv)
	s := exec.Command(filepath.Join(bin, prog), "--listen")
	out, _ := s.StdoutPipe()
	if err := live.Exec(bl.dir, bl.name, srv, s); err != nil {
		b.Fatal(err)
	}
	defer func() { s.Process.Kill(); s.Wait() }()
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.Contains(sc.Text(), "listening") {
		b.Fatalf("%s server said %q", prog, sc.Text())
	}
	c := exec.Command(filepath.Join(bin, prog), append([]string{"--to", h.Addr}, args...)...)
	var co bytes.Buffer
	c.Stdout, c.Stderr = &co, &co
	if err := live.Exec(bl.dir, bl.name, cli, c); err != nil {
		b.Fatal(err)
	}
	if err := c.Wait(); err != nil || !strings.Contains(co.String(), "data verified") {
		b.Fatalf("%s client: %v\n%s", prog, err, co.String())
	}
	return co.String()
}

// lagged is 1 if an example said the lab could not keep real time.
func lagged(out string) float64 {
	if strings.Contains(out, "LAGGING") {
		return 1
	}
	return 0
}

// perf runs mrlab perf on the lab and returns what it printed.
func (bl *benchLab) perf(b *testing.B, bin string, args ...string) string {
	b.Helper()
	cmd := exec.Command(filepath.Join(bin, "mrlab"), append([]string{"perf", "--run-dir", bl.dir, "--lab", bl.name, "--allow-lag"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("mrlab perf: %v\n%s", err, out)
	}
	return string(out)
}

// column reads field idx of the line below the perftest-style header
// that contains marker.
func column(b *testing.B, out, marker string, idx int) float64 {
	b.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, marker) && i+1 < len(lines) {
			if f := strings.Fields(lines[i+1]); idx < len(f) {
				if v, err := strconv.ParseFloat(f[idx], 64); err == nil {
					return v
				}
			}
		}
	}
	b.Fatalf("no value %d under %q in:\n%s", idx, marker, out)
	return 0
}
