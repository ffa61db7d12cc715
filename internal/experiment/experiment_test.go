package experiment

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// runTiny runs an experiment at the tiny scale.
func runTiny(t *testing.T, name string, seed uint64) *Report {
	t.Helper()
	e, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Run(Config{Seed: seed, Scale: Tiny})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(r.table.Rows) == 0 || len(r.Checks) == 0 || len(r.Setup) == 0 || len(r.plots) == 0 {
		t.Fatalf("%s: empty report: %d rows, %d checks, %d setup lines, %d plots", name, len(r.table.Rows), len(r.Checks), len(r.Setup), len(r.plots))
	}
	return r
}

func inRange(t *testing.T, what string, v, lo, hi float64) {
	t.Helper()
	if math.IsNaN(v) || v < lo || v > hi {
		t.Errorf("%s = %v, want within [%v, %v]", what, v, lo, hi)
	}
}

func TestLossSweepRows(t *testing.T) {
	r := runTiny(t, "loss-sweep", 1)
	rows := r.Rows.([]LossRow)
	p := lossSweepParams(Config{Seed: 1, Scale: Tiny})
	want := 2*len(p.rates) + 1 // and RoCEv2 over PFC
	if len(rows) != want {
		t.Fatalf("%d rows, want %d", len(rows), want)
	}
	for _, row := range rows {
		if row.Fabric == FabricLossy && row.LossPct == 0 && row.Fraction != 1 {
			t.Errorf("%s loss-free row: fraction %v, want exactly 1", row.Transport, row.Fraction)
		}
		// Loss can only cost goodput; a few percent of noise either way.
		inRange(t, row.Transport+" fraction", row.Fraction, 0, 1.05)
		if row.GoodputGbps <= 0 && row.LossPct < 10 {
			t.Errorf("%s at %g%%: no goodput", row.Transport, row.LossPct)
		}
		if row.LossPct > 0 && row.LossDrops == 0 {
			t.Errorf("%s at %g%%: random loss dropped nothing", row.Transport, row.LossPct)
		}
		if row.LossPct == 0 && row.LossDrops != 0 {
			t.Errorf("%s at 0%%: %d loss drops", row.Transport, row.LossDrops)
		}
		if row.Transport == transport.MetaRoCE.String() && (!row.DataOK || row.Errors != 0 || row.Error != "") {
			t.Errorf("MetaRoCE at %g%%: data ok %v, %d errors, %q", row.LossPct, row.DataOK, row.Errors, row.Error)
		}
	}
	if len(r.Checks) != 3 {
		t.Errorf("%d checks, want 3 (MetaRoCE at 1%% and 10%%, RoCEv2 at 1%%)", len(r.Checks))
	}
}

func TestPlaneScalingRows(t *testing.T) {
	r := runTiny(t, "plane-scaling", 1)
	rows := r.Rows.([]PlaneRow)
	p := planeScalingParams(Config{Seed: 1, Scale: Tiny})
	if len(rows) != len(p.planes)*len(p.conns) {
		t.Fatalf("%d rows, want %d", len(rows), len(p.planes)*len(p.conns))
	}
	for _, row := range rows {
		if row.Planes == 1 && row.Linear != 1 {
			t.Errorf("1-plane row with %d conns: ratio to linear %v, want exactly 1", row.Conns, row.Linear)
		}
		inRange(t, "utilization", row.Utilization, 0.01, 1.0)
		inRange(t, "plane spread", row.PlaneSpread, 0, 1)
		if !row.DataOK || row.Errors != 0 || row.Error != "" {
			t.Errorf("%d planes %d conns: data ok %v, %d errors, %q", row.Planes, row.Conns, row.DataOK, row.Errors, row.Error)
		}
	}
}

func TestPlaneFailureRows(t *testing.T) {
	r := runTiny(t, "plane-failure", 1)
	rows := r.Rows.([]FailureRow)
	if len(rows) != 2 || rows[0].Transport != transport.MetaRoCE.String() {
		t.Fatalf("rows %+v, want MetaRoCE then RoCEv2", rows)
	}
	mr := rows[0]
	// The claim itself: no application error when a plane fails.
	if mr.Errors != 0 || mr.Error != "" || !mr.DataOK {
		t.Errorf("MetaRoCE: %d application errors, run error %q, data ok %v; want none, none, true", mr.Errors, mr.Error, mr.DataOK)
	}
	for _, row := range rows {
		inRange(t, row.Transport+" after/surviving", row.AfterFraction, 0, 1.01)
		if row.BeforeGbps <= 0 {
			t.Errorf("%s: no throughput before the failure", row.Transport)
		}
	}
	if len(r.Series) == 0 || len(r.Series[0].X) < 10 {
		t.Errorf("no throughput series")
	}
}

func TestIncastRows(t *testing.T) {
	r := runTiny(t, "incast", 1)
	rows := r.Rows.([]IncastRow)
	p := incastParamsFor(Config{Seed: 1, Scale: Tiny})
	if len(rows) != 2*len(p.senders) {
		t.Fatalf("%d rows, want %d", len(rows), 2*len(p.senders))
	}
	for _, row := range rows {
		inRange(t, "jain", row.Jain, 1/float64(row.Senders), 1)
		inRange(t, "utilization", row.Utilization, 0.05, 1.01)
		if row.PeakQueue <= 0 {
			t.Errorf("%s %d-to-1: no queue at the bottleneck", row.Transport, row.Senders)
		}
		if row.SettleRTTs < 0 && row.SettleRTTs != -1 {
			t.Errorf("settle %v: want >= 0 or -1", row.SettleRTTs)
		}
		if row.Transport == transport.MetaRoCE.String() && (!row.DataOK || row.Errors != 0) {
			t.Errorf("MetaRoCE %d-to-1: data ok %v, %d errors", row.Senders, row.DataOK, row.Errors)
		}
	}
}

