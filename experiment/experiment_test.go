package experiment

import (
	"bytes"
	"encoding/json"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

func TestLookup(t *testing.T) {
	want := []string{"collectives", "congestion", "incast", "loss-sweep", "plane-failure", "plane-scaling", "regimes"}
	if d := cmp.Diff(want, Names()); d != "" {
		t.Errorf("names (-want +got):\n%s", d)
	}
	if _, err := Lookup("nope"); err == nil || !strings.Contains(err.Error(), "loss-sweep") {
		t.Errorf("Lookup(nope) = %v, want an error listing the experiments", err)
	}
	for _, s := range []string{"full", "quick", "tiny"} {
		sc, err := ParseScale(s)
		if err != nil || sc.String() != s {
			t.Errorf("ParseScale(%q) = %v, %v", s, sc, err)
		}
	}
	if _, err := ParseScale("huge"); err == nil {
		t.Errorf("ParseScale(huge) accepted")
	}
}

// TestPointCommand pins the command a point spells, and that every bed an
// experiment names at every scale is a built-in lab.
func TestPointCommand(t *testing.T) {
	p := Point{Lab: "incast/pfc", Seed: 7, Spec: workload.Spec{Name: workload.Incast, Transport: transport.RoCEv2,
		Size: 65536, QueueDepth: 16, Duration: 1500 * sim.Microsecond, From: []string{"h1", "h2"}, To: []string{"h0"}, Conns: 2}}
	want := "mrlab sim incast/pfc --workload incast --transport rocev2 --seed 7 --size 65536 --duration 1.5ms --qd 16 --conns 2 --from h1,h2 --to h0 --timeout 10s"
	if got := p.Command(); got != want {
		t.Errorf("command\n got %s\nwant %s", got, want)
	}
	if got := timeArg(1234567); got != "1.234567ms" && got != "1234567ns" {
		t.Errorf("timeArg(1234567) = %q", got)
	} else if back, _ := sim.ParseTime(got); back != 1234567 {
		t.Errorf("timeArg(1234567) = %q reads back as %v", got, back)
	}
	for _, s := range []Scale{Full, Quick, Tiny} {
		labsUsed := lossSweepParamsCases(s)
		for _, c := range incastParamsFor(s).cases {
			labsUsed = append(labsUsed, c.lab)
		}
		for _, c := range congestionParamsFor(s).cases {
			labsUsed = append(labsUsed, c.lab)
		}
		fp := planeFailureParams(s)
		cp := collectivesParams(s)
		labsUsed = append(labsUsed, fp.lossy, fp.lossless, cp.prefix+"lossy", cp.prefix+"pfc", cp.prefix+"lossy-1pct", cp.prefix+"pfc-1pct")
		for _, pl := range planeScalingParams(s).planes {
			labsUsed = append(labsUsed, planeScalingParams(s).point(planeCase{pl, 1}, 1).Lab)
		}
		rp := regimeParamsFor(s)
		for _, b := range rp.beds {
			labsUsed = append(labsUsed, rp.point(regimeCase{bed: b, rate: rp.rates[0], loss: rp.losses[0], wl: rp.wls[0]}, 1).Lab)
		}
		for _, name := range labsUsed {
			if !labs.IsBuiltin(name) {
				t.Errorf("%s scale: bed %q is not a built-in lab", s, name)
			}
		}
	}
}

func lossSweepParamsCases(s Scale) []string {
	p := lossSweepParams(s)
	var out []string
	for _, sd := range p.sides {
		for _, l := range p.rates {
			out = append(out, p.point(lossCase{l, sd}, 1).Lab)
		}
	}
	return out
}

func TestStats(t *testing.T) {
	s := statOf([]float64{3, 1, math.NaN(), 2, 10})
	if s.Median != 2.5 || s.Min != 1 || s.Max != 10 || s.N != 4 {
		t.Errorf("statOf = %+v", s)
	}
	if c := s.cell(f1); c != "2.5 (1.0–10.0)" {
		t.Errorf("cell = %q", c)
	}
	if c := statOf([]float64{2, 2}).cell(f1); c != "2.0" {
		t.Errorf("cell of equal seeds = %q", c)
	}
	if c := statOf([]float64{2, math.Inf(1), math.Inf(1)}).cell(f1); c != "never (2.0–never)" {
		t.Errorf("cell with seeds that never settled = %q", c)
	}
	g := goal{median: 0.9, floor: 0.86, atLeast: true}
	for _, c := range []struct {
		xs   []float64
		want bool
	}{
		{[]float64{0.95, 0.91, 0.87}, true},
		{[]float64{0.95, 0.91, 0.85}, false}, // a seed below the seeds' figure
		{[]float64{0.89, 0.95, 0.88}, false}, // the median short
		{nil, false},
	} {
		if got := statCheck("x", "y", statOf(c.xs), g, pct).Met; got != c.want {
			t.Errorf("%v: met %v, want %v", c.xs, got, c.want)
		}
	}
	if !statCheck("x", "y", statOf([]float64{0, 0}), goal{}, n0).Met || statCheck("x", "y", statOf([]float64{0, 1}), goal{}, n0).Met {
		t.Errorf("an at-most-0 goal")
	}
}

// TestArrivalsSettle checks the strict fair-share test on made-up
// arrivals: two senders alternating packets at line rate are within 10%
// from the start; a sender that starts late settles when it catches up
// with its share; a sender at half its share never settles.
func TestArrivalsSettle(t *testing.T) {
	const rate = 100e9
	const n = 1000 // bytes per packet
	const pkt = 80 // ns per packet at 100 Gbit/s
	a := &arrivals{at: make([][]int64, 2), n: make([][]int, 2)}
	add := func(i int, endNs int64) {
		a.at[i] = append(a.at[i], endNs*1000)
		a.n[i] = append(a.n[i], n)
	}
	for k := int64(0); k < 200; k++ {
		add(int(k%2), (k+1)*pkt)
	}
	// Fair share of a 1600 ns window: 10 packets each.
	if s := a.settle(0, 16000, 1600, 400, rate, 10*n, 0.1); s != 0 {
		t.Errorf("alternating senders settle at %v, want 0", s)
	}
	b := &arrivals{at: make([][]int64, 2), n: make([][]int, 2)}
	a = b
	// Sender 1 silent until 4000 ns (sender 0 alone at line rate), then
	// the two alternate.
	t0 := int64(0)
	for t0 < 4000 {
		t0 += pkt
		add(0, t0)
	}
	for k := int64(0); k < 200; k++ {
		t0 += pkt
		add(int(k%2), t0)
	}
	if s := a.settle(0, 16000, 1600, 400, rate, 10*n, 0.1); s != 4000 {
		t.Errorf("late sender: settled at %v, want 4000ns", s)
	}
	c := &arrivals{at: make([][]int64, 2), n: make([][]int, 2)}
	a = c
	for k := int64(0); k < 300; k++ {
		i := 0
		if k%3 == 2 {
			i = 1
		}
		add(i, (k+1)*pkt)
	}
	if s := a.settle(0, 16000, 1600, 400, rate, 10*n, 0.1); s != -1 {
		t.Errorf("unfair senders settle at %v, want never", s)
	}
}

func TestJain(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{1, 1, 1, 1}, 1},
		{[]float64{1, 0, 0, 0}, 0.25},
		{[]float64{2, 1}, 0.9},
	} {
		if got := jain(c.xs); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("jain(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

func TestHostsByLeaf(t *testing.T) {
	got := hostsByLeaf(4, 16, 6, "h0")
	want := []string{"h16", "h32", "h48", "h17", "h33", "h49"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if n := len(hostsByLeaf(4, 16, 63, "h0")); n != 63 {
		t.Errorf("63 senders: got %d", n)
	}
}

// TestDeterministic runs an experiment twice with the same seeds, one and
// two simulations at a time, with synthetic payload and with real bytes,
// and wants the same rows.
func TestDeterministic(t *testing.T) {
	e, err := Lookup("loss-sweep")
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.Run(Config{Seed: 7, Seeds: 2, Scale: Tiny, Jobs: 1, Payload: softnic.PayloadSynthetic})
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.Run(Config{Seed: 7, Seeds: 2, Scale: Tiny, Jobs: 2, Payload: softnic.PayloadBytes})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(a.Rows, b.Rows, cmp.Comparer(func(x, y float64) bool { return x == y || math.IsNaN(x) && math.IsNaN(y) })); d != "" {
		t.Errorf("same seeds, different rows (-first +second):\n%s", d)
	}
	rows := a.Rows.([]LossRow)
	seen := map[uint64]bool{}
	for _, r := range rows {
		seen[r.Seed] = true
	}
	if !seen[7] || !seen[8] || len(seen) != 2 {
		t.Errorf("seeds run: %v, want 7 and 8", seen)
	}
}

func TestReportOutputs(t *testing.T) {
	e, _ := Lookup("plane-failure")
	r, err := e.Run(Config{Seeds: 2, Scale: Tiny})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	paths, err := r.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range paths {
		got = append(got, filepath.Base(p))
	}
	want := []string{"plane-failure.csv", "plane-failure.json", "plane-failure.png", "plane-failure.svg", "plane-failure-rocev2.png", "plane-failure-rocev2.svg"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("files (-want +got):\n%s", d)
	}
	png, _ := os.ReadFile(filepath.Join(dir, "plane-failure.png"))
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Errorf("plane-failure.png is not a PNG")
	}
	csv, _ := os.ReadFile(filepath.Join(dir, "plane-failure.csv"))
	if lines := strings.Count(string(csv), "\n"); lines != len(r.table.Rows)+1 {
		t.Errorf("CSV has %d lines, want %d", lines, len(r.table.Rows)+1)
	}
	var doc struct {
		Seeds []uint64 `json:"seeds"`
		Rows  []struct {
			Seed    uint64 `json:"seed"`
			Command string `json:"command"`
		} `json:"rows"`
		Checks []Check `json:"checks"`
	}
	js, _ := os.ReadFile(filepath.Join(dir, "plane-failure.json"))
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatalf("JSON: %v", err)
	}
	if len(doc.Seeds) != 2 || len(doc.Rows) != 4 || len(doc.Checks) != len(r.Checks) {
		t.Errorf("JSON: seeds %v, %d rows, %d checks", doc.Seeds, len(doc.Rows), len(doc.Checks))
	}
	for _, row := range doc.Rows {
		if !strings.HasPrefix(row.Command, "mrlab sim plane-failure/") || !strings.Contains(row.Command, "--seed ") {
			t.Errorf("row command %q", row.Command)
		}
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"plane-failure:", "seeds 1-2", "after/surviving", "MetaRoCE application errors", "over 2 seeds"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text output lacks %q:\n%s", s, text.String())
		}
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, []*Report{r}, "results"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"## plane-failure", "![plane-failure](results/plane-failure.png)", "| transport | fabric |", "--seeds 2"} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("markdown lacks %q", s)
		}
	}
}

