package labs

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/workload/udpgen"
)

// addrCmp compares netip.Addrs (cmp cannot see their unexported fields).
var addrCmp = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

// TestBuiltins checks that every shipped lab parses, is named after its
// file, has the shape its description promises, and builds.
func TestBuiltins(t *testing.T) {
	want := map[string]Summary{
		"b2b":              {Planes: 1, Hosts: 2, Switches: 0, Links: 1, HostLinks: 1},
		"leafspine":        {Planes: 2, Hosts: 8, Switches: 8, Links: 16 + 8, HostLinks: 16},
		"leafspine-64h-8p": {Planes: 8, Hosts: 64, Switches: 64, Links: 512 + 128, HostLinks: 512},
	}
	names := Names()
	for n := range want {
		found := false
		for _, m := range names {
			found = found || m == n
		}
		if !found {
			t.Errorf("built-in %s missing from Names() = %v", n, names)
		}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			lab, err := Builtin(name)
			if err != nil {
				t.Fatal(err)
			}
			// An experiment's bed FOLDER/NAME is named FOLDER-NAME (a lab
			// name also names live labs' namespaces: no slash).
			if want := strings.ReplaceAll(name, "/", "-"); lab.Name != want {
				t.Errorf("lab name %q, file name %q: name it %q so the two are easy to match", lab.Name, name, want)
			}
			if lab.File != "labs/examples/"+name+".yaml" {
				t.Errorf("File = %q", lab.File)
			}
			if w, ok := want[name]; ok {
				got := lab.Summary()
				got.Name, got.Builder, got.Faults, got.SwitchesByRole = "", "", 0, nil
				if diff := cmp.Diff(w, got); diff != "" {
					t.Errorf("summary (-want +got):\n%s", diff)
				}
			}
			// The file on disk is the one embedded (tests run in labs/).
			disk, err := Load(filepath.Join("examples", name+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(lab.Topology(), disk.Topology(), addrCmp); diff != "" {
				t.Errorf("embedded and on-disk labs differ:\n%s", diff)
			}
			loop := sim.NewLoop()
			n, err := lab.Build(loop, packet.NewPool())
			if err != nil {
				t.Fatal(err)
			}
			// Every fault of the timeline applies to the real fabric.
			fired := 0
			if err := lab.ScheduleFaults(loop, n, func(now sim.Time, f *Fault, err error) {
				fired++
				if err != nil {
					t.Errorf("fault at line %d: %v", f.Line, err)
				}
			}); err != nil {
				t.Fatal(err)
			}
			loop.Run()
			if fired != len(lab.Faults) {
				t.Errorf("%d of %d faults fired", fired, len(lab.Faults))
			}
		})
	}
}

// TestDefaultLab pins what the default lab promises: 2 planes, 0.1%
// random loss on fabric links only, a non-blocking fabric.
func TestDefaultLab(t *testing.T) {
	lab, err := Resolve("")
	if err != nil {
		t.Fatal(err)
	}
	if lab.Name != DefaultName {
		t.Fatalf("Resolve(\"\") = %s, want %s", lab.Name, DefaultName)
	}
	loss := fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossRandom, P: 0.001}}
	hosts := hostSet(lab.topo)
	for _, k := range lab.Topology().Links {
		isHost := hosts[k.A.Node] || hosts[k.B.Node]
		wantImp, wantRate := loss, 200e9 // 4 hosts x 100G over 2 spines
		if isHost {
			wantImp, wantRate = fabric.Impairment{}, 100e9
		}
		if k.Params.Impair != wantImp || k.Params.Rate != wantRate {
			t.Errorf("link %s: impair %v rate %v, want %v rate %v", k.Name, k.Params.Impair, k.Params.Rate, wantImp, wantRate)
		}
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mine.yaml")
	src := "name: mine\ntopology: {backtoback: {planes: 2}}\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		arg, name, err string
	}{
		{arg: "", name: "leafspine"},
		{arg: "b2b", name: "b2b"},
		{arg: path, name: "mine"},
		{arg: "nosuchlab", err: `"nosuchlab" is neither a lab file nor a built-in lab (built-ins: b2b, `},
		{arg: filepath.Join(dir, "missing.yaml"), err: "no such file"},
		{arg: "../etc/passwd", err: "no such file"},
	} {
		lab, err := Resolve(tc.arg)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Resolve(%q) error %v, want one containing %q", tc.arg, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("Resolve(%q): %v", tc.arg, err)
		case tc.err == "" && lab.Name != tc.name:
			t.Errorf("Resolve(%q) = lab %s, want %s", tc.arg, lab.Name, tc.name)
		}
	}
}