func TestCollectivesRows(t *testing.T) {
	r := runTiny(t, "collectives", 1)
	rows := r.Rows.([]CollectiveRow)
	if len(rows) != 8 {
		t.Fatalf("%d rows, want 8", len(rows))
	}
	for _, row := range rows {
		if row.AlgBWGbps <= 0 || row.OpTimeP50 <= 0 {
			t.Errorf("%s %s %g%%: algbw %v, op time %v", row.Collective, row.Transport, row.LossPct, row.AlgBWGbps, row.OpTimeP50)
		}
		if row.Transport == transport.MetaRoCE.String() && (!row.DataOK || row.Errors != 0) {
			t.Errorf("MetaRoCE %s at %g%%: data ok %v, %d errors", row.Collective, row.LossPct, row.DataOK, row.Errors)
		}
	}
}

// TestDeterministic runs every experiment twice with one seed (and once
// with two jobs at a time) and wants the same rows; another seed must
// change the lossy rows.
func TestDeterministic(t *testing.T) {
	for _, e := range All() {
		t.Run(e.Name, func(t *testing.T) {
			a, err := e.Run(Config{Seed: 7, Scale: Tiny})
			if err != nil {
				t.Fatal(err)
			}
			b, err := e.Run(Config{Seed: 7, Scale: Tiny, Jobs: 2})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(a.Rows, b.Rows); d != "" {
				t.Errorf("same seed, different rows (-first +second):\n%s", d)
			}
			if d := cmp.Diff(a.Series, b.Series); d != "" {
				t.Errorf("same seed, different series (-first +second):\n%s", d)
			}
		})
	}
	a := runTiny(t, "loss-sweep", 7)
	b := runTiny(t, "loss-sweep", 8)
	if cmp.Equal(a.Rows, b.Rows) {
		t.Errorf("seeds 7 and 8 gave the same loss-sweep rows")
	}
}

func TestReportOutputs(t *testing.T) {
	r := runTiny(t, "loss-sweep", 1)
	dir := t.TempDir()
	paths, err := r.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"loss-sweep.csv", "loss-sweep.json", "loss-sweep.png", "loss-sweep.svg", "loss-sweep-gbps.png", "loss-sweep-gbps.svg"}
	var got []string
	for _, p := range paths {
		got = append(got, filepath.Base(p))
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("files (-want +got):\n%s", d)
	}
	png, _ := os.ReadFile(filepath.Join(dir, "loss-sweep.png"))
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Errorf("loss-sweep.png is not a PNG")
	}
	svg, _ := os.ReadFile(filepath.Join(dir, "loss-sweep.svg"))
	if !bytes.Contains(svg, []byte("<svg")) {
		t.Errorf("loss-sweep.svg is not an SVG")
	}
	csv, _ := os.ReadFile(filepath.Join(dir, "loss-sweep.csv"))
	if lines := strings.Count(string(csv), "\n"); lines != len(r.table.Rows)+1 {
		t.Errorf("CSV has %d lines, want %d", lines, len(r.table.Rows)+1)
	}
	var doc struct {
		Experiment string            `json:"experiment"`
		Rows       []json.RawMessage `json:"rows"`
		Checks     []Check           `json:"checks"`
	}
	js, _ := os.ReadFile(filepath.Join(dir, "loss-sweep.json"))
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatalf("JSON: %v", err)
	}
	if doc.Experiment != "loss-sweep" || len(doc.Rows) != len(r.table.Rows) || len(doc.Checks) != len(r.Checks) {
		t.Errorf("JSON: %q, %d rows, %d checks", doc.Experiment, len(doc.Rows), len(doc.Checks))
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"loss-sweep:", "setup:", "goodput Gb/s", "MetaRoCE goodput at 1% loss"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("table output lacks %q:\n%s", s, text.String())
		}
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, []*Report{r}, "results"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"## loss-sweep", "![loss-sweep](results/loss-sweep.png)", "| loss | transport |"} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("markdown lacks %q", s)
		}
	}
}

// TestSettleIndex checks the fair-share settling rule on made-up curves.
func TestSettleIndex(t *testing.T) {
	ts := make([]sim.Time, 40)
	for i := range ts {
		ts[i] = sim.Time(i) * 1000
	}
	// Two senders at exactly 1 byte/ns from the start: settled at 0.
	even := func(rate float64, from int) []uint64 {
		c := make([]uint64, len(ts))
		for i := range c {
			if i > from {
				c[i] = uint64(rate * float64(ts[i]-ts[from]))
			}
		}
		return c
	}
	if k := settleIndex(ts, [][]uint64{even(1, 0), even(1, 0)}, 1, 100, 0.1); k != 0 {
		t.Errorf("even senders settle at %d, want 0", k)
	}
	// One sender silent for 5 samples, then double rate until it caught
	// up... it settles once it runs at the fair rate.
	late := make([]uint64, len(ts))
	for i := range late {
		switch {
		case i <= 5:
		case i <= 10:
			late[i] = uint64(2000 * (i - 5))
		default:
			late[i] = late[10] + uint64(1000*(i-10))
		}
	}
	if k := settleIndex(ts, [][]uint64{even(1, 0), late}, 1, 100, 0.1); k != 10 {
		t.Errorf("late sender settles at %d, want 10", k)
	}
	// A sender at half the fair rate never settles.
	if k := settleIndex(ts, [][]uint64{even(1, 0), even(0.5, 0)}, 1, 100, 0.1); k != -1 {
		t.Errorf("slow sender settles at %d, want -1", k)
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

func TestLookup(t *testing.T) {
	want := []string{"collectives", "incast", "loss-sweep", "plane-failure", "plane-scaling"}
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