// TestArrivalsObserve: the probe keeps only deliveries at its link
// direction, by sender.
func TestArrivalsObserve(t *testing.T) {
	lab, err := labs.Builtin("congestion/oversub-lossy")
	if err != nil {
		t.Fatal(err)
	}
	p := Point{Lab: "congestion/oversub-lossy", Seed: 1, Spec: workload.Spec{Name: workload.WriteBW, Transport: transport.MetaRoCE,
		Size: 16 << 10, Iterations: 20, From: []string{"h1"}, To: []string{"h0"}}}
	var arr *arrivals
	run, err := p.run(probe{observe: func(net *fabric.Network) error {
		port, err := net.LinkPort("h0-p0", fabric.BtoA)
		if err != nil {
			return err
		}
		var h1 netip.Addr
		for a, n := range hostAddrs(net) {
			if n == "h1" {
				h1 = a
			}
		}
		arr = newArrivals(port, []netip.Addr{h1})
		net.SetObserver(arr)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	_ = lab
	if got := arr.bytesBetween(0, 0, run.end+1); got < 20*16<<10 || len(arr.at[0]) < 20*4 {
		t.Errorf("h1 delivered %d bytes in %d packets at h0's downlink, want at least 20 x 16 KiB", got, len(arr.at[0]))
	}
}
