package main

import (
	"encoding/json"
	"testing"
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
