package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/labs/hostns"
	"github.com/mrlab/mrlab/labs/live"
)

// mrlab runs the CLI in-process and returns its exit status and output.
func mrlab(args ...string) (code int, stdout, stderr string) {
	var o, e strings.Builder
	code = run(append([]string{"mrlab"}, args...), &o, &e)
	return code, o.String(), e.String()
}

// idleDevice is a Device with no kernel behind it: reads block until Close,
// writes vanish. It lets a real lab engine run without root.
type idleDevice struct {
	once   sync.Once
	closed chan struct{}
}

func newIdleDevice() *idleDevice { return &idleDevice{closed: make(chan struct{})} }

func (d *idleDevice) Read([][]byte, []int, int) (int, error) {
	<-d.closed
	return 0, os.ErrClosed
}
func (d *idleDevice) Write(b [][]byte, _ int) (int, error) { return len(b), nil }
func (d *idleDevice) BatchSize() int                       { return 1 }
func (d *idleDevice) MTU() int                             { return 1500 }
func (d *idleDevice) Close() error {
	d.once.Do(func() { close(d.closed) })
	return nil
}

// upOnDevices runs the mini lab's real fabric and NICs in this process on
// idle devices, with its control socket in a temporary run directory.
func upOnDevices(t *testing.T) (dir, name string) {
	t.Helper()
	lab, err := labs.Load("../../labs/live/testdata/mini.yaml")
	if err != nil {
		t.Fatal(err)
	}
	name = fmt.Sprintf("cli%d", os.Getpid()%100000)
	eng, err := live.NewLabEngine(lab, live.EngineConfig{MaxRate: live.DefaultMaxRate, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	var devs []live.Device
	for range eng.Hosts() {
		devs = append(devs, newIdleDevice())
	}
	dir = t.TempDir()
	l, err := live.Up(context.Background(), name, eng, live.Options{RunDir: dir, Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return dir, name
}

func TestUpBadLabFile(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("name: bad\ntopology:\n  leafspine: {planes: -1}\nbogus: 1\n"), 0o644)
	code, _, stderr := mrlab("up", "--run-dir", t.TempDir(), bad)
	if code == 0 {
		t.Fatal("up of a bad lab file succeeded")
	}
	if !strings.Contains(stderr, bad+":") {
		t.Errorf("error does not name the file and line:\n%s", stderr)
	}
	if code, _, stderr := mrlab("up", "--run-dir", t.TempDir(), "no-such-lab"); code == 0 || !strings.Contains(stderr, "no-such-lab") {
		t.Errorf("up of an unknown lab: code %d, %s", code, stderr)
	}
	if code, _, stderr := mrlab("up", "--run-dir", t.TempDir(), "--max-rate", "fast", "leafspine"); code != 2 {
		t.Errorf("up --max-rate fast: code %d (want 2), %s", code, stderr)
	}
	// The metrics endpoint is loopback only; checked before root is.
	for _, tc := range [][]string{
		{"--metrics", "0.0.0.0:9464", "loopback"},
		{"--metrics", "localhost:9464", "loopback"},
		{"--metrics", "127.0.0.1", "missing port"},
		{"--telemetry-interval", "1ms", "at least 10ms"},
		{"--impair", "nope:ab=loss 1%", "--impair"},
		{"--impair", "h0-p0:up=loss 1%", `direction "up"`},
		{"--fault", "2ms link nope down", "--fault"},
	} {
		code, _, stderr := mrlab("up", "--run-dir", t.TempDir(), tc[0], tc[1], "leafspine")
		if code != 2 || !strings.Contains(stderr, tc[2]) {
			t.Errorf("up %s %s: code %d (want 2), %q (want %q)", tc[0], tc[1], code, stderr, tc[2])
		}
	}
}

// TestClientCommandsAgainstARunningLab drives status, fault, exec and down
// against a lab running in this process (real fabric, idle devices).
func TestClientCommandsAgainstARunningLab(t *testing.T) {
	dir, name := upOnDevices(t)
	rd := []string{"--run-dir", dir}

	code, out, errs := mrlab(append([]string{"status"}, rd...)...)
	if code != 0 || !strings.Contains(out, name) || !strings.Contains(out, "h3") {
		t.Fatalf("status: code %d\n%s%s", code, out, errs)
	}
	// The loop's policy in force and how it waits, with why (spinLine:
	// before, until or after each event, as its wake-ups measure).
	for _, want := range []string{"loop priority:", "SCHED_", "loop spin:", "each event"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = mrlab(append([]string{"status", "--json"}, rd...)...)
	if code != 0 || !strings.Contains(out, `"hosts"`) || !strings.Contains(out, `"loop_priority"`) || !strings.Contains(out, `"loop_spin"`) {
		t.Errorf("status --json: code %d\n%s", code, out)
	}

	// Faults: good ones succeed and show in status; bad ones fail with a
	// clear message and a non-zero exit, the lab untouched.
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"fault", "link", "p0-leaf0-spine1", "down"}, 0, "p0-leaf0-spine1 down"},
		{[]string{"fault", "link", "p0-leaf9-spine9", "down"}, 1, `no link "p0-leaf9-spine9"`},
		{[]string{"fault", "link", "h0-p0", "impair", "loss", "1%", "delay", "20us"}, 0, "impair"},
		{[]string{"fault", "link", "h0-p0", "impair", "loss", "banana"}, 1, "banana"},
		{[]string{"fault", "link", "h0-p0", "sideways"}, 2, "unknown action"},
		{[]string{"fault", "switch", "p1-spine0", "down"}, 0, "p1-spine0 down"},
		{[]string{"fault", "switch", "nope", "down"}, 1, `no switch "nope"`},
		{[]string{"fault", "plane", "1", "down"}, 0, "plane 1 down"},
		{[]string{"fault", "plane", "5", "down"}, 1, "plane"},
		{[]string{"fault", "plane", "x", "down"}, 2, "plane number"},
		{[]string{"fault", "plane", "-1", "down"}, 2, `fault plane "-1": want a plane number`},
		{[]string{"fault", "link", "h0-p0", "impair", ""}, 2, "want netem parameters"},
		{[]string{"fault", "link", "h0-p0", "impair"}, 2, "want netem parameters"},
		{[]string{"fault", "plane", "1", "up"}, 0, "plane 1 up"},
		{[]string{"fault", "link", "h1-p0:ab", "impair", "delay", "10ms", "2ms", "25%"}, 0, "h1-p0:ab impair delay 10ms 2ms 25%"},
		{[]string{"fault", "link", "h1-p1", "impair", "loss", "1%", "dir", "ba"}, 0, "h1-p1:ba impair loss 1%"},
		{[]string{"fault", "link", "h1-p1:ab", "impair", "loss", "1%", "dir", "ba"}, 2, "two directions"},
		{[]string{"fault", "link", "h1-p1:up", "impair", "loss", "1%"}, 2, `unknown direction "up"`},
		{[]string{"fault", "link", "h1-p1:ab", "down"}, 2, "both directions"},
		{[]string{"fault", "link", "h1-p1:both", "impair", "loss", "2%"}, 0, "h1-p1 impair loss 2%"},
		{[]string{"fault", "link", "h1-p1:ba", "impair", "delay", "1ms"}, 0, "h1-p1:ba impair delay 1ms"},
		{[]string{"fault", "plane", "1", "down", "--lab", name}, 0, "plane 1 down"},
		{[]string{"fault", "plane", "1", "up"}, 0, "plane 1 up"},
	} {
		args := append(append([]string{tc.args[0], tc.args[1]}, rd...), tc.args[2:]...)
		code, out, errs := mrlab(args...)
		if code != tc.code || !strings.Contains(out+errs, tc.want) {
			t.Errorf("mrlab %s: code %d (want %d), output %q (want %q)", strings.Join(tc.args, " "), code, tc.code, out+errs, tc.want)
		}
	}
	code, out, _ = mrlab(append([]string{"status"}, rd...)...)
	if code != 0 || !strings.Contains(out, "DOWN") || !strings.Contains(out, "loss") {
		t.Errorf("status after faults lacks the down link or the impairment:\n%s", out)
	}
	// Each direction's impairment as set, in status and in the fabric.
	st := labStatus(t, dir, name)
	for _, k := range st.Engine.Links {
		want := map[string]string{"h0-p0": "delay 20us loss random 1%", "h1-p0": "ab: delay 10ms 2ms 25%", "h1-p1": "ab: loss random 2%; ba: delay 1ms"}[k.Name]
		if k.Impair != want {
			t.Errorf("status: link %s impair %q, want %q", k.Name, k.Impair, want)
		}
	}

	// exec on an unknown host.
	code, _, errs = mrlab(append(append([]string{"exec"}, rd...), "h99", "--", "true")...)
	if code == 0 || !strings.Contains(errs, `no host "h99"`) {
		t.Errorf("exec on unknown host: code %d, %s", code, errs)
	}
	// perf with a bad op is a usage error before the lab is asked.
	code, _, errs = mrlab(append(append([]string{"perf"}, rd...), "--from", "h0", "--to", "h2", "--op", "jump")...)
	if code != 2 {
		t.Errorf("perf --op jump: code %d, %s", code, errs)
	}

	// The lab still answers after all the bad requests; then down, which
	// removes the lab's log (a background lab's; this one has none, so
	// one is planted).
	if code, _, errs := mrlab(append([]string{"status"}, rd...)...); code != 0 {
		t.Fatalf("status after bad requests: %s", errs)
	}
	if err := os.WriteFile(live.LogPath(dir, name), []byte("log\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := mrlab(append([]string{"down"}, rd...)...); code != 0 || !strings.Contains(out, "down") {
		t.Fatalf("down: code %d %s%s", code, out, errs)
	}
	if _, err := os.Stat(live.LogPath(dir, name)); !os.IsNotExist(err) {
		t.Errorf("the lab's log after down: %v", err)
	}
	if _, err := os.Stat(live.StatePath(dir, name)); !os.IsNotExist(err) {
		t.Errorf("state file after down: %v", err)
	}
	if code, _, errs := mrlab(append([]string{"down"}, rd...)...); code == 0 {
		t.Errorf("second down succeeded: %s", errs)
	}
}

// TestObservabilityCommands watches a lossy MetaRoCE perf run on a lab
// running in this process (real fabric and NICs, idle devices) with the
// client commands: trace streams loss reactions, top --once shows the
// connection, status names the metrics endpoint, which serves Prometheus
// text with the lab's metrics.
// topConn matches mrlab top's row of the h0->h2 MetaRoCE connection (live
// labs number connections from a random base).
var topConn = regexp.MustCompile(`h0 h2 \d+ metaroce`)

func TestObservabilityCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a perf run in real time")
	}
	dir, labName := upOnDevices(t)
	rd := []string{"--run-dir", dir}
	if code, _, errs := mrlab(append(append([]string{"fault", "link"}, rd...), "h0-p0", "impair", "loss", "2%")...); code != 0 {
		t.Fatalf("fault: %s", errs)
	}
	code, out, errs := mrlab(append([]string{"status"}, rd...)...)
	m := regexp.MustCompile(`metrics:\s+(http://127\.0\.0\.1:\d+/metrics)`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("status names no metrics endpoint: code %d\n%s%s", code, out, errs)
	}
	metricsURL := m[1]

	type result struct {
		code      int
		out, errs string
	}
	run := func(args ...string) chan result {
		ch := make(chan result, 1)
		go func() {
			code, out, errs := mrlab(args...)
			ch <- result{code, out, errs}
		}()
		return ch
	}
	trace := run(append(append([]string{"trace"}, rd...), "--filter", "host=h0", "--duration", "2500ms")...)
	time.Sleep(200 * time.Millisecond) // let the trace subscribe
	// The transport run to watch: the lab's own workload over its control
	// socket (mrlab perf needs namespaces for its two sides, and this lab
	// has none).
	perf := make(chan result, 1)
	go func() {
		cl, err := live.Dial(dir, labName)
		if err != nil {
			perf <- result{1, "", err.Error()}
			return
		}
		r, err := cl.Perf(context.Background(), live.PerfRequest{From: "h0", To: "h2", Op: "write", Size: 64 << 10,
			Duration: 1500 * time.Millisecond, Depth: 16, Verify: true})
		// A loaded machine may make the lab lag, which the run reports as
		// its status (perf's --allow-lag): this test is about watching it.
		if err != nil || r.Errors > 0 || (r.Status != "ok" && r.Status != r.Timing.Verdict()) {
			perf <- result{1, "", fmt.Sprintf("%v %+v", err, r)}
			return
		}
		perf <- result{0, fmt.Sprintf("verified: %v", r.Verified), ""}
	}()
	// top while the run is on: the connection is there, by name.
	var top string
	for deadline := time.Now().Add(1400 * time.Millisecond); ; time.Sleep(100 * time.Millisecond) {
		code, out, errs := mrlab(append([]string{"top"}, append(rd, "--once", "-n", "3")...)...)
		if code != 0 {
			t.Fatalf("top --once: code %d: %s", code, errs)
		}
		top = squash(out)
		if topConn.MatchString(top) || time.Now().After(deadline) {
			break
		}
	}
	if !topConn.MatchString(top) || !strings.Contains(top, "Busiest paths") || !strings.Contains(top, "h0-p0:AtoB") {
		t.Errorf("top --once during the run lacks the h0->h2 connection or h0's link:\n%s", top)
	}
	p := <-perf
	if p.code != 0 || !strings.Contains(squash(p.out), "verified: true") {
		t.Fatalf("perf: code %d\n%s%s", p.code, p.out, p.errs)
	}
	tr := <-trace
	if tr.code != 0 {
		t.Fatalf("trace: code %d: %s", tr.code, tr.errs)
	}
	lines := strings.Split(strings.TrimSpace(tr.out), "\n")
	decision := regexp.MustCompile(`^t=\S+ h0->h2 conn \d+ path \d+:? .*(retransmit|tail-loss probe|RTO|SACK hole)`)
	n := 0
	for _, l := range lines {
		if decision.MatchString(l) {
			n++
		}
	}
	if n == 0 {
		t.Errorf("trace of a lossy run has no loss reaction in %d lines:\n%s", len(lines), strings.Join(lines[:min(10, len(lines))], "\n"))
	}
	t.Logf("trace: %d lines, %d loss reactions", len(lines), n)

	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `mrlab_link_transmit_bytes_total{direction="AtoB",lab="`+labName+`",link="h0-p0"}`) {
		t.Errorf("GET %s: %s\n%.500s", metricsURL, resp.Status, body)
	}
	// A bad trace filter is a usage error, before the lab is asked.
	if code, _, errs := mrlab(append(append([]string{"trace"}, rd...), "--filter", "path=x")...); code != 2 {
		t.Errorf("trace --filter path=x: code %d: %s", code, errs)
	}
}

