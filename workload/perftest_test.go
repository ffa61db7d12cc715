package workload

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// TestPerftestDefaults checks that the six perftest tests take perftest's
// defaults (perftest_parameters.h: DEF_ITERS_WB, DEF_TX_BW, DEF_SIZE_LAT,
// and the tx depth capped at the iterations).
func TestPerftestDefaults(t *testing.T) {
	for _, tc := range []struct {
		spec                   Spec
		size, iters, qd, cqMod int
	}{
		{Spec{Name: WriteBW}, 65536, 5000, 128, 1},
		{Spec{Name: SendBW}, 65536, 1000, 128, 1},
		{Spec{Name: ReadBW}, 65536, 1000, 128, 1},
		{Spec{Name: WriteBW, Size: 4096}, 4096, 5000, 128, 100},
		{Spec{Name: WriteBW, Size: 4096, QueueDepth: 16}, 4096, 5000, 16, 16},
		{Spec{Name: SendBW, Iterations: 50}, 65536, 50, 50, 1},
		{Spec{Name: WriteLat}, 2, 1000, 1, 1},
		{Spec{Name: SendLat}, 2, 1000, 1, 1},
		{Spec{Name: ReadLat}, 2, 1000, 1, 1},
		{Spec{Name: Permutation}, 65536, 1000, 16, 1},
	} {
		s, err := tc.spec.withDefaults(nil, []string{"h0", "h1"})
		if err != nil {
			t.Fatal(err)
		}
		if s.Size != tc.size || s.Iterations != tc.iters || s.QueueDepth != tc.qd || s.CQMod != tc.cqMod {
			t.Errorf("%s: size %d iters %d qd %d cq_mod %d, want %d %d %d %d", tc.spec.Name,
				s.Size, s.Iterations, s.QueueDepth, s.CQMod, tc.size, tc.iters, tc.qd, tc.cqMod)
		}
	}
	for _, bad := range []Spec{
		{Name: WriteLat, QueueDepth: 2},
		{Name: ReadLat, Conns: 2},
		{Name: WriteBW, Duration: 10, Margin: 5},
	} {
		if _, err := bad.withDefaults(nil, []string{"h0", "h1"}); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// scanPeak is perftest's own O(n^2) search for the peak (print_report_bw),
// the reference for the bisection.
func scanPeak(posted, completed []sim.Time, cqMod int) float64 {
	n := len(posted)
	best := float64(completed[0] - posted[0])
	for i := 0; i < n; i++ {
		for j := (i+cqMod)/cqMod*cqMod - 1; j < n; j += cqMod {
			best = min(best, float64(completed[j]-posted[i])/float64(j-i+1))
		}
		if n%cqMod != 0 {
			j := n - 1
			best = min(best, float64(completed[j]-posted[i])/float64(j-i+1))
		}
	}
	return best
}

// TestPeakMatchesPerftestScan compares the bisection with perftest's scan
// on random runs, with and without CQ moderation.
func TestPeakMatchesPerftestScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		n := 1 + rng.IntN(300)
		qd := 1 + rng.IntN(64)
		cqMod := 1 + rng.IntN(min(qd, 20))
		posted := make([]sim.Time, n)
		completed := make([]sim.Time, n)
		// A queue of depth qd: post i waits for completion i-qd; each
		// completion takes a random service time after the previous.
		var last sim.Time
		for i := 0; i < n; i++ {
			if i >= qd {
				posted[i] = completed[i-qd]
			}
			if i > 0 {
				posted[i] = max(posted[i], posted[i-1])
			}
			c := max(last, posted[i]) + sim.Time(1+rng.IntN(1000))
			if rng.IntN(20) == 0 {
				c += sim.Time(rng.IntN(50000)) // a stall, then a burst
			}
			completed[i], last = c, c
		}
		size := 1 + rng.IntN(1<<16)
		want := float64(size) * 8 / scanPeak(posted, completed, cqMod)
		got := peakGbps(posted, completed, size, cqMod)
		if math.Abs(got-want) > 1e-9*want {
			t.Fatalf("trial %d (n %d, qd %d, cq_mod %d): peak %.12g Gb/s, perftest's scan %.12g", trial, n, qd, cqMod, got, want)
		}
	}
}