// TestLinkSettingsOrder checks which setting wins for a builder's links:
// lab-wide impair < links.default < links.host/fabric < overrides, and
// that oversubscription sets the fabric rate.
func TestLinkSettingsOrder(t *testing.T) {
	src := `name: order
topology:
  leafspine: {planes: 1, leaves: 2, spines: 1, hosts_per_leaf: 2, oversubscription: 2}
impair: "loss random 5%"
links:
  default: {rate: 10gbit, delay: 3us, impair: "loss random 1%"}
  host: {queue: 64KiB}
  fabric: {impair: "loss random 2%", ecn: off}
  overrides:
    - {link: h1-p0, impair: none, rate: 1gbit}
`
	lab, err := Parse("order.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	random := func(p float64) fabric.Impairment {
		return fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossRandom, P: p}}
	}
	base := DefaultLinkParams()
	host := base
	host.Rate, host.Delay, host.QueueBytes, host.Impair = 10e9, 3000, 64<<10, random(0.01)
	h1 := host
	h1.Rate, h1.Impair = 1e9, fabric.Impairment{}
	fab := base
	fab.Rate, fab.Delay, fab.ECN, fab.Impair = 10e9, 3000, fabric.ECNConfig{}, random(0.02)
	// 2 hosts x 10G / (1 spine x oversubscription 2) = 10G.
	want := map[string]fabric.LinkParams{
		"h0-p0": host, "h1-p0": h1, "h2-p0": host, "h3-p0": host,
		"p0-leaf0-spine0": fab, "p0-leaf1-spine0": fab,
	}
	got := map[string]fabric.LinkParams{}
	for _, k := range lab.Topology().Links {
		got[k.Name] = k.Params
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("link params (-want +got):\n%s", diff)
	}
}

// fakeNet records what faults do.
type fakeNet struct{ calls []string }

func (f *fakeNet) SetLinkUp(now sim.Time, link string, up bool) error {
	f.calls = append(f.calls, fmt.Sprintf("%v link %s up=%v", now, link, up))
	return nil
}

func (f *fakeNet) SetSwitchUp(now sim.Time, sw string, up bool) error {
	f.calls = append(f.calls, fmt.Sprintf("%v switch %s up=%v", now, sw, up))
	return nil
}

func (f *fakeNet) SetPlaneUp(now sim.Time, plane int, up bool) error {
	f.calls = append(f.calls, fmt.Sprintf("%v plane %d up=%v", now, plane, up))
	return nil
}

func (f *fakeNet) SetImpairment(link string, dir fabric.Direction, imp fabric.Impairment) error {
	f.calls = append(f.calls, fmt.Sprintf("impair %s %v %q", link, dir, imp.String()))
	return nil
}