func TestNoLabRunning(t *testing.T) {
	rd := []string{"--run-dir", t.TempDir()}
	for _, cmd := range [][]string{{"status"}, {"down"}, {"exec", "h0", "--", "true"}, {"fault", "link", "x", "down"}} {
		args := append(append([]string{cmd[0]}, rd...), cmd[1:]...)
		if cmd[0] == "fault" {
			args = append(append([]string{"fault", "link"}, rd...), "x", "down")
		}
		code, _, errs := mrlab(args...)
		if code == 0 || !strings.Contains(errs, "no lab is running") {
			t.Errorf("mrlab %v with no lab: code %d, %q", cmd, code, errs)
		}
	}
}

// TestLiveCLI is the whole CLI as a user runs it, as root: build mrlab, up
// the lab in the background, ping across leaves with exec, refuse a second
// up and bad faults, down, and check nothing is left.
func TestLiveCLI(t *testing.T) {
	testenv.RequireNamespaces(t)
	before, err := hostns.TakeSnapshot(nil)
	if err != nil {
		t.Fatal(err)
	}
	lb := newCLILab(t, "cli")
	bin, dir, name, lab := lb.bin, lb.dir, lb.name, lb.file
	sh := func(args ...string) (int, string) { return lb.sh(t, args...) }
	// A what-if on up: one direction of a link no test here uses.
	// --partitions 2: planned by sim's rule (by plane), run on one, and
	// said so in status (labs/live/partition.go).
	if code, out := sh("up", "--partitions", "2", "--impair", "h3-p1:ba=delay 1ms", lab); code != 0 {
		t.Fatalf("up: %d\n%s", code, out)
	}
	if code, out := sh("up", lab); code == 0 || !strings.Contains(out, "already running") {
		t.Errorf("second up: code %d\n%s", code, out)
	}
	t.Run("exec ping", func(t *testing.T) {
		testenv.RequireCommand(t, "ping")
		code, out := sh("exec", "h0", "--", "ping", "-c", "3", "-i", "0.2", "-W", "2", "198.18.1.1")
		if code != 0 || !strings.Contains(out, "3 received") {
			t.Errorf("exec ping: code %d\n%s", code, out)
		}
	})
	t.Run("directional netem", func(t *testing.T) {
		// tc's netem on one interface delays one direction: delay 10ms
		// 2ms on h0's uplinks (both planes: ping may take either) adds
		// 8..12 ms to each echo request and nothing to its reply; the
		// same on the way back too doubles it.
		testenv.RequireCommand(t, "ping")
		median := func() float64 {
			_, out := sh("exec", "h0", "--", "ping", "-c", "9", "-i", "0.1", "-W", "2", "198.18.1.1")
			var rtts []float64
			for _, m := range regexp.MustCompile(`time=([0-9.]+) ms`).FindAllStringSubmatch(out, -1) {
				v, _ := strconv.ParseFloat(m[1], 64)
				rtts = append(rtts, v)
			}
			if len(rtts) < 5 {
				t.Fatalf("ping: %d replies of 9\n%s", len(rtts), out)
			}
			slices.Sort(rtts)
			return rtts[len(rtts)/2]
		}
		for _, k := range []string{"h0-p0:ab", "h0-p1:ab"} {
			if code, out := sh("fault", "link", k, "impair", "delay", "10ms", "2ms", "25%"); code != 0 || !strings.Contains(out, k+" impair delay 10ms") {
				t.Fatalf("fault link %s impair: code %d\n%s", k, code, out)
			}
		}
		one := median()
		for _, k := range []string{"h0-p0", "h0-p1"} {
			if code, out := sh("fault", "link", k, "impair", "delay", "10ms", "2ms", "25%", "dir", "ba"); code != 0 {
				t.Fatalf("fault link %s impair ... dir ba: code %d\n%s", k, code, out)
			}
		}
		both := median()
		for _, k := range []string{"h0-p0", "h0-p1"} {
			sh("fault", "link", k, "impair", "none")
		}
		t.Logf("ping h0 -> h2 median RTT: %.2f ms with delay 10ms 2ms 25%% one way, %.2f ms both ways (load %s)", one, both, loadavg())
		if one < 8 || one > 14 {
			t.Errorf("one direction delayed 10ms±2ms: median RTT %.2f ms, want 8..14", one)
		}
		if both < 16 || both > 26 {
			t.Errorf("both directions delayed 10ms±2ms: median RTT %.2f ms, want 16..26", both)
		}
		st := labStatus(t, dir, name)
		for _, k := range st.Engine.Links {
			if want := map[string]string{"h3-p1": "ba: delay 1ms"}[k.Name]; k.Impair != want {
				t.Errorf("status: link %s impair %q, want %q (up --impair h3-p1:ba; h0's cleared)", k.Name, k.Impair, want)
			}
		}
	})
	code, out := sh("exec", "h0", "--", "sh", "-c", "exit 7")
	if code != 7 {
		t.Errorf("exec exit status: got %d, want 7\n%s", code, out)
	}
	if code, out := sh("fault", "link", "p0-leaf9-spine0", "down"); code == 0 || !strings.Contains(out, "no link") {
		t.Errorf("fault on unknown link: code %d\n%s", code, out)
	}
	if code, out := sh("exec", "h9", "--", "true"); code == 0 || !strings.Contains(out, "no host") {
		t.Errorf("exec on unknown host: code %d\n%s", code, out)
	}
	if code, out := sh("status"); code != 0 || !strings.Contains(out, live.NamespaceName(name, "h3")) ||
		!strings.Contains(squash(out), "partitions: 1 running (asked 2: 2 partition(s) by plane") || !strings.Contains(out, "partitioned live pacing is not built") {
		t.Errorf("status: code %d (want the partitions asked, planned and running, and why)\n%s", code, out)
	}
	// Watch a MetaRoCE run with loss: trace, top and the metrics endpoint
	// status --json names.
	code, out = sh("status", "--json")
	var st struct {
		Metrics string `json:"metrics"`
	}
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || !strings.HasPrefix(st.Metrics, "http://127.0.0.1:") {
		t.Fatalf("status --json: code %d, metrics %q (%v)\n%s", code, st.Metrics, err, out)
	}
	if code, out := sh("fault", "link", "h0-p0", "impair", "loss", "2%"); code != 0 {
		t.Fatalf("impair: %d\n%s", code, out)
	}
	traced := make(chan string, 1)
	go func() { _, out := sh("trace", "-d", "2500ms"); traced <- out }()
	time.Sleep(200 * time.Millisecond)
	perfed := make(chan string, 1)
	go func() {
		// perf's two sides run in h0 and h2 on their verbs endpoints; a
		// loaded machine may make the lab lag, which perf reports (and
		// --allow-lag accepts): this test is about watching the run.
		code, out := sh("perf", "--from", "h0", "--to", "h2", "--duration", "1500ms", "--allow-lag")
		perfed <- fmt.Sprintf("code %d\n%s", code, out)
	}()
	// top during the run (retried: the connection shows from the first
	// telemetry sample after it is established).
	var top string
	for deadline := time.Now().Add(1300 * time.Millisecond); ; time.Sleep(150 * time.Millisecond) {
		code, out := sh("top", "--once")
		if code != 0 {
			t.Fatalf("top --once: code %d\n%s", code, out)
		}
		if top = squash(out); topConn.MatchString(top) || time.Now().After(deadline) {
			break
		}
	}
	if !topConn.MatchString(top) {
		t.Errorf("top --once during perf lacks the connection:\n%s", top)
	}
	if out := <-perfed; !strings.HasPrefix(out, "code 0") || !strings.Contains(squash(out), "data: every byte") {
		t.Errorf("perf: %s", out)
	}
	if code, out := sh("perf", "--from", "h0", "--to", "h2", "--op", "write_lat", "--count", "200", "--transport", "rocev2", "--allow-lag"); code != 0 ||
		!strings.Contains(out, "t_typical[usec]") || !strings.Contains(squash(out), "data: every byte") {
		t.Errorf("perf --op write_lat: code %d\n%s", code, out)
	}
	if out := <-traced; !regexp.MustCompile(`(?m)^t=\S+ h0->h2 conn \d+ path \d+:? .*(retransmit|tail-loss probe|RTO|SACK hole)`).MatchString(out) ||
		!strings.Contains(out, "fabric: drop (fcs-error) at h0-p0") {
		t.Errorf("trace of a lossy run lacks loss reactions or drops:\n%.2000s", out)
	}
	t.Run("ctrl-c frees the lab", func(t *testing.T) {
		// Ctrl-C on a long perf run ends both its sides: within a second
		// the lab lists no verbs client (it freed what they held), and the
		// next perf between the same hosts runs.
		verbsClients := func() int {
			st := labStatus(t, dir, name)
			n := 0
			for _, h := range st.Hosts {
				n += len(h.Verbs)
			}
			return n
		}
		long := exec.Command(bin, "perf", "--from", "h0", "--to", "h2", "--duration", "60s")
		long.Env = append(os.Environ(), "MRLAB_RUN_DIR="+dir)
		var lout strings.Builder
		long.Stdout, long.Stderr = &lout, &lout
		if err := long.Start(); err != nil {
			t.Fatal(err)
		}
		// Until both sides are the lab's verbs clients.
		for i := 0; verbsClients() < 2; i++ {
			if i == 100 {
				long.Process.Kill()
				long.Wait()
				t.Fatalf("the long run never started:\n%s", lout.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		long.Process.Signal(os.Interrupt)
		long.Wait()
		freed := time.Now()
		for verbsClients() != 0 {
			if time.Since(freed) > time.Second {
				t.Fatalf("the lab still lists verbs clients a second after Ctrl-C on perf:\n(interrupted run: %s)", lout.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("lab free %v after Ctrl-C", time.Since(freed))
		if !strings.Contains(lout.String(), "interrupted") {
			t.Errorf("interrupted perf does not say so:\n%s", lout.String())
		}
		if code, out := sh("perf", "--from", "h0", "--to", "h2", "-n", "5", "--allow-lag"); code != 0 {
			t.Errorf("perf after Ctrl-C: code %d\n%s", code, out)
		}
	})
	t.Run("scripts", func(t *testing.T) {
		// The fault scripts users copy, on this lab, briefly.
		script := func(name string, env ...string) (int, string) {
			cmd := exec.Command("bash", filepath.Join("..", "..", "scripts", name))
			cmd.Env = append(append(os.Environ(), "MRLAB_RUN_DIR="+dir, "MRLAB="+bin, "ALLOW_LAG=1", "FROM=h0", "TO=h2"), env...)
			out, err := cmd.CombinedOutput()
			if ee, ok := err.(*exec.ExitError); ok {
				return ee.ExitCode(), string(out)
			}
			if err != nil {
				t.Fatal(err)
			}
			return 0, string(out)
		}
		// Every plane's host link by default: a single-path transport is
		// lossy on whichever plane its connection uses.
		code, out := script("loss-ramp.sh", "LOSSES=0% 1%", "DURATION=300ms")
		if code != 0 || !strings.Contains(out, "# lossy links: h0-p0 h0-p1") || !regexp.MustCompile(`(?m)^1%\s+[0-9.]+`).MatchString(out) {
			t.Errorf("loss-ramp.sh: code %d\n%s", code, out)
		}
		code, out = script("flap-spine.sh", "DURATION=1s", "PERIOD=0.1", "LINK=p0-leaf0-spine0")
		if code != 0 || !regexp.MustCompile(`every [0-9.]+s on average \(asked 0.1s\)`).MatchString(out) {
			t.Errorf("flap-spine.sh: code %d\n%s", code, out)
		}
		code, out = script("plane-drill.sh", "DURATION=1500ms", "BEFORE=0.3", "HOLD=0.5", "PLANE=1")
		before, after, _ := strings.Cut(out, "status after the drill")
		if code != 0 || !strings.Contains(before, "status before the drill") || strings.Count(before, "uptime:") != 1 || strings.Count(after, "uptime:") != 1 {
			t.Errorf("plane-drill.sh: code %d, want a status before and one after\n%s", code, out)
		}
	})
	resp, err := http.Get(st.Metrics)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `mrlab_link_transmit_bytes_total{direction="AtoB",lab="`+name+`",link="h0-p0"}`) {
		t.Errorf("GET %s: %s\n%.500s", st.Metrics, resp.Status, body)
	}
	if code, out := sh("down"); code != 0 {
		t.Fatalf("down: code %d\n%s", code, out)
	}
	for _, h := range []string{"h0", "h1", "h2", "h3"} {
		if hostns.Exists(live.NamespaceName(name, h)) {
			t.Errorf("namespace of %s left after down", h)
		}
	}
	t.Run("lagging lab", func(t *testing.T) {
		// b2b at its file's 100 Gbit/s (--max-rate 0) cannot keep real
		// time once a client posts 1 MiB WRITEs (each one request for
		// 256 packets, so the client outruns the loop): perf says so on
		// its first line and exits non-zero, and --allow-lag accepts the
		// figures, still saying so.
		src, err := labs.Source("b2b")
		if err != nil {
			t.Fatal(err)
		}
		lname := fmt.Sprintf("lag%d", os.Getpid()%100000)
		lfile := filepath.Join(t.TempDir(), "b2b.yaml")
		if err := os.WriteFile(lfile, []byte(strings.Replace(string(src), "name: b2b", "name: "+lname, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		if code, out := sh("up", "--max-rate", "0", lfile); code != 0 {
			t.Fatalf("up --max-rate 0: %d\n%s", code, out)
		}
		defer sh("down", lname)
		code, out := sh("perf", "--lab", lname, "--from", "h0", "--to", "h1", "--duration", "300ms", "--size", "1MiB")
		first, _, _ := strings.Cut(out, "\n")
		if code == 0 || !strings.HasPrefix(first, "LAGGING: the lab fell up to ") {
			t.Errorf("perf on a lagging lab: code %d, first line %q\n%s", code, first, out)
		}
		code, out = sh("perf", "--lab", lname, "--from", "h0", "--to", "h1", "--duration", "200ms", "--size", "1MiB", "--allow-lag")
		if code != 0 || !strings.HasPrefix(out, "LAGGING") || !strings.Contains(squash(out), "data: every byte") {
			t.Errorf("perf --allow-lag on a lagging lab: code %d\n%s", code, out)
		}
		// loss-ramp's default on a back-to-back lab: its one link.
		ramp := exec.Command("bash", filepath.Join("..", "..", "scripts", "loss-ramp.sh"))
		ramp.Env = append(os.Environ(), "MRLAB_RUN_DIR="+dir, "MRLAB="+bin, "ALLOW_LAG=1", "LAB="+lname, "LOSSES=0%", "DURATION=100ms", "TRANSPORT=rocev2")
		if out, err := ramp.CombinedOutput(); err != nil || !strings.Contains(string(out), "# lossy links: p0-h0-h1") {
			t.Errorf("loss-ramp.sh on b2b: %v\n%s", err, out)
		}
		if code, out := sh("down", lname); code != 0 {
			t.Errorf("down %s: %d\n%s", lname, code, out)
		}
	})
	after, err := hostns.TakeSnapshot(nil)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("root namespace changed:\nbefore %v\nafter  %v", before, after)
	}
}

// loadavg is the machine's load average, for timing figures in logs.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// labStatus is the status of live lab name (run directory dir) over its
// control socket.
func labStatus(t *testing.T, dir, name string) live.Status {
	t.Helper()
	cl, err := live.Dial(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	st, err := cl.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestStatusShowsKernelLooks: status says how the loop read the hosts'
// kernels (rounds that found packets, looks cut by their budget), in its
// text and its JSON, with the loop's own counts.
func TestStatusShowsKernelLooks(t *testing.T) {
	r := statusReport(live.Status{Lab: "x", Lag: live.LagStats{LookRounds: 12345, LooksCut: 67}}, false)
	var text, js strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kernel read rounds:", "12345", "kernel looks cut:", "67"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("status text lacks %q:\n%s", want, text.String())
		}
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Rounds uint64 `json:"look_rounds"`
		Cut    uint64 `json:"looks_cut"`
	}
	if err := json.Unmarshal([]byte(js.String()), &got); err != nil || got.Rounds != 12345 || got.Cut != 67 {
		t.Errorf("status JSON: rounds %d, cut %d (want 12345, 67), %v:\n%s", got.Rounds, got.Cut, err, js.String())
	}
}
