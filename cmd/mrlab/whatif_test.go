package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestWhatIfs: --set, --impair and --fault change the run as editing the
// lab file would.
func TestWhatIfs(t *testing.T) {
	base := rdmaJSON(t, "b2b", "--workload", "write_bw", "-n", "200").Results[0]
	slow := rdmaJSON(t, "b2b", "--workload", "write_bw", "-n", "200", "--set", "links.default.rate=10gbit").Results[0]
	if base.GoodputGbps < 90 || slow.GoodputGbps > 10 || slow.GoodputGbps < 9 {
		t.Errorf("goodput %.2f Gb/s at 100gbit, %.2f at --set links.default.rate=10gbit", base.GoodputGbps, slow.GoodputGbps)
	}
	lossy := rdmaJSON(t, "b2b", "--workload", "write_bw", "-n", "200", "--impair", "all=loss 2%").Results[0]
	if base.Retransmits != 0 || lossy.Retransmits == 0 || lossy.Drops["fabric fcs-error"] == 0 {
		t.Errorf("retransmissions %d without, %d with --impair all=loss 2%% (drops %v)", base.Retransmits, lossy.Retransmits, lossy.Drops)
	}
	one := rdmaJSON(t, "b2b", "--workload", "write_bw", "-n", "200", "--impair", "p0-h0-h1:ba=loss 50%").Results[0]
	if one.Drops["fabric fcs-error"] == 0 {
		t.Errorf("--impair p0-h0-h1:ba: no impairment drops (%v)", one.Drops)
	}

	// A fault from the command line fires like the file's, also with
	// --no-faults (which drops only the file's).
	code, out, errs := runCLI(t, "sim", "leafspine-faults", "--workload", "udp", "--duration", "1ms", "--no-faults",
		"--fault", "200us plane 0 down", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Faults []struct {
			At, Fault, Result string
		} `json:"faults"`
		WhatIf string `json:"what_if"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Faults) != 1 || rep.Faults[0].Fault != "plane 0 down" || rep.Faults[0].At != "200us" || rep.Faults[0].Result != "ok" ||
		rep.WhatIf != `--fault "200us plane 0 down"` {
		t.Errorf("faults %+v, what-if %q", rep.Faults, rep.WhatIf)
	}
}

// TestWhatIfErrors: mistakes in what-if flags are usage errors naming the
// flag.
func TestWhatIfErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "links.default.rate=10gbt"}, `mrlab: --set links.default.rate=10gbt: links.default.rate: "10gbt" is not a rate`},
		{[]string{"--set", "links.default.rate"}, "--set links.default.rate: want KEY=VALUE"},
		{[]string{"--set", "links.defualt.rate=1gbit"}, "--set links.defualt.rate=1gbit: links.defualt: unknown field"},
		{[]string{"--impair", "loss 1%"}, "--impair loss 1%: want TARGET=NETEM"},
		{[]string{"--impair", "all=loss 1"}, ""},
		{[]string{"--impair", "h0-p7=loss 1%"}, `--impair h0-p7=loss 1%: no link named "h0-p7"`},
		{[]string{"--impair", "all=los 1%"}, `--impair all=los 1%: parsing impairment "los 1%"`},
		{[]string{"--fault", "1ms plane 9 down"}, "--fault 1ms plane 9 down: no plane 9"},
		{[]string{"--fault", "later"}, "--fault later: want AT TARGET NAME ACTION"},
	} {
		code, _, errs := runCLI(t, append([]string{"sim", "b2b", "--workload", "udp", "--duration", "100us"}, tc.args...)...)
		if tc.want == "" {
			if code != 0 {
				t.Errorf("%v: exit %d: %s", tc.args, code, errs)
			}
			continue
		}
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}
