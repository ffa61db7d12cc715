package main

import (
	"strings"
	"testing"
)

// TestSimStrict: a run whose goodput collapses (RoCEv2's go-back-N on 5%
// random loss) warns on stderr and exits 0; with --strict it exits 1. A
// clean run is quiet either way.
func TestSimStrict(t *testing.T) {
	collapse := []string{"sim", "b2b", "--workload", "write_bw", "--transport", "rocev2", "--iters", "100", "--impair", "all=loss random 5%"}
	for _, tc := range []struct {
		args []string
		code int
		warn bool
	}{
		{collapse, 0, true},
		{append(collapse[:len(collapse):len(collapse)], "--strict"), 1, true},
		{[]string{"sim", "b2b", "--workload", "write_bw", "--iters", "100", "--strict"}, 0, false},
	} {
		code, out, errOut := mrlab(tc.args...)
		if code != tc.code || strings.Contains(errOut, "warning: sim write_bw") != tc.warn {
			t.Errorf("%v: exit %d (want %d), stderr %q", tc.args, code, tc.code, errOut)
		}
		if tc.warn && !strings.Contains(out, "goodput sanity                  WARNING") {
			t.Errorf("%v: summary does not warn:\n%s", tc.args, out)
		}
	}
}