// TestPeakNeverAboveLineRate runs write_bw on a 100 Gbit/s link under loss,
// where completions bunch when a retransmission fills a hole: the peak must
// stay at or below the line rate (it once read 107 Gb/s) and at or above
// the average.
func TestPeakNeverAboveLineRate(t *testing.T) {
	for _, kind := range []transport.Kind{transport.MetaRoCE, transport.RoCEv2} {
		cl, _ := lab{hosts: 2, loss: 0.01, seed: 3}.build(t)
		r, err := Run(cl, Spec{Name: WriteBW, Transport: kind, Iterations: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if r.Retransmits == 0 {
			t.Fatalf("%v: no retransmissions at 1%% loss", kind)
		}
		// The peak's search stops within 1e-12 of the figure: a run whose
		// every window runs at the average rate may read a hair below it.
		if r.BWPeakGbps > 100 || r.BWPeakGbps < r.BWAverageGbps*(1-1e-9) {
			t.Errorf("%v: peak %.2f Gb/s, average %.2f: want average <= peak <= 100", kind, r.BWPeakGbps, r.BWAverageGbps)
		}
	}
}

// TestLatencyDistPerftest checks perftest's latency arithmetic on known
// round trips: the two slowest dropped, the median of the rest, t_max the
// first dropped value, percentiles at ceil(n*p).
func TestLatencyDistPerftest(t *testing.T) {
	var deltas []sim.Time
	for i := 10; i >= 1; i-- { // 10..1 us round trips, unsorted
		deltas = append(deltas, sim.Time(i)*sim.Microsecond)
	}
	d := latencyDist(deltas, 2)
	// kept: 1..8 us; one-way is half.
	want := Dist{N: 11, Min: 500, Max: 4500, P50: 2250, P99: 4500, P999: 4500, Mean: 2250, Stdev: 1146}
	if d != want {
		t.Errorf("got %+v\nwant %+v", d, want)
	}
	r := latencyDist(deltas, 1)
	if r.P50 != 4500 || r.Min != sim.Microsecond {
		t.Errorf("read_lat factor 1: %+v", r)
	}
}

var (
	titleRe   = regexp.MustCompile(`^ {20}(RDMA_Write|Send|RDMA_Read) (BW|Latency) Test$`)
	addrRe    = regexp.MustCompile(`^ (local|remote) address: LID 0000 QPN (0x[0-9a-f]{4,}|000000) PSN (0x[0-9a-f]{4,}|000000)( RKey 0x[0-9a-f]{6,} VAddr 0x[0-9a-f]{14,})?$`)
	gidRe     = regexp.MustCompile(`^ GID: (\d\d\d?:){15}\d\d\d?$`)
	bwHeadMiB = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
	bwHeadGb  = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	latHead   = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
)

// TestPerftestText runs the six tests and reads their output the way a
// script reading perftest's would: the title line, the address and GID
// lines, perftest's column header, and a result line whose fields are the
// result's figures in perftest's units.
func TestPerftestText(t *testing.T) {
	for _, tc := range []struct {
		name  Name
		kind  transport.Kind
		gbits bool
	}{
		{WriteBW, transport.MetaRoCE, false},
		{SendBW, transport.RoCEv2, true},
		{ReadBW, transport.RoCEv2, false},
		{WriteLat, transport.MetaRoCE, false},
		{SendLat, transport.RoCEv2, false},
		{ReadLat, transport.MetaRoCE, false},
	} {
		cl, _ := lab{hosts: 2}.build(t)
		r, err := Run(cl, Spec{Name: tc.name, Transport: tc.kind, Iterations: 200, Size: 8192})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var b bytes.Buffer
		if err := WriteText(&b, r, Format{Gbits: tc.gbits}); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		lines := strings.Split(out, "\n")
		if lines[0] != perftestRule || !titleRe.MatchString(lines[1]) {
			t.Errorf("%s: header\n%s", tc.name, out)
		}
		var addrs, gids int
		head := -1
		for i, l := range lines {
			switch {
			case addrRe.MatchString(l):
				addrs++
				if rdma := tc.name != SendBW && tc.name != SendLat; rdma != strings.Contains(l, "RKey") {
					t.Errorf("%s: RKey in %q", tc.name, l)
				}
			case gidRe.MatchString(l):
				gids++
			case l == bwHeadMiB || l == bwHeadGb || l == latHead:
				head = i
			}
		}
		if addrs != 2 || gids != 2 || head < 0 {
			t.Fatalf("%s: %d address lines, %d GID lines, column header at %d:\n%s", tc.name, addrs, gids, head, out)
		}
		if tc.name.IsLatency() != (lines[head] == latHead) || (!tc.name.IsLatency() && tc.gbits != (lines[head] == bwHeadGb)) {
			t.Errorf("%s: column header %q", tc.name, lines[head])
		}
		fields := strings.Fields(lines[head+1])
		num := func(i int) float64 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				t.Fatalf("%s: field %d of %q: %v", tc.name, i, lines[head+1], err)
			}
			return v
		}
		if num(0) != 8192 {
			t.Errorf("%s: size field %q", tc.name, fields[0])
		}
		if tc.name.IsLatency() {
			if len(fields) != 9 || int(num(1)) != 200 || math.Abs(num(4)-r.Latency.P50.Micros()) > 0.006 || num(2) > num(4) || num(4) > num(3) {
				t.Errorf("%s: result line %q, latency %+v", tc.name, lines[head+1], r.Latency)
			}
			continue
		}
		k := mibFactor
		if tc.gbits {
			k = 1
		}
		if len(fields) != 5 || int64(num(1)) != r.Messages || math.Abs(num(3)-r.BWAverageGbps*k) > 0.006 ||
			math.Abs(num(2)-r.BWPeakGbps*k) > 0.006 || num(2) < num(3) {
			t.Errorf("%s: result line %q; result peak %.3f avg %.3f Gb/s", tc.name, lines[head+1], r.BWPeakGbps, r.BWAverageGbps)
		}
	}
}

