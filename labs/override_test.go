package labs

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
)

// mo returns a function that takes an override constructor's results and
// fails t on an error.
func mo(t *testing.T) func(Override, error) Override {
	return func(o Override, err error) Override {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
}

func set(t *testing.T, kv string) Override {
	t.Helper()
	k, v, _ := strings.Cut(kv, "=")
	return mo(t)(SetOverride("--set "+kv, k, v))
}

// TestSetOverride: --set reaches any key, creating mappings on the way,
// and the result is the lab the edited file would be.
func TestSetOverride(t *testing.T) {
	lab, err := ResolveWith("leafspine", []Override{
		set(t, "links.default.rate=10gbit"),
		set(t, "topology.leafspine.planes=4"),
		set(t, "links.host.ecn={step: 32KiB}"),
		set(t, "seed=7"),
	})
	if err != nil {
		t.Fatal(err)
	}
	// The same lab, its file edited by hand.
	src, _ := Source("leafspine")
	text := strings.Replace(string(src), "seed: 1", "seed: 7", 1)
	text = strings.Replace(text, "leafspine: {planes: 2,", "leafspine: {planes: 4,", 1)
	text = strings.Replace(text, "default: {rate: 100gbit,", "default: {rate: 10gbit,", 1)
	text = strings.Replace(text, "links:\n", "links:\n  host: {ecn: {step: 32KiB}}\n", 1)
	edited, err := Parse("leafspine.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(edited.Topology(), lab.Topology(), cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})); d != "" || lab.Seed != 7 || lab.Topology().Planes != 4 {
		t.Errorf("--set differs from editing the file (-edited +set):\n%s", d)
	}
	// A list item by index.
	lab, err = ResolveWith("leafspine-faults", []Override{set(t, "faults[0].at=7ms")})
	if err != nil {
		t.Fatal(err)
	}
	if lab.Faults[0].At != 7*sim.Millisecond {
		t.Errorf("faults[0].at = %v", lab.Faults[0].At)
	}
}

// TestOverrideErrorsNameTheFlag: what a flag wrote is checked like the
// file, and the error names the flag, not a file position.
func TestOverrideErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		kv, want string
	}{
		{"links.default.rate=10gbt", `--set links.default.rate=10gbt: links.default.rate: "10gbt" is not a rate`},
		{"links.default.rtae=1gbit", `--set links.default.rtae=1gbit: links.default.rtae: unknown field`},
		{"topology.leafspine.planes=0", `--set topology.leafspine.planes=0: topology.leafspine.planes:`},
		{"name=my lab", `--set name=my lab: name: lab name "my lab"`},
	} {
		_, err := ResolveWith("leafspine", []Override{set(t, tc.kv)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant %s", tc.kv, err, tc.want)
		}
		for _, e := range Errors(err) {
			if e.Flag == "" {
				t.Errorf("%s: error %v not attributed to the flag", tc.kv, e)
			}
		}
	}
	for _, tc := range []struct {
		kv, want string
	}{
		{"name.x=1", "name is not a mapping"},
		{"faults[3].at=1ms", "no list to index"},
		{"links[0]=1", "links is not a list"},
	} {
		_, err := ResolveWith("leafspine", []Override{set(t, tc.kv)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.kv, err, tc.want)
		}
	}
	_, err := ResolveWith("leafspine-faults", []Override{set(t, "faults[9].at=1ms")})
	if err == nil || !strings.Contains(err.Error(), "index 9 out of range") {
		t.Errorf("faults[9]: %v", err)
	}
	if _, err := SetOverride("--set a..b=1", "a..b", "1"); err == nil {
		t.Error("a..b accepted")
	}
	// The file's own problems keep their positions.
	_, err = ParseWith("x.yaml", []byte("name: x\ntopology: {backtoback: {planes: 1}}\nlinks: {default: {rate: fast}}\n"),
		[]Override{set(t, "seed=3")})
	if err == nil || !strings.HasPrefix(err.Error(), "x.yaml:3:") {
		t.Errorf("file error: %v", err)
	}
}

