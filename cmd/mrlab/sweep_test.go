package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSweepUsage(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"experiment", "incast", "--point", "0"}, "--point needs --out DIR"},
		{[]string{"experiment", "incast", "--slurm"}, "--slurm needs --out DIR"},
		{[]string{"experiment", "incast", "--plan", "--merge", dir}, "--plan and --merge: one sweep step at a time"},
		{[]string{"experiment", "all", "--plan"}, "--plan takes one experiment, not all"},
		{[]string{"experiment", "--merge", dir}, "experiment needs a NAME, or a DIR holding plan.json"},
		{[]string{"experiment", "incast", "--scale", "tiny", "--point", "99", "--out", dir}, "--point: point list \"99\": 99 is past the plan's last point, 14 (incast (scale tiny"},
		{[]string{"experiment", "incast", "--scale", "tiny", "--slurm", "--out", dir, "--points", "2-99", "--mrlab", "/m", "--dry-run"}, "past the plan's last point"},
		{[]string{"experiment", "incast", "--scale", "tiny", "--slurm", "--out", dir, "--max-parallel", "0", "--mrlab", "/m", "--dry-run"}, "--max-parallel 0"},
		{[]string{"experiment", "incast", "--scale", "tiny", "--slurm", "--out", dir, "--per-task", "0", "--mrlab", "/m", "--dry-run"}, "--per-task 0"},
	} {
		code, _, errs := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("mrlab %s: exit %d, stderr %q; want 2 and %q", strings.Join(c.args, " "), code, errs, c.want)
		}
	}
}

// TestSweepCLI runs a plan's points one command each, in a sweep
// directory, reads --status, merges, and wants the local run's files
// byte for byte.
func TestSweepCLI(t *testing.T) {
	tmp := t.TempDir()
	exp := []string{"experiment", "congestion", "--scale", "tiny", "--seeds", "1", "--seed", "4"}
	code, out, errs := runCLI(t, append(exp, "--plan")...)
	if code != 0 {
		t.Fatalf("--plan: exit %d: %s", code, errs)
	}
	var plan struct {
		ID     string `json:"plan"`
		Points []struct {
			ID      int    `json:"id"`
			Command string `json:"command"`
		} `json:"points"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil || len(plan.Points) != 6 || !strings.HasPrefix(plan.Points[5].Command, "mrlab sim incast/lossy ") {
		t.Fatalf("--plan printed %v, %+v:\n%s", err, plan, out)
	}
	sweep := filepath.Join(tmp, "sweep")
	for _, ids := range []string{"0-1", "3", "4,5"} {
		if code, _, errs := runCLI(t, append(exp, "--point", ids, "--out", sweep)...); code != 0 {
			t.Fatalf("--point %s: exit %d: %s", ids, code, errs)
		}
	}
	_, out, _ = runCLI(t, "experiment", "--status", sweep)
	for _, want := range []string{"6 points: 5 done, 0 running, 0 failed, 1 missing", "missing  point 2: " + plan.Points[2].Command,
		"--slurm --points 2 --out " + sweep} {
		if !strings.Contains(out, want) {
			t.Errorf("--status lacks %q:\n%s", want, out)
		}
	}
	if code, _, errs := runCLI(t, "experiment", "--merge", sweep); code != 1 || !strings.Contains(errs, "1 of 6 points have no result: 2") {
		t.Errorf("merge with point 2 missing: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, append(exp, "--point", "2", "--out", sweep)...); code != 0 {
		t.Fatalf("--point 2: exit %d: %s", code, errs)
	}
	// Flags of another plan are refused, naming the plan the points ran with.
	if code, _, errs := runCLI(t, "experiment", "congestion", "--merge", sweep); code != 1 || !strings.Contains(errs, "give the flags the points ran with") {
		t.Errorf("merge with other flags: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, append(exp, "--merge", sweep)...); code != 0 {
		t.Fatalf("--merge: exit %d: %s", code, errs)
	}
	local := filepath.Join(tmp, "local")
	if code, _, errs := runCLI(t, append(exp, "--out", local)...); code != 0 {
		t.Fatalf("local run: exit %d: %s", code, errs)
	}
	for _, f := range []string{"congestion.csv", "congestion.json"} {
		a, errA := os.ReadFile(filepath.Join(local, f))
		b, errB := os.ReadFile(filepath.Join(sweep, f))
		if errA != nil || errB != nil || string(a) != string(b) {
			t.Errorf("%s: merged differs from local (%v, %v)", f, errA, errB)
		}
	}

	// --slurm --dry-run prints both scripts and writes nothing.
	dry := filepath.Join(tmp, "dry")
	code, out, errs = runCLI(t, append(exp, "--slurm", "--out", dry, "--dry-run", "--mrlab", "/opt/mrlab", "--partition", "p1", "--sbatch-arg=--qos=low", "--per-task", "1", "--probe", "0")...)
	if code != 0 {
		t.Fatalf("--dry-run: exit %d: %s", code, errs)
	}
	for _, want := range []string{"#SBATCH --array=0-5\n", "#SBATCH --partition=p1\n", "#SBATCH --qos=low\n", "--point \"$SLURM_ARRAY_TASK_ID\" --out " + dry, "--merge " + dry, "--dependency=afterany:"} {
		if !strings.Contains(out, want) {
			t.Errorf("--dry-run lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(dry); !os.IsNotExist(err) {
		t.Errorf("--dry-run wrote %s (%v)", dry, err)
	}
}
