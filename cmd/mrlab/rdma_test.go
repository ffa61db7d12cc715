package main

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/labs/live"
)

// rdmaJSON runs an RDMA sim and decodes its one JSON object.
func rdmaJSON(t *testing.T, args ...string) simResults {
	t.Helper()
	code, out, errs := runCLI(t, append([]string{"sim", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("sim %v: exit %d: %s", args, code, errs)
	}
	var r simResults
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("sim %v: not one JSON object: %v\n%s", args, err, out)
	}
	return r
}

// TestSimCompare runs the default comparison (shortened): both transports
// run on the same lab, verify their data, and report the same packet trace
// for the same seed and another for another seed.
func TestSimCompare(t *testing.T) {
	args := []string{"leafspine", "-n", "40", "--trace-hash"}
	a := rdmaJSON(t, args...)
	if len(a.Results) != 2 || a.Results[0].Transport != "metaroce" || a.Results[1].Transport != "rocev2" {
		t.Fatalf("results %+v", a.Results)
	}
	for _, r := range a.Results {
		if !r.Check.OK || r.Errors != 0 || r.Messages != 8*40 {
			t.Errorf("%s: check %+v, %d errors, %d messages (want 320)", r.Transport, r.Check, r.Errors, r.Messages)
		}
	}
	if len(a.TraceHashes) != 2 || a.TraceHashes["metaroce"] == a.TraceHashes["rocev2"] {
		t.Errorf("trace hashes %v", a.TraceHashes)
	}
	b := rdmaJSON(t, args...)
	if a.TraceHashes["metaroce"] != b.TraceHashes["metaroce"] || a.TraceHashes["rocev2"] != b.TraceHashes["rocev2"] {
		t.Errorf("same lab and seed, different traces: %v then %v", a.TraceHashes, b.TraceHashes)
	}
	c := rdmaJSON(t, append(args, "--seed", "2")...)
	if c.TraceHashes["metaroce"] == a.TraceHashes["metaroce"] {
		t.Errorf("seeds 1 and 2 give the same MetaRoCE trace %v", a.TraceHashes["metaroce"])
	}
}

// TestSimWorkloads runs each RDMA workload briefly on the b2b lab or the
// default lab, one transport each, and checks the data.
func TestSimWorkloads(t *testing.T) {
	for _, tc := range []struct {
		workload, transport string
		args                []string
	}{
		{"write_bw", "metaroce", []string{"b2b", "-n", "50"}},
		{"send_bw", "rocev2", []string{"b2b", "-n", "50"}},
		{"read_bw", "metaroce", []string{"b2b", "-n", "50"}},
		{"write_lat", "metaroce", []string{"b2b", "-n", "50", "--size", "8"}},
		{"incast", "metaroce", []string{"leafspine", "-n", "20"}},
		{"alltoall", "rocev2", []string{"leafspine", "-n", "2", "--size", "262144"}},
		{"allreduce", "metaroce", []string{"leafspine", "-n", "2", "--size", "262144"}},
	} {
		r := rdmaJSON(t, append([]string{"--workload", tc.workload, "--transport", tc.transport}, tc.args...)...)
		if len(r.Results) != 1 {
			t.Fatalf("%s: %d results", tc.workload, len(r.Results))
		}
		res := r.Results[0]
		if res.Transport != tc.transport || string(res.Workload) != tc.workload || !res.Check.OK || res.Errors != 0 || res.Messages == 0 {
			t.Errorf("%s/%s: transport %s, check %+v, %d errors, %d messages", tc.workload, tc.transport, res.Transport, res.Check, res.Errors, res.Messages)
		}
	}
}

// TestSimSlowLink runs MetaRoCE write_bw over a 1 Gbit/s back-to-back link,
// the rate live labs run at: a 4 KiB packet takes 33us per hop there, longer
// than the microsecond-scale RTO floor, and the transport must not time out
// spuriously (it once ran at a tenth of the link with thousands of RTOs).
func TestSimSlowLink(t *testing.T) {
	lab := writeFile(t, "slow.yaml", `name: slow
topology:
  backtoback: {planes: 1}
links:
  default: {rate: 1gbit, delay: 1us, queue: 512KiB}
`)
	r := rdmaJSON(t, lab, "--workload", "write_bw", "--transport", "metaroce", "-n", "100")
	res := r.Results[0]
	if !res.Check.OK || res.Timeouts != 0 || res.GoodputGbps < 0.85 {
		t.Errorf("1 Gbit/s write_bw: %.3f Gb/s, %d timeouts, %d retransmissions, check %+v (want >= 0.85 Gb/s, no timeouts)",
			res.GoodputGbps, res.Timeouts, res.Retransmits, res.Check)
	}
}

// TestPerftestFlags runs perftest's spelling and mrlab's older one of the
// same settings: both land in the same spec. -n counts the pair's
// messages, striped over the -q connections (perftest counts per QP).
func TestPerftestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-s", "8K", "-n", "20", "-t", "8", "-q", "2", "-m", "1024"},
		{"--size", "8KiB", "--iters", "20", "--tx-depth", "8", "--qp", "2", "--mtu", "1024"},
		{"--size", "8192", "--iterations", "20", "--qd", "8", "--conns", "2", "--mtu", "1024"},
	} {
		r := rdmaJSON(t, append([]string{"b2b", "--workload", "write_bw"}, args...)...)
		res := r.Results[0]
		if res.Size != 8192 || res.Iterations != 20 || res.QueueDepth != 8 || res.Conns != 2 || res.Messages != 20 || res.MTU != 1024 {
			t.Errorf("%v: size %d iters %d qd %d conns %d messages %d mtu %d", args, res.Size, res.Iterations, res.QueueDepth, res.Conns, res.Messages, res.MTU)
		}
	}
	// perftest's defaults.
	r := rdmaJSON(t, "b2b", "--workload", "write_lat", "--transport", "rocev2")
	if res := r.Results[0]; res.Size != 2 || res.Latency == nil || res.Latency.N != 1000 {
		t.Errorf("write_lat defaults: size %d, latency %+v", res.Size, res.Latency)
	}
}

