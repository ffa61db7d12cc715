package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExperimentWhatIfUsage: a what-if experiment refuses is a usage
// error naming the flag, the experiment (every one of a list that
// refuses it) and the bed, before anything runs.
func TestExperimentWhatIfUsage(t *testing.T) {
	tiny := []string{"--scale", "tiny", "--seeds", "1", "--out", t.TempDir()}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"experiment", "loss-sweep", "--impair", "fabric=delay 5us"},
			[]string{"mrlab: what-if: --impair fabric=delay 5us: loss-sweep varies impairments (random loss)", "--set links.default.delay"}},
		{[]string{"experiment", "loss-sweep", "--set", "links.default.rate"}, []string{"--set links.default.rate: want KEY=VALUE"}},
		{[]string{"experiment", "loss-sweep", "--set", "links.default.rate=0"}, []string{"bed loss-sweep/lossy-0: --set links.default.rate=0: links.default.rate"}},
		{[]string{"experiment", "congestion", "--fault", "1ms plane 3 down"}, []string{"bed congestion/oversub-pfc: --fault 1ms plane 3 down: no plane 3"}},
		{[]string{"experiment", "congestion,loss-sweep", "--impair", "fabric=delay 5us"}, []string{"loss-sweep varies impairments"}},
		{[]string{"experiment", "all", "--impair", "fabric=delay 5us"},
			[]string{"collectives varies impairments", "incast varies impairments", "loss-sweep varies impairments", "regimes varies impairments",
				"these take it: mrlab experiment congestion,plane-failure,plane-scaling --impair 'fabric=delay 5us'"}},
		{[]string{"experiment", "plane-failure", "--plan", "--fault", "1ms plane 2 down"}, []string{"plane-failure varies the fault timeline"}},
		{[]string{"experiment", "regimes", "--plan", "--set", "links.default.rate=1gbit"}, []string{"regimes varies the link rate"}},
		{[]string{"experiment", "congestion", "--plan", "--set", "topology.leafspine.planes=2"}, []string{"takes no what-if for the topology"}},
	} {
		code, out, errs := runCLI(t, append(c.args, tiny...)...)
		if code != 2 || out != "" {
			t.Errorf("mrlab %s: exit %d, stdout %q; want 2 and nothing run", strings.Join(c.args, " "), code, out)
		}
		for _, w := range c.want {
			if !strings.Contains(errs, w) {
				t.Errorf("mrlab %s: stderr %q lacks %q", strings.Join(c.args, " "), errs, w)
			}
		}
	}
}

// TestExperimentWhatIf runs an experiment with --set, --impair and
// --fault: the report says so, and a row's command, what-if included,
// reproduces the row; then the same what-if as a sweep: the plan and the
// Slurm scripts carry it, a merge without it is refused, and the merged
// report is the local run's.
func TestExperimentWhatIf(t *testing.T) {
	tmp := t.TempDir()
	exp := []string{"experiment", "congestion", "--scale", "tiny", "--seeds", "1", "--seed", "2",
		"--set", "links.default.rate=50gbit", "--impair", "fabric=delay 2us", "--fault", "150us link h6-p0 impair loss 2%"}
	local := filepath.Join(tmp, "local")
	code, out, errs := runCLI(t, append(exp, "--json", "--out", local)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var doc struct {
		WhatIf struct{ Set, Impair, Fault []string } `json:"what_if"`
		Rows   json.RawMessage                       `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.WhatIf.Set) != 1 || len(doc.WhatIf.Impair) != 1 || len(doc.WhatIf.Fault) != 1 {
		t.Errorf("JSON what_if: %+v", doc.WhatIf)
	}
	if !strings.Contains(string(doc.Rows), `--set links.default.rate=50gbit --impair 'fabric=delay 2us' --fault '150us link h6-p0 impair loss 2%' --timeout`) {
		t.Errorf("rows' commands lack the what-if:\n%s", doc.Rows)
	}
	checkRowReproduces(t, doc.Rows)

	code, out, _ = runCLI(t, append(exp, "--plan")...)
	var plan struct {
		WhatIf struct{ Set []string } `json:"what_if"`
		Args   []string               `json:"args"`
	}
	if err := json.Unmarshal([]byte(out), &plan); code != 0 || err != nil || len(plan.WhatIf.Set) != 1 ||
		!strings.HasSuffix(strings.Join(plan.Args, " "), "--fault 150us link h6-p0 impair loss 2%") {
		t.Errorf("--plan: exit %d, %v, %+v", code, err, plan)
	}
	sweep := filepath.Join(tmp, "sweep")
	if code, _, errs := runCLI(t, append(exp, "--point", "0-5", "--out", sweep)...); code != 0 {
		t.Fatalf("--point: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, "experiment", "congestion", "--scale", "tiny", "--seeds", "1", "--seed", "2", "--merge", sweep); code != 1 ||
		!strings.Contains(errs, "give the flags the points ran with (or none: mrlab experiment congestion --scale tiny --seed 2 --seeds 1 --set links.default.rate=50gbit --impair 'fabric=delay 2us' --fault '150us link h6-p0 impair loss 2%')") {
		t.Errorf("merge without the what-if: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, "experiment", "--merge", sweep, "--set", "links.default.rate=10gbit"); code != 2 || !strings.Contains(errs, "the what-if flags give --set links.default.rate=10gbit") {
		t.Errorf("merge with another what-if: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, "experiment", "--merge", sweep); code != 0 {
		t.Fatalf("--merge: exit %d: %s", code, errs)
	}
	for _, f := range []string{"congestion.csv", "congestion.json"} {
		a, errA := os.ReadFile(filepath.Join(local, f))
		b, errB := os.ReadFile(filepath.Join(sweep, f))
		if errA != nil || errB != nil || string(a) != string(b) {
			t.Errorf("%s: merged differs from local (%v, %v)", f, errA, errB)
		}
	}
	code, out, errs = runCLI(t, append(exp, "--slurm", "--out", filepath.Join(tmp, "dry"), "--dry-run", "--mrlab", "/opt/mrlab", "--probe", "0")...)
	if code != 0 || strings.Count(out, "--set links.default.rate=50gbit --impair 'fabric=delay 2us' --fault '150us link h6-p0 impair loss 2%' --") != 2 {
		t.Errorf("--slurm --dry-run: exit %d, %s\n%s", code, errs, out)
	}
}
