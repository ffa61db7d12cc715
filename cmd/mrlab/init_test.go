package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// initAllocs runs `mrlab version` in a child process of the test binary
// under GODEBUG=inittrace=1 and returns the bytes each package's init
// allocated, by import path.
func initAllocs(t *testing.T) map[string]int64 {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "version")
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "GODEBUG=inittrace=1")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("mrlab version: %v\n%s", err, errOut.String())
	}
	// init PKG @T ms, C ms clock, N bytes, M allocs
	allocs := map[string]int64{}
	for line := range strings.Lines(errOut.String()) {
		f := strings.Fields(line)
		if len(f) < 10 || f[0] != "init" || f[8] != "bytes," {
			continue
		}
		var n int64
		if _, err := fmt.Sscan(f[7], &n); err != nil {
			t.Fatalf("inittrace line %q: %v", line, err)
		}
		allocs[f[1]] = n
	}
	if len(allocs) < 50 {
		t.Fatalf("inittrace gave %d packages, want the ~160 mrlab links:\n%s", len(allocs), errOut.String())
	}
	return allocs
}

// TestInitAllocations holds what mrlab's own package initialisation costs
// every mrlab process (issue #29: the binary's start-up is most of a small
// run's RSS): about 75 KB. gonum.org/v1/plot's init parses its 12 fonts
// (about 184 KB allocated, 2.1 MiB of font data paged in) whether or not
// the process draws; making that lazy needs upstream's font cache to be
// lazy (docs/speed.md), so it is logged here, not held.
func TestInitAllocations(t *testing.T) {
	allocs := initAllocs(t)
	var own int64
	for pkg, n := range allocs {
		if strings.HasPrefix(pkg, "github.com/mrlab/mrlab/") {
			own += n
		}
	}
	t.Logf("inits: gonum/plot %d bytes, mrlab's packages %d bytes", allocs["gonum.org/v1/plot"], own)
	if own > 96<<10 {
		t.Errorf("mrlab's own package inits allocated %d bytes, want under 96 KiB: build tables on first use", own)
	}
}