// TestPerftestJSON checks --out_json's document: perftest's keys, in its
// units.
func TestPerftestJSON(t *testing.T) {
	cl, _ := lab{hosts: 2}.build(t)
	bw, err := Run(cl, Spec{Name: WriteBW, Iterations: 100})
	if err != nil {
		t.Fatal(err)
	}
	cl, _ = lab{hosts: 2}.build(t)
	lat, err := Run(cl, Spec{Name: ReadLat, Iterations: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		r    *Result
		f    Format
		test string
		keys []string
	}{
		{bw, Format{}, "RDMA_Write_BW_Test", []string{"MsgSize", "n_iterations", "BW_peak", "BW_average", "MsgRate"}},
		{bw, Format{Gbits: true}, "RDMA_Write_BW_Test", []string{"MsgSize", "n_iterations", "BW_peak", "BW_average", "MsgRate"}},
		{lat, Format{}, "RDMA_Read_Latency_Test", []string{"MsgSize", "n_iterations", "t_min", "t_max", "t_typical", "t_avg", "t_stdev", "percentile_99", "percentile_99.9"}},
	} {
		data, err := MarshalPerftestJSON(tc.r, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			TestInfo map[string]any     `json:"test_info"`
			Results  map[string]float64 `json:"results"`
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s", data)
		}
		if doc.TestInfo["test"] != tc.test || doc.TestInfo["Link_type"] != "Ethernet" || doc.TestInfo["Connection_type"] != "RC" {
			t.Errorf("test_info %v", doc.TestInfo)
		}
		if len(doc.Results) != len(tc.keys) {
			t.Errorf("results %v, want keys %v", doc.Results, tc.keys)
		}
		for _, k := range tc.keys {
			if _, ok := doc.Results[k]; !ok {
				t.Errorf("results lack %q: %s", k, data)
			}
		}
		if tc.r == bw {
			k := mibFactor
			if tc.f.Gbits {
				k = 1
			}
			if got := doc.Results["BW_average"]; math.Abs(got-bw.BWAverageGbps*k) > 0.006 {
				t.Errorf("BW_average %v, want %.2f", got, bw.BWAverageGbps*k)
			}
		}
	}
}

// TestLatencyTests runs write_lat, send_lat and read_lat with 2-byte
// messages: each checks its data, and read_lat (a round trip) reads about
// twice write_lat's one-way latency, as on real NICs.
func TestLatencyTests(t *testing.T) {
	lat := map[Name]sim.Time{}
	for _, n := range []Name{WriteLat, SendLat, ReadLat} {
		for _, k := range []transport.Kind{transport.MetaRoCE, transport.RoCEv2} {
			cl, _ := lab{hosts: 2}.build(t)
			r, err := Run(cl, Spec{Name: n, Transport: k, Iterations: 100})
			if err != nil {
				t.Fatalf("%s/%v: %v", n, k, err)
			}
			if !r.Check.OK || r.Latency == nil || r.Latency.N != 100 || r.Size != 2 {
				t.Fatalf("%s/%v: check %+v, latency %+v, size %d", n, k, r.Check, r.Latency, r.Size)
			}
			if k == transport.MetaRoCE {
				lat[n] = r.Latency.P50
			}
		}
	}
	if ratio := float64(lat[ReadLat]) / float64(2*lat[WriteLat]); ratio < 0.8 || ratio > 1.25 {
		t.Errorf("read_lat %v vs write_lat %v: ratio to twice the one-way %.2f", lat[ReadLat], lat[WriteLat], ratio)
	}
}

// TestDurationMarginsAndIntervals runs write_bw for a duration: the
// average is over the window inside the margins, there is no peak, and
// --run_infinitely's intervals add up to what completed.
func TestDurationMarginsAndIntervals(t *testing.T) {
	cl, _ := lab{hosts: 2}.build(t)
	var ivs []Interval
	r, err := Run(cl, Spec{Name: WriteBW, Duration: 400 * sim.Microsecond, Margin: 100 * sim.Microsecond,
		Interval: 100 * sim.Microsecond, OnInterval: func(iv Interval) { ivs = append(ivs, iv) }})
	if err != nil {
		t.Fatal(err)
	}
	if r.BWPeakGbps != 0 || r.Window != 200*sim.Microsecond || r.WindowMessages == 0 || r.WindowMessages >= r.Messages {
		t.Errorf("peak %.2f, window %v with %d of %d messages", r.BWPeakGbps, r.Window, r.WindowMessages, r.Messages)
	}
	if r.BWAverageGbps < 90 || r.BWAverageGbps > 100 {
		t.Errorf("windowed average %.2f Gb/s on a 100G link", r.BWAverageGbps)
	}
	if len(ivs) != 4 {
		t.Fatalf("%d intervals, want 4", len(ivs))
	}
	for _, iv := range ivs[1:] {
		if iv.End-iv.Start != 100*sim.Microsecond || iv.Gbps() < 85 || iv.Gbps() > 100 { // whole 5us messages
			t.Errorf("interval %+v: %.2f Gb/s", iv, iv.Gbps())
		}
	}
	var f Format
	if l := f.IntervalLine(ivs[1]); !strings.HasPrefix(l, " 65536      ") || !strings.Contains(l, " 0.00 ") {
		t.Errorf("interval line %q", l)
	}
}
