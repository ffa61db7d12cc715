package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mrlab/mrlab/labs/hostns"
	"github.com/mrlab/mrlab/labs/live"
)

// cliLab is a live lab a test drives through the mrlab binary, as a user
// would: its own build of mrlab, run directory and lab name (namespace
// names are machine-wide, so the name carries the test's pid).
type cliLab struct {
	bin  string // the mrlab binary
	dir  string // MRLAB_RUN_DIR
	name string // the lab's name
	file string // the lab file: labs/live/testdata/mini.yaml renamed
}

// newCLILab builds mrlab and writes the mini lab under a name starting
// with prefix. Cleanup takes the lab down and checks that none of the
// namespaces it recorded is left (deleting, by exact name, any that is).
func newCLILab(t *testing.T, prefix string) *cliLab {
	t.Helper()
	l := &cliLab{bin: filepath.Join(t.TempDir(), "mrlab"), dir: t.TempDir(), name: fmt.Sprintf("%s%d", prefix, os.Getpid()%100000)}
	if out, err := exec.Command("go", "build", "-o", l.bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building mrlab: %v\n%s", err, out)
	}
	src, err := os.ReadFile("../../labs/live/testdata/mini.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l.file = filepath.Join(t.TempDir(), "lab.yaml")
	if err := os.WriteFile(l.file, []byte(strings.Replace(string(src), "name: mini", "name: "+l.name, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Remove only what this test's lab recorded.
		st, err := live.ReadState(l.dir, l.name)
		l.sh(t, "down", l.name)
		if err != nil {
			return
		}
		for _, ns := range st.Namespaces {
			if hostns.Exists(ns) {
				t.Errorf("%s left behind", ns)
				hostns.Delete(ns)
			}
		}
	})
	return l
}

// cmd is mrlab with args, in the lab's run directory.
func (l *cliLab) cmd(args ...string) *exec.Cmd {
	c := exec.Command(l.bin, args...)
	c.Env = append(os.Environ(), "MRLAB_RUN_DIR="+l.dir)
	return c
}

// sh runs mrlab with args and returns its exit code and output.
func (l *cliLab) sh(t *testing.T, args ...string) (int, string) {
	t.Helper()
	out, err := l.cmd(args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return 0, string(out)
}
