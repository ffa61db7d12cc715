// Package python holds mrlab's Python package (stdlib only; pip install
// ./python) and the Go test that runs its tests, so `go test ./...` (and
// CI) runs them with the system's python3: the unit tests against a fake
// lab, and the plane-failure drill (examples/plane_failure_drill.py) on a
// real live lab.
package python_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs/hostns"
	"github.com/mrlab/mrlab/labs/live"
)

func TestUnit(t *testing.T) {
	py := testenv.RequireCommand(t, "python3")
	out, err := exec.Command(py, "-m", "unittest", "discover", "-s", "tests", "-v").CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^Ran [1-9]\d* tests`).Match(out) {
		t.Fatalf("no tests ran:\n%s", out)
	}
}

// TestPlaneFailureDrill runs the drill script on lesson 7's lab: a
// verified transfer survives plane 1 failing under it.
func TestPlaneFailureDrill(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTUN(t)
	testenv.RequireNamespaces(t)
	py := testenv.RequireCommand(t, "python3")
	testenv.RequireCommand(t, "ping")
	bin := t.TempDir()
	for _, p := range []string{"cmd/mrlab", "examples/rdma-write"} {
		c := exec.Command("go", "build", "-o", bin, "./"+p)
		c.Dir = ".."
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", p, err, out)
		}
	}
	runDir, name := t.TempDir(), fmt.Sprintf("pydrill%d", os.Getpid()%100000)
	t.Cleanup(func() {
		st, err := live.ReadState(runDir, name)
		if err != nil {
			return // the drill took its lab down
		}
		exec.Command(filepath.Join(bin, "mrlab"), "down", "--run-dir", runDir, name).Run()
		for _, ns := range st.Namespaces {
			if hostns.Exists(ns) {
				t.Errorf("%s left behind", ns)
				hostns.Delete(ns)
			}
		}
	})
	c := exec.Command(py, "examples/plane_failure_drill.py", "--mrlab", filepath.Join(bin, "mrlab"),
		"--rdma-write", filepath.Join(bin, "rdma-write"), "--name", name, "--run-dir", runDir, "--messages", "300")
	c.Env = append(os.Environ(), "PYTHONPATH=.")
	out, err := c.CombinedOutput()
	t.Logf("drill:\n%s", out)
	if err != nil {
		t.Fatalf("drill: %v", err)
	}
	for _, want := range []string{
		"ping_all: 0% lost",
		"plane 1 down after",
		"data verified: 300 messages, 314572800 bytes",
		"h0-p1: DOWN",
		"plane 1 up; ping_all: 0% lost",
		"drill passed",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("drill output lacks %q", want)
		}
	}
	if _, err := live.ReadState(runDir, name); err == nil {
		t.Errorf("lab %s still running after the drill", name)
	}
}
