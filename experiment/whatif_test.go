package experiment

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestWhatIfRefused: a what-if that does not parse, touches what the
// experiment varies, or makes a bed invalid is refused at planning, with
// the flag (and the bed) named; one that fits is planned.
func TestWhatIfRefused(t *testing.T) {
	for _, c := range []struct {
		exp  string
		w    WhatIf
		want string // "" for none
	}{
		// Taken.
		{"loss-sweep", WhatIf{Set: []string{"links.default.rate=25gbit"}}, ""},
		{"loss-sweep", WhatIf{Set: []string{"links.fabric.delay=3us", "transports.rocev2.ack_timeout=1ms"}}, ""},
		{"loss-sweep", WhatIf{Fault: []string{"100us link h0-p0 down"}}, ""},
		{"congestion", WhatIf{Impair: []string{"fabric=delay 5us"}}, ""},
		{"plane-failure", WhatIf{Set: []string{"detection_delay=50us"}, Impair: []string{"plane:2=delay 1us"}}, ""},
		{"regimes", WhatIf{Set: []string{"links.default.queue=256KiB"}}, ""},
		{"plane-scaling", WhatIf{Set: []string{"links.default.rate=50gbit"}}, ""},
		// Spelling, as mrlab sim words it.
		{"loss-sweep", WhatIf{Set: []string{"links.default.rate"}}, "--set links.default.rate: want KEY=VALUE"},
		{"loss-sweep", WhatIf{Set: []string{"links.default.rate=25gbt"}}, `bed loss-sweep/lossy-0: --set links.default.rate=25gbt: links.default.rate: "25gbt" is not a rate`},
		{"loss-sweep", WhatIf{Set: []string{"links.defualt.rate=1gbit"}}, "--set links.defualt.rate=1gbit: links.defualt: unknown field"},
		{"congestion", WhatIf{Impair: []string{"loss 1%"}}, "--impair loss 1%: want TARGET=NETEM"},
		{"congestion", WhatIf{Impair: []string{"plane:x=loss 1%"}}, `--impair plane:x=loss 1%: "plane:x": want plane:N`},
		{"loss-sweep", WhatIf{Fault: []string{"1ms plane"}}, "--fault 1ms plane: want AT TARGET NAME ACTION"},
		// A bed the what-if makes invalid is named.
		{"loss-sweep", WhatIf{Set: []string{"links.default.rate=0"}}, "experiment loss-sweep, bed loss-sweep/lossy-0: --set links.default.rate=0"},
		{"loss-sweep", WhatIf{Fault: []string{"1ms plane 9 down"}}, "bed loss-sweep/lossy-0: --fault 1ms plane 9 down: no plane 9"},
		{"plane-scaling", WhatIf{Impair: []string{"plane:3=loss 1%"}}, "bed plane-scaling/planes-1: --impair plane:3=loss 1%: lab plane-scaling-planes-1 has no links in plane 3"},
		// What the experiment varies.
		{"loss-sweep", WhatIf{Impair: []string{"fabric=delay 5us"}}, "--impair fabric=delay 5us: loss-sweep varies impairments (random loss): the loss it sweeps"},
		{"loss-sweep", WhatIf{Set: []string{"impair=loss 1%"}}, "--set impair=loss 1%: loss-sweep varies impairments"},
		{"loss-sweep", WhatIf{Set: []string{"links.host.impair=delay 1us"}}, "--set links.host.impair=delay 1us: loss-sweep varies impairments"},
		{"loss-sweep", WhatIf{Fault: []string{"1ms link h0-p0 impair loss 5%"}}, "--fault 1ms link h0-p0 impair loss 5%: loss-sweep varies impairments"},
		{"loss-sweep", WhatIf{Set: []string{"links.fabric.pfc={xoff: 64KiB, xon: 56KiB}"}}, "loss-sweep varies PFC"},
		{"loss-sweep", WhatIf{Set: []string{"links.default={rate: 10gbit}"}}, "the key holds links.*.impair: set the keys under it one by one"},
		{"incast", WhatIf{Impair: []string{"all=delay 1us"}}, "incast varies impairments"},
		{"collectives", WhatIf{Impair: []string{"host=delay 1us"}}, "collectives varies impairments"},
		{"congestion", WhatIf{Set: []string{"links.default.pfc={xoff: 64KiB, xon: 56KiB}"}}, "congestion varies PFC"},
		{"plane-failure", WhatIf{Fault: []string{"1ms plane 2 down"}}, "--fault 1ms plane 2 down: plane-failure varies the fault timeline"},
		{"plane-failure", WhatIf{Impair: []string{"h0-p0:ab=loss 1%"}}, "--impair h0-p0:ab=loss 1%: plane-failure varies the fault timeline"},
		{"regimes", WhatIf{Set: []string{"links.overrides[0].rate=1gbit"}}, "--set links.overrides[0].rate=1gbit: regimes varies the link rate"},
		{"regimes", WhatIf{Set: []string{"transports.rocev2={dcqcn: off}"}}, "regimes varies RoCEv2's local ACK timeout: it sets it per link rate, as an operator would; the key holds transports.rocev2.ack_timeout"},
		{"regimes", WhatIf{Impair: []string{"fabric=delay 1us"}}, "regimes varies impairments"},
		// What no experiment takes.
		{"congestion", WhatIf{Set: []string{"topology.leafspine.planes=2"}}, "--set topology.leafspine.planes=2: an experiment takes no what-if for the topology"},
		{"congestion", WhatIf{Set: []string{"seed=7"}}, "takes no what-if for the seed: every point sets it; use --seed and --seeds"},
		{"plane-failure", WhatIf{Set: []string{"faults[0].at=2ms"}}, "takes no what-if for the beds' fault timelines"},
	} {
		e, err := Lookup(c.exp)
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.Plan(Config{Seeds: 1, Scale: Tiny, WhatIf: c.w})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %s: %v", c.exp, c.w, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrWhatIf)):
			t.Errorf("%s %s: error %v, want ErrWhatIf with %q", c.exp, c.w, err, c.want)
		}
	}
}

