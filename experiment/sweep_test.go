package experiment

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// reportBytes renders a report's CSV and JSON.
func reportBytes(t *testing.T, r *Report) (csv, js []byte) {
	t.Helper()
	var c, j bytes.Buffer
	if err := r.WriteCSV(&c); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteJSON(&j); err != nil {
		t.Fatal(err)
	}
	return c.Bytes(), j.Bytes()
}

// TestSweepSteps runs an experiment as plan, points (each written to and
// read back from a sweep directory, in reverse order) and merge, and
// wants the local run's CSV and JSON byte for byte; then every kind of
// bad result set is refused with the point or file named.
func TestSweepSteps(t *testing.T) {
	e, err := Lookup("plane-failure")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Seed: 3, Seeds: 2, Scale: Tiny}
	p, err := e.Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Points) != 4 || p.Points[1].Seed != 4 || !strings.HasPrefix(p.Points[0].Command, "mrlab sim plane-failure/tiny-lossy ") {
		t.Fatalf("plan: %+v", p.Points)
	}
	if want := []string{"experiment", "plane-failure", "--scale", "tiny", "--seed", "3", "--seeds", "2", "--point", "2", "--out", "D"}; !cmp.Equal(p.PointArgs(2, "D"), want) {
		t.Errorf("PointArgs = %q, want %q", p.PointArgs(2, "D"), want)
	}
	if other, _ := e.Plan(Config{Seed: 3, Seeds: 3, Scale: Tiny}); other.ID == p.ID {
		t.Errorf("plans of 2 and 3 seeds share the id %s", p.ID)
	}
	again, _ := e.Plan(cfg)
	if again.ID != p.ID {
		t.Errorf("the same plan twice: ids %s and %s", p.ID, again.ID)
	}

	dir := t.TempDir()
	if err := WritePlan(dir, p); err != nil {
		t.Fatal(err)
	}
	for i := len(p.Points) - 1; i >= 0; i-- {
		r, err := e.RunPoint(cfg, i)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteResult(dir, r); err != nil {
			t.Fatal(err)
		}
	}
	results, err := ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := e.Merge(cfg, results)
	if err != nil {
		t.Fatal(err)
	}
	local, err := e.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mc, mj := reportBytes(t, merged)
	lc, lj := reportBytes(t, local)
	if !bytes.Equal(mc, lc) || !bytes.Equal(mj, lj) {
		t.Errorf("merged report differs from the local run's:\nmerged:\n%s\nlocal:\n%s", mc, lc)
	}
	// The plot data the report's JSON leaves out came through the points.
	if rows := merged.Rows.([]FailureRow); len(rows[0].Times) == 0 || len(rows[0].Times) != len(rows[0].Goodput) {
		t.Errorf("merged rows lost their series: %d times, %d goodputs", len(rows[0].Times), len(rows[0].Goodput))
	}

	foreign, err := e.RunPoint(Config{Seed: 3, Seeds: 3, Scale: Tiny}, 1)
	if err != nil {
		t.Fatal(err)
	}
	copyOf := func(r *PointResult) *PointResult { c := *r; return &c }
	otherBuild := copyOf(results[2])
	otherBuild.Build = "go0.1 plan9/mips"
	badCommand := copyOf(results[1])
	badCommand.Command += " --qd 1"
	for _, c := range []struct {
		name    string
		results []*PointResult
		want    string
	}{
		{"missing", results[:3], "1 of 4 points have no result: 3 (run them with --point ID, or --slurm --points 3)"},
		{"duplicated", append(append([]*PointResult(nil), results...), results[0]), "point 0 is there twice: " + results[0].File},
		{"foreign", append(append([]*PointResult(nil), results[:3]...), foreign), "is from another plan: plane-failure (scale tiny, seeds 3-5"},
		{"mixed builds", []*PointResult{results[0], results[1], otherBuild, results[3]}, "points ran on different mrlab builds"},
		{"another command", []*PointResult{results[0], badCommand, results[2], results[3]}, "the plan says"},
	} {
		_, err := e.Merge(cfg, c.results)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: merge error %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := e.RunPoint(cfg, 4); err == nil || !strings.Contains(err.Error(), "no point 4 (the plan has points 0-3)") {
		t.Errorf("RunPoint(4) = %v", err)
	}
	// A directory holds one plan.
	if err := WritePlan(dir, again); err != nil {
		t.Errorf("writing the same plan again: %v", err)
	}
	other, _ := e.Plan(Config{Seed: 3, Seeds: 3, Scale: Tiny})
	if err := WritePlan(dir, other); err == nil || !strings.Contains(err.Error(), "holds plane-failure (scale tiny, seeds 3-4") {
		t.Errorf("writing another plan into a sweep directory: %v", err)
	}
}

