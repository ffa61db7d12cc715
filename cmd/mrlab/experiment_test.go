package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExperimentUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"experiment"}, "experiment needs one NAME"},
		{[]string{"experiment", "nope"}, `unknown experiment "nope"`},
		{[]string{"experiment", "incast", "--scale", "huge"}, `unknown scale "huge"`},
		{[]string{"experiment", "all", "--json"}, "--json prints one experiment's object"},
		{[]string{"experiment", "incast", "--jobs", "0"}, "--jobs 0"},
	} {
		code, _, errs := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("mrlab %s: exit %d, stderr %q; want 2 and %q", strings.Join(c.args, " "), code, errs, c.want)
		}
	}
}

func TestExperimentRun(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runCLI(t, "experiment", "loss-sweep", "--scale", "tiny", "--json", "--out", dir, "--seed", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var doc struct {
		Experiment string           `json:"experiment"`
		Seed       uint64           `json:"seed"`
		Rows       []map[string]any `json:"rows"`
		Setup      []string         `json:"setup"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("--json output is not one JSON object: %v\n%s", err, out)
	}
	if doc.Experiment != "loss-sweep" || doc.Seed != 3 || len(doc.Rows) == 0 || len(doc.Setup) == 0 {
		t.Errorf("JSON: experiment %q seed %d, %d rows, %d setup lines", doc.Experiment, doc.Seed, len(doc.Rows), len(doc.Setup))
	}
	if _, ok := doc.Rows[0]["goodput_gbps"]; !ok {
		t.Errorf("row lacks goodput_gbps: %v", doc.Rows[0])
	}
	for _, f := range []string{"loss-sweep.csv", "loss-sweep.json", "loss-sweep.png", "loss-sweep.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	// The table form, and the results document.
	doc2 := filepath.Join(dir, "results.md")
	code, out, errs = runCLI(t, "experiment", "loss-sweep", "--scale", "tiny", "--out", filepath.Join(dir, "r"), "--doc", doc2)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"loss-sweep:", "goodput Gb/s", "fraction", "wrote "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	md, err := os.ReadFile(doc2)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "](r/loss-sweep.png)") {
		t.Errorf("results document does not embed r/loss-sweep.png:\n%s", md)
	}
}
