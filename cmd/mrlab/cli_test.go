package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/sim"
)

// TestHelpListsSubcommands: help for a command group lists its commands,
// however it is asked for.
func TestHelpListsSubcommands(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"help", "lab"}, []string{"COMMANDS:", "validate", "show", "list"}},
		{[]string{"lab", "--help"}, []string{"COMMANDS:", "validate", "show", "list"}},
		{[]string{"lab"}, []string{"COMMANDS:", "validate", "show", "list"}},
		{[]string{"help", "fault"}, []string{"COMMANDS:", "link", "switch", "plane"}},
		{[]string{"help", "fault", "link"}, []string{"mrlab fault link", "NAME[:ab|:ba] down|up|impair NETEM... [dir ab|ba]"}},
		{[]string{"lab", "help", "validate"}, []string{"mrlab lab validate", "FILE|NAME"}},
		{[]string{"help"}, []string{"COMMANDS:", "sim", "version", "--version"}},
		{[]string{"help", "sim"}, []string{"perftest (same flags as ib_write_bw & co.)", "--tx-depth value, -t value, --qd value"}},
	} {
		code, out, errs := runCLI(t, tc.args...)
		if code != 0 {
			t.Errorf("%v: exit %d: %s", tc.args, code, errs)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, w, out)
			}
		}
		if strings.Contains(out, "mrlab mrlab") {
			t.Errorf("%v: doubled name:\n%s", tc.args, out)
		}
	}
}

// TestSuggestions: a mistyped command or flag is a usage error that
// suggests the closest name.
func TestSuggestions(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"simm"}, `unknown command "simm" for mrlab (did you mean mrlab sim?)`},
		{[]string{"help", "simm"}, "did you mean mrlab sim?"},
		{[]string{"lab", "valdate", "b2b"}, "did you mean mrlab lab validate?"},
		{[]string{"lab", "help", "shwo"}, "did you mean mrlab lab show?"},
		{[]string{"fault", "lnk"}, "did you mean mrlab fault link?"},
		{[]string{"sim", "--sed", "3"}, "flag provided but not defined: -sed (did you mean --seed?)"},
		{[]string{"sim", "b2b", "--itres", "5"}, "(did you mean --iters?)"},
		{[]string{"sim", "b2b", "--workload", "write_bw", "--report-gbits"}, "(did you mean --report_gbits?)"},
		{[]string{"xyzzy"}, "(see mrlab help)"},
	} {
		code, _, errs := runCLI(t, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}

// TestVersion: mrlab version and --version print the build's version.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, _ := runCLI(t, args...)
		if code != 0 || !strings.HasPrefix(out, "mrlab ") || !strings.Contains(out, "go1.") {
			t.Errorf("%v: exit %d, %q", args, code, out)
		}
	}
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/mrlab/mrlab", Version: "v0.3.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := formatVersion(bi), "v0.3.0 rev 0123456789ab (2026-01-02T03:04:05Z) +local changes go1.26.0"; !strings.HasPrefix(got, want) {
		t.Errorf("formatVersion = %q, want prefix %q", got, want)
	}
	if got := formatVersion(&debug.BuildInfo{}); !strings.HasPrefix(got, "(devel) ") {
		t.Errorf("no build info: %q", got)
	}
}

// TestLabNamesAndBytesRates: lab validate rejects the names up rejects,
// and warns about tc's bytes-per-second spelling.
func TestLabNamesAndBytesRates(t *testing.T) {
	bad := writeFile(t, "bad.yaml", "name: my lab\ntopology: {backtoback: {planes: 1}}\n")
	code, _, errs := runCLI(t, "lab", "validate", bad)
	if code != 1 || !strings.Contains(errs, bad+`:1:7: name: lab name "my lab": character ' '`) {
		t.Errorf("exit %d: %s", code, errs)
	}
	bps := writeFile(t, "bps.yaml", "name: fast\ntopology: {backtoback: {planes: 1}}\nlinks:\n  default: {rate: 100Gbps}\n")
	code, out, errs := runCLI(t, "lab", "validate", bps)
	if code != 0 || !strings.Contains(out, "ok: fast") ||
		!strings.Contains(errs, `warning: `+bps+`:4:19: links.default.rate: "100Gbps" is 800gbit: tc reads "bps" as bytes per second (write 100gbit`) {
		t.Errorf("exit %d:\n%s%s", code, out, errs)
	}
}

// TestExitStatus: usage mistakes exit 2, failures of a run 1.
func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"sim", "b2b", "--workload", "write_bw", "--from", "h9"}, 2},
		{[]string{"sim", "b2b", "--seed", "0"}, 2},
		{[]string{"version", "extra"}, 2},
		{[]string{"help", "lab", "nosuch"}, 2},
		{[]string{"sim", "/nonexistent.yaml"}, 1},
		{[]string{"up", "--run-dir", "/nonexistent/run", "--mtu", "0", "b2b"}, 2},
		{[]string{"up", "--run-dir", "/nonexistent/run", "--timeout", "0s", "b2b"}, 2},
		{[]string{"sim", "b2b", "--workload", "write_bw", "-n", "1000", "--timeout", "10us"}, 1},
	} {
		if code, _, errs := runCLI(t, tc.args...); code != tc.code {
			t.Errorf("%v: exit %d, want %d: %s", tc.args, code, tc.code, errs)
		}
	}
}

// TestProgressLines: with stderr not a terminal, a long run prints a line
// after the first few seconds and then every progressEvery, not on every
// update.
func TestProgressLines(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, "sim x", 10*sim.Millisecond)
	wall := p.start
	p.now = func() time.Time { return wall }
	for i := 1; i <= 100; i++ {
		wall = wall.Add(time.Second / 2) // 50 s of wall time in all
		p.update(sim.Time(i) * 100 * sim.Microsecond)
	}
	p.finish()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	// First at 3 s, then every 10 s: 3, 13, 23, 33, 43.
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "mrlab: sim x: 600us of 10ms virtual (6%), 3s elapsed") {
		t.Errorf("%d lines:\n%s", len(lines), b.String())
	}
}