// TestStatus reads every state a point can be in from a sweep directory.
func TestStatus(t *testing.T) {
	e, _ := Lookup("plane-failure")
	cfg := Config{Seeds: 2, Scale: Tiny}
	p, err := e.Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WritePlan(dir, p); err != nil {
		t.Fatal(err)
	}
	r, err := e.RunPoint(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := MarkRunning(dir, NewMark(0, "")); err != nil {
		t.Fatal(err)
	}
	if err := WriteResult(dir, r); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "point-0.running")); !os.IsNotExist(err) {
		t.Errorf("a result leaves the running mark behind: %v", err)
	}
	// Point 1 failed; point 2 runs on another host; point 3's process on
	// this host is gone (pid 0 is never a process's).
	if err := MarkFailed(dir, NewMark(1, "slurm 9_1"), "stopped by signal terminated"); err != nil {
		t.Fatal(err)
	}
	elsewhere := NewMark(2, "")
	elsewhere.Host = "node17"
	if err := MarkRunning(dir, elsewhere); err != nil {
		t.Fatal(err)
	}
	gone := NewMark(3, "")
	gone.PID = 0
	if err := MarkRunning(dir, gone); err != nil {
		t.Fatal(err)
	}
	// A result of another plan.
	foreign := *r
	foreign.Plan = "feedfacefeedface"
	b, _ := json.Marshal(&foreign)
	if err := os.WriteFile(filepath.Join(dir, "point-0-copy.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := Status(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ps := range st.Points {
		got = append(got, ps.State)
	}
	if want := []string{StateDone, StateFailed, StateRunning, StateFailed}; !cmp.Equal(got, want) {
		t.Errorf("states %v, want %v", got, want)
	}
	if d := st.Points[1].Detail; !strings.Contains(d, "stopped by signal terminated") || !strings.Contains(d, "job slurm 9_1") {
		t.Errorf("failed point's detail: %q", d)
	}
	if d := st.Points[2].Detail; !strings.Contains(d, "on node17") {
		t.Errorf("running point's detail: %q", d)
	}
	if d := st.Points[3].Detail; !strings.Contains(d, "is gone without a result") {
		t.Errorf("gone point's detail: %q", d)
	}
	if len(st.Foreign) != 1 || !strings.Contains(st.Foreign[0], "point-0-copy.json") {
		t.Errorf("foreign files: %q", st.Foreign)
	}
	if s := st.Summary(); s != "4 points: 1 done, 1 running, 2 failed, 0 missing" {
		t.Errorf("summary %q", s)
	}
	if ids := FormatIDs(st.IDs(StateFailed, StateMissing)); ids != "1,3" {
		t.Errorf("ids to rerun %q", ids)
	}
	if _, err := Status(t.TempDir()); err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("status of a directory without a plan: %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

func TestIDs(t *testing.T) {
	for _, c := range []struct {
		ids  []int
		text string
	}{{[]int{0}, "0"}, {[]int{0, 1, 2, 3}, "0-3"}, {[]int{9, 1, 2, 5}, "1-2,5,9"}, {nil, ""}} {
		if got := FormatIDs(c.ids); got != c.text {
			t.Errorf("FormatIDs(%v) = %q, want %q", c.ids, got, c.text)
		}
	}
	got, err := ParseIDs("7, 1-3,2", 8)
	if err != nil || !cmp.Equal(got, []int{1, 2, 3, 7}) {
		t.Errorf("ParseIDs = %v, %v", got, err)
	}
	for _, bad := range []string{"", "a", "3-1", "-1", "1-", "8", "2-8"} {
		if _, err := ParseIDs(bad, 8); err == nil {
			t.Errorf("ParseIDs(%q) accepted", bad)
		}
	}
}

func TestSlurmScripts(t *testing.T) {
	e, _ := Lookup("plane-failure")
	p, err := e.Plan(Config{Seeds: 2, Scale: Tiny})
	if err != nil {
		t.Fatal(err)
	}
	o := SlurmOptions{Dir: "/shared/sweep dir", Mrlab: "/opt/mrlab/bin/mrlab", Partition: "short", Time: "0:10:00",
		MaxParallel: 3, Args: []string{"--account=netlab", "--mem=2G"}}
	j, err := SlurmScripts(p, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"#SBATCH --array=0-3%3\n", "#SBATCH --partition=short\n", "#SBATCH --time=0:10:00\n", "#SBATCH --account=netlab\n#SBATCH --mem=2G\n",
		"#SBATCH --output=/shared/sweep dir/slurm/point-%a-%A.out\n",
		`exec /opt/mrlab/bin/mrlab experiment plane-failure --scale tiny --seed 1 --seeds 2 --point "$SLURM_ARRAY_TASK_ID" --out '/shared/sweep dir'` + "\n",
	} {
		if !strings.Contains(j.Array, want) {
			t.Errorf("array script lacks %q:\n%s", want, j.Array)
		}
	}
	for _, want := range []string{"#SBATCH --partition=short\n", "#SBATCH --mem=2G\n",
		"exec /opt/mrlab/bin/mrlab experiment plane-failure --scale tiny --seed 1 --seeds 2 --merge '/shared/sweep dir' --out '/shared/sweep dir'\n"} {
		if !strings.Contains(j.Merge, want) {
			t.Errorf("merge script lacks %q:\n%s", want, j.Merge)
		}
	}
	if strings.Contains(j.Merge, "--array") {
		t.Errorf("the merge is an array:\n%s", j.Merge)
	}
	if want := "sbatch --parsable --dependency=afterany:${array%%;*} '/shared/sweep dir/slurm/merge-" + p.ID + ".sbatch'"; !strings.Contains(j.Submit(), want) {
		t.Errorf("submit commands lack %q:\n%s", want, j.Submit())
	}
	o.Points, o.MaxParallel = []int{1, 3}, 0
	if j, _ := SlurmScripts(p, o); !strings.Contains(j.Array, "#SBATCH --array=1,3\n") || j.Tasks != 2 {
		t.Errorf("a rerun of points 1 and 3 (%d tasks):\n%s", j.Tasks, j.Array)
	}
	o.Points, o.PerTask = nil, 3
	j, _ = SlurmScripts(p, o)
	for _, want := range []string{"#SBATCH --array=0-1\n", "chunks=(0-2 3)\n", `--point "${chunks[$SLURM_ARRAY_TASK_ID]}" --out`, "task-%a-%A.out"} {
		if !strings.Contains(j.Array, want) || j.Tasks != 2 {
			t.Errorf("3 points per task (%d tasks): script lacks %q:\n%s", j.Tasks, want, j.Array)
		}
	}
	for _, bad := range []SlurmOptions{{Dir: "rel", Mrlab: "/m"}, {Dir: "/d", Mrlab: "m"}, {Dir: "/d", Mrlab: "/m", Args: []string{"--a\n#SBATCH --b"}}} {
		if _, err := SlurmScripts(p, bad); err == nil {
			t.Errorf("SlurmScripts accepted %+v", bad)
		}
	}
	if q := shellQuote("it's"); q != `'it'\''s'` {
		t.Errorf("shellQuote = %s", q)
	}
}