// TestScheduleFaults runs the explicit lab's timeline against a fake and
// checks each fault fires at its time, in order, with its arguments.
func TestScheduleFaults(t *testing.T) {
	lab, err := Load("testdata/explicit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	loop := sim.NewLoop()
	loop.RunUntil(10 * sim.Microsecond) // fault times count from here
	var fake fakeNet
	var fired []string
	if err := lab.ScheduleFaults(loop, &fake, func(now sim.Time, f *Fault, err error) {
		fired = append(fired, fmt.Sprintf("%v %s err=%v", now, f, err))
	}); err != nil {
		t.Fatal(err)
	}
	loop.Run()
	wantCalls := []string{
		`impair b-s1 AtoB "loss gemodel 1% 10% 70% 0.1%"`,
		"1.01ms link a-s0 up=false",
		"2.01ms link a-s0 up=true",
		"3.01ms switch s1 up=false",
		"4.01ms plane 0 up=false",
	}
	if diff := cmp.Diff(wantCalls, fake.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	wantFired := []string{
		`510us 500us link b-s1 impair "loss gemodel 1% 10% 70% 0.1%" dir ab err=<nil>`,
		"1.01ms 1ms link a-s0 down err=<nil>",
		"2.01ms 2ms link a-s0 up err=<nil>",
		"3.01ms 3ms switch s1 down err=<nil>",
		"4.01ms 4ms plane 0 down err=<nil>",
	}
	if diff := cmp.Diff(wantFired, fired); diff != "" {
		t.Errorf("reports (-want +got):\n%s", diff)
	}
}

// TestApplyImpairSwitchAndPlane checks that impairing a switch or a plane
// impairs every link on it, in both directions.
func TestApplyImpairSwitchAndPlane(t *testing.T) {
	lab, err := Builtin("leafspine")
	if err != nil {
		t.Fatal(err)
	}
	imp, _ := fabric.ParseImpairment("loss random 3%")
	var fake fakeNet
	if err := lab.Apply(0, &Fault{Target: TargetSwitch, Name: "p1-spine0", Action: ActionImpair, Impair: imp}, &fake); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`impair p1-leaf0-spine0 both "loss random 3%"`,
		`impair p1-leaf1-spine0 both "loss random 3%"`,
	}
	if diff := cmp.Diff(want, fake.calls); diff != "" {
		t.Errorf("switch impair (-want +got):\n%s", diff)
	}
	fake.calls = nil
	if err := lab.Apply(0, &Fault{Target: TargetPlane, Plane: 1, Action: ActionImpair, Impair: imp}, &fake); err != nil {
		t.Fatal(err)
	}
	if len(fake.calls) != 8+4 {
		t.Errorf("plane impair touched %d links, want 12 (8 host links, 4 fabric links):\n%s", len(fake.calls), strings.Join(fake.calls, "\n"))
	}
	for _, c := range fake.calls {
		if strings.Contains(c, "p0") && !strings.Contains(c, "-p1") && !strings.Contains(c, "p1-") {
			t.Errorf("plane 1 impair touched %s", c)
		}
	}
	// Unknown targets are errors, not silent no-ops.
	for _, f := range []Fault{
		{Target: TargetLink, Name: "nope", Action: ActionDown},
		{Target: TargetSwitch, Name: "h0", Action: ActionDown},
		{Target: TargetPlane, Plane: 2, Action: ActionUp},
	} {
		if err := lab.Apply(0, &f, &fake); err == nil {
			t.Errorf("Apply(%v) succeeded", &f)
		}
	}
}

// runUDP runs the lab with a udpgen host on every host sending paced
// UDP to its opposite on every plane, and returns the trace hash.
func runUDP(t testing.TB, lab *Lab, d sim.Time) (hash uint64, events uint64) {
	loop := sim.NewLoop()
	pool := packet.NewPool()
	n, err := lab.Build(loop, pool)
	if err != nil {
		t.Fatal(err)
	}
	th := fabric.NewTraceHash()
	n.SetObserver(th)
	hosts, err := udpgen.AttachAll(n, pool, loop)
	if err != nil {
		t.Fatal(err)
	}
	topo := lab.Topology()
	for i, h := range hosts {
		dst := hosts[(i+len(hosts)/2)%len(hosts)]
		for p := 0; p < topo.Hosts[i].Ports; p++ {
			if _, err := h.AddFlow(udpgen.FlowSpec{Dst: dst.Addr(), SrcPort: uint16(40000 + 8*i + p), DstPort: 9,
				Plane: p, Size: 1500, Rate: 60e9, ECN: header.ECNECT0}); err != nil {
				t.Fatal(err)
			}
		}
		h.Start(0)
	}
	if err := lab.ScheduleFaults(loop, n, nil); err != nil {
		t.Fatal(err)
	}
	loop.RunUntil(d)
	return th.Sum(), th.Events()
}

// TestDeterminism: the same lab and seed give the same trace hash twice;
// another seed gives another (the lab's random loss and ECMP salts draw
// from the seed).
func TestDeterminism(t *testing.T) {
	lab, err := Builtin("leafspine")
	if err != nil {
		t.Fatal(err)
	}
	// A link failure mid-run, so the timeline is part of the trace too.
	lab.Faults = append(lab.Faults, Fault{At: 100 * sim.Microsecond, Target: TargetLink, Name: "p0-leaf0-spine1", Action: ActionDown})
	const d = 300 * sim.Microsecond
	h1, ev1 := runUDP(t, lab, d)
	h2, ev2 := runUDP(t, lab, d)
	if h1 != h2 || ev1 != ev2 {
		t.Errorf("same seed: hashes %016x (%d events) and %016x (%d events)", h1, ev1, h2, ev2)
	}
	if ev1 < 10000 {
		t.Errorf("only %d events: the run did not exercise the fabric", ev1)
	}
	lab.Seed++
	h3, _ := runUDP(t, lab, d)
	if h3 == h1 {
		t.Errorf("seeds %d and %d give the same hash %016x", lab.Seed-1, lab.Seed, h1)
	}
}

func TestWriteDot(t *testing.T) {
	lab, err := Builtin("leafspine")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := lab.WriteDot(&b); err != nil {
		t.Fatal(err)
	}
	dot := b.String()
	for _, want := range []string{
		`graph "leafspine" {`,
		`"h0" [shape=box, label="h0\n198.18.0.1"];`,
		`subgraph "cluster_plane1" {`,
		`"p1-spine0" [shape=ellipse, label="p1-spine0\nspine"];`,
		`"h0" -- "p0-leaf0" [label="h0-p0", taillabel=0, headlabel=0];`,
		`"p1-leaf1" -- "p1-spine1" [label="p1-leaf1-spine1", taillabel=5, headlabel=1];`,
	} {
		if !strings.Contains(dot, want) {
			t.Errorf("dot output lacks %s\n%s", want, dot)
		}
	}
	if got := strings.Count(dot, " -- "); got != 24 {
		t.Errorf("%d edges, want 24", got)
	}
	if !strings.HasSuffix(dot, "}\n") {
		t.Error("dot output is not closed")
	}
}

// TestSteadyStateAllocs: once flows are running, advancing a built lab
// allocates nothing per packet (the glue adds nothing to the fabric's
// hot path; fault timers are allocated when scheduled, not when fired).
func TestSteadyStateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under -race (the detector allocates)")
	}
	lab, err := Builtin("leafspine")
	if err != nil {
		t.Fatal(err)
	}
	lab.Faults = []Fault{{At: 5 * sim.Second, Target: TargetPlane, Plane: 1, Action: ActionDown}}
	loop := sim.NewLoop()
	pool := packet.NewPool()
	n, err := lab.Build(loop, pool)
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := udpgen.AttachAll(n, pool, loop)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range hosts {
		dst := hosts[(i+4)%8]
		if _, err := h.AddFlow(udpgen.FlowSpec{Dst: dst.Addr(), SrcPort: uint16(40000 + i), DstPort: 9, Size: 4096, Rate: 50e9}); err != nil {
			t.Fatal(err)
		}
		h.Start(0)
	}
	if err := lab.ScheduleFaults(loop, n, nil); err != nil {
		t.Fatal(err)
	}
	// Warm up: queues, pools and the receivers' bookkeeping reach size.
	loop.RunUntil(200 * sim.Microsecond)
	before := loop.Fired()
	allocs := testing.AllocsPerRun(20, func() { loop.RunUntil(loop.Now() + 5*sim.Microsecond) })
	events := float64(loop.Fired()-before) / 21
	// udpgen's receiver grows a duplicate-tracking bitset by one word
	// every 64 packets; allow for that and nothing else.
	t.Logf("%.2f allocations per step of %.0f events", allocs, events)
	if perEvent := allocs / events; perEvent > 0.01 {
		t.Errorf("%.2f allocations per 5us step of %.0f events", allocs, events)
	}
}
