package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestSlurmDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"30", 30 * time.Minute}, {"5:30", 5*time.Minute + 30*time.Second}, {"1:02:03", time.Hour + 2*time.Minute + 3*time.Second},
		{"2-3", 51 * time.Hour}, {"1-0:30", 24*time.Hour + 30*time.Minute}, {"1-01:00:10", 25*time.Hour + 10*time.Second},
	} {
		if got, err := slurmDuration(tc.in); err != nil || got != tc.want {
			t.Errorf("slurmDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "x", "1:2:3:4", "a-1"} {
		if _, err := slurmDuration(bad); err == nil {
			t.Errorf("slurmDuration(%q): no error", bad)
		}
	}
}

// TestSlurmAutoSizing runs --slurm --dry-run through a built mrlab (the
// probe runs sample points in their own processes) with a fake scontrol
// that reports a small MaxArraySize: a plan of 15 tiny points becomes one
// task with a time limit from the probe, and a fixed --per-task whose
// array would pass the limit is refused with the size that fits.
func TestSlurmAutoSizing(t *testing.T) {
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "mrlab")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	fake := filepath.Join(tmp, "path")
	if err := os.Mkdir(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\n[ \"$1 $2\" = \"show config\" ] || exit 1\necho 'MaxArraySize            = 4'\n"
	if err := os.WriteFile(filepath.Join(fake, "scontrol"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string, error) {
		cmd := exec.Command(bin, append([]string{"experiment", "incast", "--scale", "tiny", "--slurm", "--out", filepath.Join(tmp, "sweep"), "--dry-run", "--mrlab", "/opt/mrlab"}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+fake+":"+os.Getenv("PATH"))
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	// --min-task 10m: tiny points (about a second each) all fit one
	// task on any machine this test runs on.
	out, errs, err := run("--min-task", "10m")
	if err != nil {
		t.Fatalf("auto sizing: %v\n%s", err, errs)
	}
	t.Logf("stderr:\n%s", errs)
	for _, re := range []string{
		`--probe ran \d+ sample points here \(incast/`,
		`15 points in 1 array tasks, 15 per task \(--per-task auto: tasks of at least 10m0s, at most 4 of them: MaxArraySize 4, from scontrol show config\)`,
	} {
		if !regexp.MustCompile(re).MatchString(errs) {
			t.Errorf("stderr lacks %s", re)
		}
	}
	limit := regexp.MustCompile(`--time (\d+:\d\d:00) per task`).FindStringSubmatch(errs)
	if limit == nil {
		t.Fatalf("stderr names no --time")
	}
	for _, want := range []string{"#SBATCH --array=0-0\n", "chunks=(0-14)\n", "#SBATCH --time=0:10:00\n", "#SBATCH --time=" + limit[1] + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("scripts lack %q:\n%s", want, out)
		}
	}
	// --min-task 0 would give each point a task: 15 indices past 4,
	// packed to 4 per task.
	if _, errs, err = run("--min-task", "0s"); err != nil || !strings.Contains(errs, "15 points in 4 array tasks, 4 per task") {
		t.Errorf("--min-task 0 under MaxArraySize 4: %v\n%s", err, errs)
	}
	if _, errs, err = run("--per-task", "1", "--time", "1:00"); err == nil || !strings.Contains(errs, "use --per-task 4 or more") {
		t.Errorf("--per-task 1 past MaxArraySize 4: %v\n%s", err, errs)
	}
	if _, errs, err = run("--time", "0:00:01"); err != nil || !strings.Contains(errs, "warning: --time 0:00:01 is less than the longest task's estimate") {
		t.Errorf("--time below the estimate: %v\n%s", err, errs)
	}
}
