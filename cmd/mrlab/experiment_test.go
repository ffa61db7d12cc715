package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mrlab/mrlab/experiment"
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
		{[]string{"experiment", "incast", "--seeds", "0"}, "--seeds 0"},
		{[]string{"experiment", "incast", "--also", "scale=tiny"}, "want 'NAME [scale=S] [out=DIR] [doc=FILE]'"},
		{[]string{"experiment", "incast", "--also", "regimes scale=huge"}, `unknown scale "huge"`},
		{[]string{"experiment", "incast", "--also", "regimes size=8"}, `unknown key "size"`},
		{[]string{"experiment", "incast", "--also", "nope out=x"}, `unknown experiment "nope"`},
		{[]string{"experiment", "incast", "--json", "--also", "regimes"}, "--json prints one experiment's object"},
		{[]string{"experiment", "incast", "--plan", "--also", "regimes"}, "--also runs in the local pool"},
	} {
		code, _, errs := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("mrlab %s: exit %d, stderr %q; want 2 and %q", strings.Join(c.args, " "), code, errs, c.want)
		}
	}
}

func TestExperimentRun(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runCLI(t, "experiment", "loss-sweep", "--scale", "tiny", "--json", "--out", dir, "--seed", "3", "--seeds", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var doc struct {
		Experiment string           `json:"experiment"`
		Seeds      []uint64         `json:"seeds"`
		Rows       []map[string]any `json:"rows"`
		Setup      []string         `json:"setup"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("--json output is not one JSON object: %v\n%s", err, out)
	}
	if doc.Experiment != "loss-sweep" || len(doc.Seeds) != 2 || doc.Seeds[0] != 3 || doc.Seeds[1] != 4 || len(doc.Rows) == 0 || len(doc.Setup) == 0 {
		t.Errorf("JSON: experiment %q seeds %v, %d rows, %d setup lines", doc.Experiment, doc.Seeds, len(doc.Rows), len(doc.Setup))
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
	code, out, errs = runCLI(t, "experiment", "loss-sweep", "--scale", "tiny", "--seeds", "1", "--out", filepath.Join(dir, "r"), "--doc", doc2)
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

// TestExperimentAlso runs two experiments at tiny scale with another run
// (--also) in the same pool, and wants every file and page as the runs
// made one by one write them (the pages' timing line aside).
func TestExperimentAlso(t *testing.T) {
	dir := t.TempDir()
	one, also := filepath.Join(dir, "one"), filepath.Join(dir, "also")
	common := []string{"--scale", "tiny", "--seed", "2", "--seeds", "1", "--jobs", "2"}
	for _, args := range [][]string{
		append([]string{"experiment", "plane-failure,congestion", "--out", filepath.Join(one, "a"), "--doc", filepath.Join(one, "a.md")}, common...),
		append([]string{"experiment", "loss-sweep", "--out", filepath.Join(one, "b"), "--doc", filepath.Join(one, "b.md"), "--scale", "quick"}, common[2:]...),
		append(append([]string{"experiment", "plane-failure,congestion", "--out", filepath.Join(also, "a"), "--doc", filepath.Join(also, "a.md")}, common...),
			"--also", "loss-sweep scale=quick out="+filepath.Join(also, "b")+" doc="+filepath.Join(also, "b.md")),
	} {
		if code, _, errs := runCLI(t, args...); code != 0 {
			t.Fatalf("mrlab %s: exit %d: %s", strings.Join(args, " "), code, errs)
		}
	}
	var n int
	err := filepath.WalkDir(one, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(one, path)
		a, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(also, rel))
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, ".md") {
			a, b = []byte(untimed(string(a))), []byte(untimed(string(b)))
		}
		if string(a) != string(b) {
			t.Errorf("%s differs with --also:\none by one:\n%s\nwith --also:\n%s", rel, a, b)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Errorf("compared %d files, want the CSV, JSON, plots and page of three experiments", n)
	}
}

// untimed drops a page's timing figures (the Run lines' times).
func untimed(md string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(md, "\n") {
		if i := strings.Index(l, " on the machine that made this page)"); i >= 0 {
			l = l[:strings.LastIndex(l[:i], " (")] + "\n"
		}
		b.WriteString(l)
	}
	return b.String()
}

// TestExperimentRowsReproduce runs every experiment (tiny, one seed) and,
// for one row of each (the one with the most retransmissions, RoCEv2
// where it ran), runs the row's command as a user would and wants the
// same goodput, retransmissions and timeouts, exactly.
func TestExperimentRowsReproduce(t *testing.T) {
	for _, e := range experiment.All() {
		t.Run(e.Name, func(t *testing.T) {
			r, err := e.Run(experiment.Config{Seed: 2, Seeds: 1, Scale: experiment.Tiny})
			if err != nil {
				t.Fatal(err)
			}
			js, err := json.Marshal(r.Rows)
			if err != nil {
				t.Fatal(err)
			}
			checkRowReproduces(t, js)
		})
	}
}

// checkRowReproduces takes one of rows (a report's rows as JSON: the one
// with the most retransmissions, RoCEv2 where it ran), runs its command as
// a user would, and wants the same goodput, retransmissions and timeouts,
// exactly.
func checkRowReproduces(t *testing.T, rowsJSON []byte) {
	t.Helper()
	var rows []struct {
		Command     string  `json:"command"`
		Transport   string  `json:"transport"`
		Goodput     float64 `json:"goodput_gbps"`
		Retransmits uint64  `json:"retransmits"`
		Timeouts    uint64  `json:"timeouts"`
	}
	if err := json.Unmarshal(rowsJSON, &rows); err != nil || len(rows) == 0 {
		t.Fatalf("rows: %v, %d rows", err, len(rows))
	}
	best := -1
	for i, row := range rows {
		if !strings.HasPrefix(row.Command, "mrlab sim ") {
			t.Fatalf("row %d: command %q", i, row.Command)
		}
		if best < 0 || row.Transport == "rocev2" && (rows[best].Transport != "rocev2" || row.Retransmits > rows[best].Retransmits) ||
			row.Transport == rows[best].Transport && row.Retransmits > rows[best].Retransmits {
			best = i
		}
	}
	row := rows[best]
	args := append(shellWords(strings.TrimPrefix(row.Command, "mrlab ")), "--json")
	code, out, errs := runCLI(t, args...)
	var res struct {
		Results []struct {
			Goodput     float64 `json:"goodput_gbps"`
			Retransmits uint64  `json:"retransmits"`
			Timeouts    uint64  `json:"timeouts"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Results) != 1 {
		t.Fatalf("%s: exit %d, %v, %d results\n%s", row.Command, code, err, len(res.Results), errs)
	}
	got := res.Results[0]
	t.Logf("%s: goodput %v, %d retransmits, %d timeouts", row.Command, got.Goodput, got.Retransmits, got.Timeouts)
	if got.Goodput != row.Goodput || got.Retransmits != row.Retransmits || got.Timeouts != row.Timeouts {
		t.Errorf("%s:\n  experiment: goodput %v, %d retransmits, %d timeouts\n  command:    goodput %v, %d retransmits, %d timeouts",
			row.Command, row.Goodput, row.Retransmits, row.Timeouts, got.Goodput, got.Retransmits, got.Timeouts)
	}
}

// shellWords splits a command as a POSIX shell splits words made of bare
// and single-quoted parts (what Point.Command writes).
func shellWords(s string) []string {
	var out []string
	var w strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case quoted && r == '\'':
			quoted = false
		case quoted:
			w.WriteRune(r)
		case r == '\'':
			quoted, inWord = true, true
		case r == ' ' || r == '\t':
			if inWord {
				out = append(out, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, w.String())
	}
	return out
}
