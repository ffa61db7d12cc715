package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// runCLI runs the CLI in-process and returns its exit status and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(append([]string{"mrlab"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// squash collapses runs of spaces, so tests need not count columns.
func squash(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}

func writeFile(t *testing.T, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLabValidate(t *testing.T) {
	good := writeFile(t, "good.yaml", "name: good\ntopology: {backtoback: {planes: 2}}\n")
	bad := writeFile(t, "bad.yaml", "name: bad\ntopology:\n  leafspine: {leaves: 2, hosts_per_leaf: 2}\nlinks:\n  default:\n    rate: 100gbt\nfaults:\n  - {at: 1ms, link: p0-leaf9-spine0, action: down}\n")
	code, out, errs := runCLI(t, "lab", "validate", good, bad, "b2b")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{good + ": ok: good, 2 hosts, 0 switches, 2 links, 2 planes, 0 faults", "labs/examples/b2b.yaml: ok: b2b"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	// The rate is wrong at line 6; the fault's link is checked only once
	// the values are right, so one problem at a time here.
	for _, want := range []string{
		bad + `:6:11: links.default.rate: "100gbt" is not a rate (want e.g. 100gbit`,
		"mrlab: 1 of 3 labs have errors",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	fixed := writeFile(t, "bad2.yaml", "name: bad\ntopology:\n  leafspine: {leaves: 2, hosts_per_leaf: 2}\nfaults:\n  - {at: 1ms, link: p0-leaf9-spine0, action: down}\n")
	code, _, errs = runCLI(t, "lab", "validate", fixed)
	want := fixed + `:5:21: faults[0].link: no link named "p0-leaf9-spine0" in this lab (did you mean "p0-leaf0-spine0"?)`
	if code != 1 || !strings.Contains(errs, want) {
		t.Errorf("exit %d, stderr:\n%s\nwant %s", code, errs, want)
	}
}

func TestLabShow(t *testing.T) {
	code, out, errs := runCLI(t, "lab", "show", "--dot", "leafspine")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.HasPrefix(out, `graph "leafspine" {`) || strings.Count(out, " -- ") != 24 {
		t.Errorf("not the leafspine graph:\n%s", out)
	}
	// Flags may follow the lab, as people type them.
	code, out2, _ := runCLI(t, "lab", "show", "leafspine", "--dot")
	if code != 0 || out2 != out {
		t.Errorf("lab show leafspine --dot: exit %d, differs from --dot leafspine", code)
	}
	code, out, errs = runCLI(t, "lab", "show")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"planes: 2", "hosts: 8", "switches: 8 (4 leaf, 4 spine)", "links: 24 (16 host, 8 fabric)",
		"h4 198.18.1.1 2", "1 spine 2 p1-spine0 p1-spine1",
		"host 16 100gbit 1us 512KiB step 64KiB off none", "fabric 8 200gbit 1us 512KiB step 64KiB off loss random 0.1%",
	} {
		if !strings.Contains(squash(out), want) {
			t.Errorf("lab show lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCLI(t, "lab", "show", "--json", "b2b")
	var obj map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &obj) != nil {
		t.Fatalf("lab show --json: exit %d, not JSON:\n%s", code, out)
	}
	if obj["lab"] != "b2b" || obj["planes"] != 1.0 {
		t.Errorf("lab show --json: lab %v planes %v", obj["lab"], obj["planes"])
	}
}

func TestLabList(t *testing.T) {
	code, out, _ := runCLI(t, "lab", "list")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"b2b", "leafspine ", "leafspine-64h-8p", "64"} {
		if !strings.Contains(out, want) {
			t.Errorf("lab list lacks %q:\n%s", want, out)
		}
	}
}

// simJSON runs a short sim and decodes its JSON.
func simJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	code, out, errs := runCLI(t, append([]string{"sim", "--workload", "udp", "--json", "--duration", "200us"}, args...)...)
	if code != 0 {
		t.Fatalf("sim %v: exit %d: %s", args, code, errs)
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		t.Fatalf("sim %v: not one JSON object: %v\n%s", args, err, out)
	}
	return obj
}

// TestSimTraceHash: the same lab and seed give the same trace hash twice,
// another seed another one.
func TestSimTraceHash(t *testing.T) {
	a := simJSON(t, "--trace-hash")
	b := simJSON(t, "--trace-hash", "leafspine")
	c := simJSON(t, "--trace-hash", "--seed", "2")
	ha, hb, hc := a["trace_hash"], b["trace_hash"], c["trace_hash"]
	if ha == nil || ha != hb {
		t.Errorf("same lab and seed: hashes %v and %v", ha, hb)
	}
	if hc == ha {
		t.Errorf("seeds 1 and 2: same hash %v", ha)
	}
	// The seed flag may follow the lab.
	if d := simJSON(t, "--trace-hash", "leafspine", "--seed", "2"); d["trace_hash"] != hc {
		t.Errorf("--seed after the lab: hash %v, want %v", d["trace_hash"], hc)
	}
	if a["seed"] != 1.0 || c["seed"] != 2.0 {
		t.Errorf("seeds reported %v and %v", a["seed"], c["seed"])
	}
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("same run, different reports:\n%s", diff)
	}
}

// TestSimReport checks the report's parts against each other: flows
// deliver what was offered less what the fabric dropped.
func TestSimReport(t *testing.T) {
	r := simJSON(t, "--load", "0.3")
	flows, _ := r["flows"].([]any)
	if len(flows) != 16 {
		t.Fatalf("%d flows, want 16 (8 hosts x 2 planes)", len(flows))
	}
	var sent, lost float64
	for _, f := range flows {
		m := f.(map[string]any)
		if m["offered_gbps"] != 30.0 {
			t.Errorf("flow %v offered %v Gbit/s, want 30", m["flow"], m["offered_gbps"])
		}
		sent += m["sent"].(float64)
		lost += m["lost"].(float64)
	}
	var dropped float64
	for _, d := range r["drops"].([]any) {
		m := d.(map[string]any)
		if m["cause"] == "total" {
			dropped = m["packets"].(float64)
		}
	}
	if sent == 0 || lost != dropped {
		t.Errorf("sent %v, flows lost %v, fabric dropped %v: want lost == dropped", sent, lost, dropped)
	}
	planes := r["planes"].([]any)
	if len(planes) != 2 {
		t.Fatalf("%d planes", len(planes))
	}
	for _, p := range planes {
		m := p.(map[string]any)
		if u := m["host_util"].(float64); u < 25 || u > 31 {
			t.Errorf("plane %v host link utilisation %v%%, want about 30%%", m["plane"], u)
		}
	}
}

// TestSimFaults runs a lab with a timeline and checks it fired and hurt.
func TestSimFaults(t *testing.T) {
	lab := writeFile(t, "faults.yaml", `name: faults
topology:
  leafspine: {planes: 2, leaves: 2, spines: 2, hosts_per_leaf: 2}
faults:
  - {at: 50us, link: p0-leaf0-spine0, action: down}
  - {at: 100us, plane: 1, action: down}
  - {at: 150us, link: p0-leaf0-spine0, action: up}
  - {at: 1s, plane: 0, action: down}
`)
	r := simJSON(t, lab)
	faults := r["faults"].([]any)
	var got []string
	for _, f := range faults {
		m := f.(map[string]any)
		got = append(got, m["at"].(string)+" "+m["fault"].(string)+" "+m["result"].(string))
	}
	want := []string{"50us link p0-leaf0-spine0 down ok", "100us plane 1 down ok", "150us link p0-leaf0-spine0 up ok",
		"1s plane 0 down not reached: after the run's 200us"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("faults (-want +got):\n%s", diff)
	}
	var linkDown float64
	for _, d := range r["drops"].([]any) {
		m := d.(map[string]any)
		if m["cause"] == "link-down" || m["cause"] == "black-hole" {
			linkDown += m["packets"].(float64)
		}
	}
	if linkDown == 0 {
		t.Error("a failed link and plane dropped nothing")
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"nosuch"}, 2, `unknown command "nosuch"`},
		{[]string{"lab", "nosuch"}, 2, `unknown command "nosuch" for mrlab lab`},
		{[]string{"sim", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"sim", "b2b", "--bogus"}, 2, "flag provided but not defined: --bogus"},
		{[]string{"sim", "--duration", "ten"}, 2, `--duration "ten"`},
		{[]string{"sim", "--workload", "nosuch"}, 2, `--workload "nosuch": want one of compare, write_bw`},
		{[]string{"sim", "--workload", "udp", "--transport", "rocev2"}, 2, "workload udp sends plain UDP"},
		{[]string{"sim", "--workload", "udp", "--load", "2"}, 2, "--load 2"},
		{[]string{"sim", "--transport", "tcp"}, 2, "unknown transport tcp"},
		{[]string{"sim", "--capture", "h0"}, 2, "follow one run"},
		{[]string{"sim", "--workload", "write_bw", "--timeout", "soon"}, 2, `--timeout "soon"`},
		{[]string{"sim", "a", "b"}, 2, "want at most one lab, got 2"},
		{[]string{"lab", "validate"}, 2, "want one or more lab files"},
		{[]string{"sim", "nosuchlab"}, 1, `"nosuchlab" is neither a lab file nor a built-in lab`},
		{[]string{"lab", "show", "/nonexistent/x.yaml"}, 1, "no such file"},
	} {
		code, _, errs := runCLI(t, tc.args...)
		if code != tc.code || !strings.HasPrefix(errs, "mrlab: ") || !strings.Contains(errs, tc.msg) {
			t.Errorf("mrlab %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errs, tc.code, tc.msg)
		}
	}
}

func TestReportJSONAndText(t *testing.T) {
	r := &Report{}
	r.Fact("name", "name", "x")
	r.Fact("n", "count", 3)
	tb := r.Table("rows", "Rows", Col("a", "A", ""), Col("b", "B", "%.1f"))
	tb.Add("one", 1.25)
	tb.Add("two", 10.0)
	var text, js bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	wantText := "name:   x\ncount:  3\n\nRows\n  A       B\n  one   1.2\n  two  10.0\n"
	if diff := cmp.Diff(wantText, text.String()); diff != "" {
		t.Errorf("text (-want +got):\n%s", diff)
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	wantJSON := "{\n  \"name\": \"x\",\n  \"n\": 3,\n  \"rows\": [\n    {\"a\": \"one\", \"b\": 1.25},\n    {\"a\": \"two\", \"b\": 10}\n  ]\n}\n"
	if diff := cmp.Diff(wantJSON, js.String()); diff != "" {
		t.Errorf("json (-want +got):\n%s", diff)
	}
}
