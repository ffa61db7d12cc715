package conformance

import (
	"io"
	"os"
	"strings"
	"testing"
)

// TestBuiltinAgainstEngine runs every built-in script against mrlab's
// engine: each passes, or fails exactly as its xfail header says. With -v
// every packet is traced.
func TestBuiltinAgainstEngine(t *testing.T) {
	all, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 50 {
		t.Errorf("%d built-in tests, want at least 50", len(all))
	}
	for _, s := range all {
		t.Run(s.Name, func(t *testing.T) {
			var trace io.Writer
			if testing.Verbose() {
				trace = os.Stderr
			}
			r := Run(SimTarget{}, s, trace)
			if r.Unexpected() {
				t.Errorf("§%s %s: %s (%s)", s.Section, r.Result, r.Detail, r.XFail)
			}
		})
	}
}

// TestSimDeterministic: a script's run against the sim target is the same
// packet for packet every time (virtual time, seeded engine).
func TestSimDeterministic(t *testing.T) {
	all, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	sel, err := Select(all, "^(retx-no-go-back-n|ecn-window-cut|tlp-timing)$")
	if err != nil || len(sel) != 3 {
		t.Fatalf("selected %d: %v", len(sel), err)
	}
	for _, s := range sel {
		var a, b strings.Builder
		Run(SimTarget{}, s, &a)
		Run(SimTarget{}, s, &b)
		if a.String() != b.String() || a.Len() == 0 {
			t.Errorf("%s: two runs differ (or are empty)", s.Name)
		}
	}
}
