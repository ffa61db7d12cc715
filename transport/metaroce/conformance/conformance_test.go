package conformance

import (
	"os"
	"testing"
)

// TestBuiltinAgainstEngine runs every built-in script against mrlab's
// engine: each passes, or fails exactly as its xfail header says.
func TestBuiltinAgainstEngine(t *testing.T) {
	all, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		t.Run(s.Name, func(t *testing.T) {
			var trace *os.File
			if testing.Verbose() {
				trace = os.Stderr
			}
			r := Run(SimTarget{}, s, traceOrNil(trace))
			if r.Unexpected() {
				t.Errorf("§%s %s: %s (%s)", s.Section, r.Result, r.Detail, r.XFail)
			}
		})
	}
}