func TestKeyOverlaps(t *testing.T) {
	for _, c := range []struct {
		key, pattern string
		want         bool
	}{
		{"links.default.rate", "links.*.rate", true},
		{"links.overrides[2].rate", "links.*.rate", true},
		{"links.default", "links.*.rate", true},
		{"links", "links.*.rate", true},
		{"links.default.delay", "links.*.rate", false},
		{"links.default.rate.x", "links.*.rate", true},
		{"topology.leafspine.planes", "topology", true},
		{"transports.metaroce.paths", "transports.rocev2.ack_timeout", false},
		{"impair", "links.*.impair", false},
	} {
		if got := keyOverlaps(c.key, c.pattern); got != c.want {
			t.Errorf("keyOverlaps(%q, %q) = %v", c.key, c.pattern, got)
		}
	}
}

// TestWhatIfRows: a rate what-if reaches every point (its command and
// its goodput), the report says so everywhere, and runs stay
// deterministic.
func TestWhatIfRows(t *testing.T) {
	e, _ := Lookup("loss-sweep")
	w := WhatIf{Set: []string{"links.default.rate=25gbit"}}
	base, err := e.Run(Config{Seeds: 1, Scale: Tiny})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Seeds: 1, Scale: Tiny, WhatIf: w}
	slow, err := e.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// 8 hosts, one port each: 200 Gb/s at 25 Gbit/s, 800 at the beds'
	// 100 Gbit/s.
	for i, r := range slow.Rows.([]LossRow) {
		b := base.Rows.([]LossRow)[i]
		if !strings.Contains(r.Command, " --set links.default.rate=25gbit --timeout ") {
			t.Errorf("row %d's command lacks the what-if: %s", i, r.Command)
		}
		if r.LossPct == 0 && (r.GoodputGbps > 200 || r.GoodputGbps < 0.85*200 || b.GoodputGbps < 0.85*800) {
			t.Errorf("%s %s loss-free: %.1f Gb/s at 25gbit, %.1f at the beds' rate", r.Transport, r.Fabric, r.GoodputGbps, b.GoodputGbps)
		}
	}
	again, err := e.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c1, j1 := reportBytes(t, slow)
	c2, j2 := reportBytes(t, again)
	if !bytes.Equal(c1, c2) || !bytes.Equal(j1, j2) {
		t.Errorf("the same what-if twice gave different reports")
	}
	if !bytes.Contains(j1, []byte(`"what_if": {`)) || bytes.Contains(mustJSON(t, base), []byte("what_if")) {
		t.Errorf("JSON: what_if should be in the what-if report only")
	}
	var text, md bytes.Buffer
	if err := slow.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(&md, []*Report{slow}, "."); err != nil {
		t.Fatal(err)
	}
	flags := "--set links.default.rate=25gbit"
	for _, want := range []string{"WHAT-IF: every bed ran with " + flags, "not the standard results"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	for _, want := range []string{"# mrlab what-if results: NOT the standard results", "Every bed of every experiment below ran with `" + flags + "`",
		"(what-if) |", "- **Run:** `mrlab experiment loss-sweep --seed 1 --seeds 1 --scale tiny " + flags + "`", "- **What-if:**"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	for _, f := range slow.plots {
		if !strings.Contains(f.title, "what-if, not the standard results: "+flags) {
			t.Errorf("plot %s's title does not say what-if: %q", f.file, f.title)
		}
	}
	md.Reset()
	if err := WriteMarkdown(&md, []*Report{base}, "."); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(md.String()), "what-if") {
		t.Errorf("the standard results page mentions a what-if")
	}
}