// TestPerftestIgnoredFlags runs a perftest command line with flags about
// hardware: it runs, and each such flag is noted once.
func TestPerftestIgnoredFlags(t *testing.T) {
	code, out, errs := runCLI(t, "sim", "b2b", "--workload", "send_bw", "-n", "10", "-F", "-x", "3", "-d", "mlx5_0", "--report_gbits", "-R")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, f := range []string{"--CPU-freq", "--gid-index", "--ib-dev", "--rdma_cm"} {
		if strings.Count(errs, "note: "+f+" ignored") != 1 {
			t.Errorf("stderr notes %s %d times:\n%s", f, strings.Count(errs, f), errs)
		}
	}
	if !strings.Contains(out, "BW peak[Gb/sec]") || !strings.Contains(out, "Send BW Test") {
		t.Errorf("output:\n%s", out)
	}
}

// TestPerftestAll sweeps 2 B to 8 MiB: one perftest line per size under
// one header, and --out_json holds the last size in perftest's keys.
func TestPerftestAll(t *testing.T) {
	js := filepath.Join(t.TempDir(), "out.json")
	code, out, errs := runCLI(t, "sim", "b2b", "--workload", "write_bw", "-a", "-n", "5", "--out_json", "--out_json_file", js)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if strings.Count(out, "BW peak[MiB/sec]") != 1 {
		t.Errorf("want one column header:\n%s", out)
	}
	var sizes []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 5 && f[1] == "5" {
			sizes = append(sizes, f[0])
		}
	}
	if len(sizes) != 23 || sizes[0] != "2" || sizes[22] != "8388608" {
		t.Errorf("sizes %v", sizes)
	}
	data, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results map[string]float64 `json:"results"`
	}
	if err := json.Unmarshal(data, &doc); err != nil || doc.Results["MsgSize"] != 8388608 || doc.Results["BW_average"] <= 0 {
		t.Errorf("out_json %v: %s", err, data)
	}
}

// TestPerftestRunInfinitely prints a line per interval until the
// virtual-time limit.
func TestPerftestRunInfinitely(t *testing.T) {
	code, out, errs := runCLI(t, "sim", "b2b", "--workload", "write_bw", "--run_infinitely", "-D", "1ms", "--timeout", "3ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 5 && f[0] == "65536" && f[2] == "0.00" {
			n++
		}
	}
	if n != 3 || !strings.Contains(out, "WARNING: BW peak won't be measured") || !strings.Contains(out, "local address:") {
		t.Errorf("%d interval lines:\n%s", n, out)
	}
}

// TestPerftestFlagErrors: zero and out-of-range values are usage errors
// naming the flag.
func TestPerftestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-s", "0"}, `--size "0"`},
		{[]string{"-s", "lots"}, `--size "lots"`},
		{[]string{"-n", "0"}, `--iters "0"`},
		{[]string{"-n", "3"}, `--iters "3": want at least 5`},
		{[]string{"-t", "0"}, `--tx-depth "0"`},
		{[]string{"--qd", "0"}, `--tx-depth "0"`},
		{[]string{"-q", "0"}, `--qp "0"`},
		{[]string{"--mtu", "9000"}, `--mtu "9000"`},
		{[]string{"--mtu", "1000"}, `--mtu "1000": want 256, 512`},
		{[]string{"--paths", "300"}, `--paths "300"`},
		{[]string{"--paths", "0"}, `--paths "0"`},
		{[]string{"--streams", "0"}, `--streams "0"`},
		{[]string{"-c", "UD"}, `--connection "UD"`},
		{[]string{"-b"}, "--bidirectional is not supported"},
		{[]string{"-f", "1"}, "--margin needs --duration"},
		{[]string{"-D", "1ms", "-f", "1ms"}, `--margin "1ms"`},
		{[]string{"-D", "0"}, `--duration "0"`},
		{[]string{"-a", "-s", "64K"}, "drop --size"},
	} {
		code, _, errs := runCLI(t, append([]string{"sim", "b2b", "--workload", "write_bw"}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errs, tc.msg)
		}
	}
}

