package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/transport/metaroce/conformance"
)

// TestConformCLI: the default run passes against mrlab's engine; --json
// has the shape; --tap and --junit are well formed; a planted
// fault fails the run with exit status 1; bad flags are usage errors.
func TestConformCLI(t *testing.T) {
	code, out, errOut := runCLI(t, "conform", "--run", "§4|^setup-accept$")
	if code != 0 || !strings.Contains(out, "0 failed") {
		t.Fatalf("conform: exit %d\n%s\n%s", code, out, errOut)
	}

	code, out, _ = runCLI(t, "conform", "--run", "^sack-", "--json")
	var rep struct {
		Tests []struct{ Name, Section, Result, Detail string } `json:"tests"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("--json: exit %d, %v\n%s", code, err, out)
	}
	if len(rep.Tests) < 4 {
		t.Fatalf("--json: %d tests, want the 4+ sack- tests", len(rep.Tests))
	}
	for _, r := range rep.Tests {
		if r.Name == "" || r.Section == "" || r.Result != "pass" {
			t.Errorf("--json test %+v", r)
		}
	}

	junit := filepath.Join(t.TempDir(), "out.xml")
	code, out, _ = runCLI(t, "conform", "--run", "^ecn-", "--tap", "--mutate", "ignore-ecn", "--junit", junit)
	if code != 1 || !strings.HasPrefix(out, "TAP version 13\n1..") || !strings.Contains(out, "not ok") {
		t.Fatalf("--tap with a planted fault: exit %d\n%s", code, out)
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var suite struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
	}
	if err := xml.Unmarshal(b, &suite); err != nil || suite.Tests < 3 || suite.Failures < 1 {
		t.Fatalf("--junit: %+v %v\n%s", suite, err, b)
	}

	for _, bad := range [][]string{
		{"conform", "--json", "--tap"},
		{"conform", "--target", "tcp:1.2.3.4"},
		{"conform", "--run", "("},
		{"conform", "--mutate", "nonsense"},
		{"conform", "--target", "udp:198.18.0.2", "--mutate", "ignore-ecn"},
		{"conform", "--dilation", "5"},
	} {
		if code, _, errOut := runCLI(t, bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)\n%s", bad, code, errOut)
		}
	}
}

// TestConformServeControlLoopback: the unauthenticated control channel
// listens on loopback by default; any other address warns.
func TestConformServeControlLoopback(t *testing.T) {
	code, out, errs := runCLI(t, "conform", "serve", "--listen", "127.0.0.1", "--port", "47991", "--control-port", "47992", "--for", "100ms")
	if code != 0 || !strings.Contains(out, "control on tcp 127.0.0.1:47992") || strings.Contains(errs, "warning") {
		t.Errorf("default: exit %d, stdout %q, stderr %q; want control on 127.0.0.1 and no warning", code, out, errs)
	}
	code, out, errs = runCLI(t, "conform", "serve", "--listen", "127.0.0.1", "--port", "47993", "--control-port", "47994", "--control-listen", "0.0.0.0", "--for", "100ms")
	if code != 0 || !strings.Contains(out, "control on tcp 0.0.0.0:47994") || !strings.Contains(errs, "warning: conform serve: the control channel on 0.0.0.0 is unauthenticated") {
		t.Errorf("--control-listen 0.0.0.0: exit %d, stdout %q, stderr %q; want a warning", code, out, errs)
	}
	if code, _, errs = runCLI(t, "conform", "serve", "--control-listen", "::1"); code != 2 {
		t.Errorf("--control-listen ::1: exit %d (%s), want a usage error", code, errs)
	}
}

// TestConformProgress: each test's result is printed as it ends, in
// order, before the next runs (a remote target's run lasts minutes), and
// the report on stdout stays whole.
func TestConformProgress(t *testing.T) {
	all, err := conformance.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	sel, err := conformance.Select(all, "^setup-accept$|^sack-")
	if err != nil || len(sel) < 2 {
		t.Fatalf("select: %d, %v", len(sel), err)
	}
	// The clock says how many scripts had ended when each line was
	// printed: progress lines must not wait for the end.
	var lines []string
	w := writerFunc(func(p []byte) (int, error) { lines = append(lines, string(p)); return len(p), nil })
	var ticks int
	clock := func() time.Time { ticks++; return time.Unix(int64(ticks), 0) }
	res := runConform(conformance.SimTarget{}, sel, nil, w, clock)
	if len(lines) != len(sel) || len(res) != len(sel) {
		t.Fatalf("%d progress lines for %d tests:\n%s", len(lines), len(sel), strings.Join(lines, ""))
	}
	for i, l := range lines {
		want := fmt.Sprintf("conform: [%d/%d] %s %s (1s, %ds so far)\n", i+1, len(sel), sel[i].Name, res[i].Result, 2*i+2)
		if l != want {
			t.Errorf("line %d: %q, want %q", i, l, want)
		}
	}
	code, out, errOut := runCLI(t, "conform", "--run", "^setup-accept$", "--progress")
	if code != 0 || !strings.Contains(errOut, "conform: [1/1] setup-accept pass") || strings.Contains(out, "[1/1]") {
		t.Errorf("conform --progress: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