func mustJSON(t *testing.T, r *Report) []byte {
	t.Helper()
	_, j := reportBytes(t, r)
	return j
}

// TestWhatIfSweep: a plan carries its what-if (args, points' commands,
// id, JSON), a plan read back gives the same configuration, and a merge
// refuses points run without it.
func TestWhatIfSweep(t *testing.T) {
	e, _ := Lookup("congestion")
	w := WhatIf{Set: []string{"links.default.rate=50gbit"}, Impair: []string{"fabric=delay 2us"}, Fault: []string{"100us link h7-p0 down"}}
	cfg := Config{Seed: 2, Seeds: 1, Scale: Tiny, WhatIf: w}
	plain, err := e.Plan(Config{Seed: 2, Seeds: 1, Scale: Tiny})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.ID == plain.ID {
		t.Errorf("the plans with and without the what-if share the id %s", p.ID)
	}
	if got := strings.Join(p.Args, " "); !strings.HasSuffix(got, "--seeds 1 --set links.default.rate=50gbit --impair fabric=delay 2us --fault 100us link h7-p0 down") {
		t.Errorf("plan args %q", got)
	}
	if got := p.Invocation(); !strings.HasSuffix(got, "--impair 'fabric=delay 2us' --fault '100us link h7-p0 down'") {
		t.Errorf("invocation %q", got)
	}
	if !strings.Contains(p.Describe(), "what-if --set links.default.rate=50gbit --impair 'fabric=delay 2us' --fault '100us link h7-p0 down', plan ") {
		t.Errorf("Describe() = %q", p.Describe())
	}
	for _, pt := range p.Points {
		if !strings.Contains(pt.Command, " --set links.default.rate=50gbit --impair 'fabric=delay 2us' --fault '100us link h7-p0 down' ") {
			t.Errorf("point %d: %s", pt.ID, pt.Command)
		}
	}
	dir := t.TempDir()
	if err := WritePlan(dir, p); err != nil {
		t.Fatal(err)
	}
	back, err := ReadPlan(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, bcfg, err := back.Config()
	if err != nil {
		t.Fatal(err)
	}
	if again, err := e.Plan(bcfg); err != nil || again.ID != p.ID {
		t.Errorf("the plan read back from %s plans %v (%v), want %s", filepath.Join(dir, PlanFile), again, err, p.ID)
	}
	var results []*PointResult
	for i := range p.Points {
		r, err := e.RunPoint(cfg, i)
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	if _, err := e.Merge(cfg, results); err != nil {
		t.Fatal(err)
	}
	stray, err := e.RunPoint(Config{Seed: 2, Seeds: 1, Scale: Tiny}, 3)
	if err != nil {
		t.Fatal(err)
	}
	results[3] = stray
	if _, err := e.Merge(cfg, results); err == nil || !strings.Contains(err.Error(), "is from another plan: congestion (scale tiny, seeds 2, plan "+plain.ID+"), not "+p.Describe()) {
		t.Errorf("merging a point run without the what-if: %v", err)
	}
}