// TestPerfSpelling: live perf takes sim's perftest flags (one spelling),
// keeps its older ones as aliases, and refuses by name what a live lab
// cannot do yet.
func TestPerfSpelling(t *testing.T) {
	read := func(args ...string) (live.PerfRequest, int, string) {
		var req live.PerfRequest
		app := newApp(io.Discard, io.Discard)
		var errb strings.Builder
		app.ErrWriter = &errb
		app.Commands = []*cli.Command{{Name: "perf", Flags: perfFlags(), Action: func(c *cli.Context) (err error) {
			req, _, err = perfRequest(c)
			return err
		}}}
		for _, c := range app.Commands {
			markUsage(c, "mrlab")
		}
		err := app.Run(append([]string{"mrlab", "perf", "--from", "h0", "--to", "h1"}, args...))
		code := 0
		if err != nil {
			code = 1
			var u usageError
			if errors.As(err, &u) {
				code = 2
			}
			errb.WriteString(err.Error())
		}
		return req, code, errb.String()
	}
	for _, tc := range []struct {
		args []string
		want live.PerfRequest
	}{
		{nil, live.PerfRequest{Op: "write", Size: 65536, Count: 5000, Depth: 128}},
		{[]string{"--workload", "send_bw"}, live.PerfRequest{Op: "send", Size: 65536, Count: 1000, Depth: 128}},
		{[]string{"-s", "8K", "-n", "20", "-t", "8"}, live.PerfRequest{Op: "write", Size: 8192, Count: 20, Depth: 8}},
		{[]string{"--op", "read", "--size", "4KiB", "--count", "50", "--depth", "4"}, live.PerfRequest{Op: "read", Size: 4096, Count: 50, Depth: 4}},
		{[]string{"-D", "3"}, live.PerfRequest{Op: "write", Size: 65536, Duration: 3 * time.Second, Depth: 128}},
		{[]string{"--duration", "1500ms"}, live.PerfRequest{Op: "write", Size: 65536, Duration: 1500 * time.Millisecond, Depth: 128}},
		{[]string{"--workload", "write_lat"}, live.PerfRequest{Op: "write_lat", Size: 2, Count: 1000, Depth: 1}},
		{[]string{"--op", "write_lat", "-s", "64", "-D", "1"}, live.PerfRequest{Op: "write_lat", Size: 64, Duration: time.Second, Depth: 1}},
	} {
		got, code, errs := read(tc.args...)
		tc.want.From, tc.want.To, tc.want.Verify = "h0", "h1", true
		if code != 0 || got != tc.want {
			t.Errorf("%v: exit %d %s\n got %+v\nwant %+v", tc.args, code, errs, got, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workload", "send_lat"}, "want write_bw, send_bw, read_bw or write_lat"},
		{[]string{"--workload", "write_lat", "-t", "4"}, "keeps one message in flight"},
		{[]string{"-q", "2"}, "--qp is not supported in a live lab yet"},
		{[]string{"-a"}, "--all is not supported in a live lab yet"},
		{[]string{"-s", "0"}, `--size "0"`},
		{[]string{"-t", "0"}, `--tx-depth "0"`},
		{[]string{"--from", ""}, "--from and --to name the client and the server host"},
	} {
		if _, code, errs := read(tc.args...); code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}

// TestSimPayload: a small lab runs on real bytes unless --payload says
// otherwise, both modes give the same figures, and a bad mode is a usage
// error naming the flag.
func TestSimPayload(t *testing.T) {
	args := []string{"leafspine", "--workload", "write_bw", "--transport", "metaroce", "-n", "50"}
	def := rdmaJSON(t, args...).Results[0]
	syn := rdmaJSON(t, append(args, "--payload", "synthetic")...).Results[0]
	if def.Payload != "bytes" || syn.Payload != "synthetic" {
		t.Errorf("payload %q by default, %q with --payload synthetic", def.Payload, syn.Payload)
	}
	if !syn.Check.OK || syn.Elapsed != def.Elapsed || syn.Messages != def.Messages || syn.PacketsSent != def.PacketsSent {
		t.Errorf("synthetic run differs: check %+v, %v/%v elapsed, %d/%d messages, %d/%d packets",
			syn.Check, syn.Elapsed, def.Elapsed, syn.Messages, def.Messages, syn.PacketsSent, def.PacketsSent)
	}
	code, _, errs := runCLI(t, append([]string{"sim"}, append(args, "--payload", "paper")...)...)
	if code != 2 || !strings.Contains(errs, "--payload") {
		t.Errorf("bad --payload: exit %d, %q", code, errs)
	}
}
