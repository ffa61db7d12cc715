package main

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