// TestImpairOverride: --impair's targets land where the lab file would
// put them.
func TestImpairOverride(t *testing.T) {
	imp := func(target string) Override {
		return mo(t)(ImpairOverride("--impair "+target+"=loss 2%", target, "loss 2%"))
	}
	want, _ := fabric.ParseImpairment("loss 2%")
	fabricLoss, _ := fabric.ParseImpairment("loss random 0.1%")
	for _, tc := range []struct {
		target string
		hit    func(name string, plane int, host bool) bool
	}{
		{"all", func(string, int, bool) bool { return true }},
		{"host", func(_ string, _ int, host bool) bool { return host }},
		{"fabric", func(_ string, _ int, host bool) bool { return !host }},
		{"plane:1", func(_ string, p int, _ bool) bool { return p == 1 }},
		{"p0-leaf1-spine0", func(n string, _ int, _ bool) bool { return n == "p0-leaf1-spine0" }},
	} {
		lab, err := ResolveWith("leafspine", []Override{imp(tc.target)})
		if err != nil {
			t.Fatalf("%s: %v", tc.target, err)
		}
		planes := lab.LinkPlanes()
		hits := 0
		for _, k := range lab.Topology().Links {
			host := strings.HasPrefix(k.A.Node, "h") || strings.HasPrefix(k.B.Node, "h")
			w := fabric.Impairment{}
			if !host {
				w = fabricLoss // the lab's own fabric impairment
			}
			if tc.hit(k.Name, planes[k.Name], host) {
				w = want
				hits++
			}
			if tc.target == "all" && !host {
				w = fabricLoss // links.fabric is more specific than the lab-wide impair
			}
			if k.Params.Impair != w {
				t.Errorf("%s: link %s impair %v, want %v", tc.target, k.Name, k.Params.Impair, w)
			}
		}
		if hits == 0 {
			t.Errorf("%s: no link hit", tc.target)
		}
	}
	// One direction: an impair fault at 0.
	o := mo(t)(ImpairOverride("--impair h0-p0:ab=loss 2%", "h0-p0:ab", "loss 2%"))
	lab, err := ResolveWith("leafspine", []Override{o})
	if err != nil {
		t.Fatal(err)
	}
	f := lab.Faults[len(lab.Faults)-1]
	if o.Faults != 1 || f.At != 0 || f.Name != "h0-p0" || f.Action != ActionImpair || f.Dir != DirAB || f.Impair != want {
		t.Errorf("directional impair: %+v", f)
	}
	for _, bad := range []string{"plane:x", "h0-p0:up", ":ab"} {
		if _, err := ImpairOverride("--impair "+bad+"=loss 1%", bad, "loss 1%"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	_, err = ResolveWith("leafspine", []Override{mo(t)(ImpairOverride("--impair plane:7=loss 1%", "plane:7", "loss 1%"))})
	if err == nil || !strings.Contains(err.Error(), "no links in plane 7") {
		t.Errorf("plane:7: %v", err)
	}
	_, err = ResolveWith("leafspine", []Override{mo(t)(ImpairOverride("--impair h0-p9=loss 1%", "h0-p9", "loss 1%"))})
	if err == nil || !strings.Contains(err.Error(), `--impair h0-p9=loss 1%: no link named "h0-p9" in this lab (did you mean "h0-p0"?)`) {
		t.Errorf("unknown link: %v", err)
	}
	_, err = ResolveWith("leafspine", []Override{mo(t)(ImpairOverride("--impair all=loss 1000%", "all", "loss 1000%"))})
	if err == nil || !strings.HasPrefix(err.Error(), "--impair all=loss 1000%: parsing impairment") {
		t.Errorf("bad netem: %v", err)
	}
}

// TestFaultOverride: --fault reads a fault in the lab file's words, and
// reads back what Fault.String writes.
func TestFaultOverride(t *testing.T) {
	for _, tc := range []struct {
		text string
		want Fault
	}{
		{"2ms link p0-leaf0-spine0 down", Fault{At: 2 * sim.Millisecond, Target: TargetLink, Name: "p0-leaf0-spine0", Action: ActionDown}},
		{"1ms plane 1 down", Fault{At: sim.Millisecond, Target: TargetPlane, Plane: 1, Action: ActionDown}},
		{"3ms switch p1-spine0 up", Fault{At: 3 * sim.Millisecond, Target: TargetSwitch, Name: "p1-spine0", Action: ActionUp}},
		{"500us link h0-p0 impair loss 5% dir ab", Fault{At: 500 * sim.Microsecond, Target: TargetLink, Name: "h0-p0", Action: ActionImpair, ImpairText: "loss 5%", Dir: DirAB}},
		{`4ms link h0-p0 impair "delay 10us"`, Fault{At: 4 * sim.Millisecond, Target: TargetLink, Name: "h0-p0", Action: ActionImpair, ImpairText: "delay 10us"}},
	} {
		lab, err := ResolveWith("leafspine", []Override{mo(t)(FaultOverride("--fault "+tc.text, tc.text))})
		if err != nil {
			t.Fatalf("%s: %v", tc.text, err)
		}
		f := lab.Faults[len(lab.Faults)-1]
		if f.At != tc.want.At || f.Target != tc.want.Target || f.Name != tc.want.Name || f.Plane != tc.want.Plane ||
			f.Action != tc.want.Action || f.Dir != tc.want.Dir || (tc.want.ImpairText != "" && f.ImpairText != tc.want.ImpairText) {
			t.Errorf("%s: got %+v", tc.text, f)
		}
		// Its String form reads back as the same fault.
		back, err := ResolveWith("leafspine", []Override{mo(t)(FaultOverride("--fault", f.String()))})
		if err != nil || back.Faults[len(back.Faults)-1].String() != f.String() {
			t.Errorf("%s: String %q does not read back: %v", tc.text, f.String(), err)
		}
	}
	for _, tc := range []struct{ text, want string }{
		{"2ms link", "want AT TARGET NAME ACTION"},
		{"2ms link p0-leaf9-spine0 down", `--fault 2ms link p0-leaf9-spine0 down: no link named "p0-leaf9-spine0"`},
		{"soon link h0-p0 down", `--fault soon link h0-p0 down: "soon" is not a duration`},
		{"1ms link h0-p0 explode", `--fault 1ms link h0-p0 explode: "explode" is not an action`},
		{"1ms link h0-p0 impair", `--fault 1ms link h0-p0 impair: missing`},
	} {
		o, err := FaultOverride("--fault "+tc.text, tc.text)
		if err == nil {
			_, err = ResolveWith("leafspine", []Override{o})
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.text, err, tc.want)
		}
	}
}

// FuzzSetOverride: any --set key and value give a lab or an error, never a
// panic, and an error from the value names the flag.
func FuzzSetOverride(f *testing.F) {
	for _, s := range [][2]string{
		{"links.default.rate", "10gbit"}, {"topology.backtoback.planes", "3"}, {"faults[0].at", "1ms"},
		{"links.default.ecn", "{step: 64KiB}"}, {"a.b[2].c", "[1, 2]"}, {"name", "&a x"}, {"links", "*a"},
	} {
		f.Add(s[0], s[1])
	}
	src, _ := Source("b2b")
	f.Fuzz(func(t *testing.T, key, value string) {
		o, err := SetOverride("--set "+key+"="+value, key, value)
		if err != nil {
			return
		}
		lab, err := ParseWith("b2b.yaml", src, []Override{o})
		if err == nil && lab == nil {
			t.Fatal("no lab and no error")
		}
	})
}
