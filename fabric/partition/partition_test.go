package partition

import (
	"slices"
	"strings"
	"testing"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
)

var link = fabric.LinkParams{Rate: 100e9, Delay: sim.Microsecond}

func must(t *testing.T) func(*fabric.Topology, error) *fabric.Topology {
	return func(topo *fabric.Topology, err error) *fabric.Topology {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return topo
	}
}

func TestPlans(t *testing.T) {
	ft := must(t)(fabric.FatTree(fabric.FatTreeParams{K: 4, HostLink: link, FabricLink: link}))
	ft2 := must(t)(fabric.FatTree(fabric.FatTreeParams{K: 4, Planes: 2, HostLink: link, FabricLink: link}))
	ls := must(t)(fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 4, Spines: 2, HostsPerLeaf: 4, HostLink: link, FabricLink: link}))
	b2b := must(t)(fabric.BackToBack(fabric.BackToBackParams{Link: link}))
	zero := must(t)(fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 4, Spines: 2, HostsPerLeaf: 4, HostLink: link,
		FabricLink: fabric.LinkParams{Rate: 100e9}}))
	jitter := link
	jitter.Impair.Jitter = 100
	imp := must(t)(fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 4, Spines: 2, HostsPerLeaf: 4, HostLink: link, FabricLink: jitter}))
	// The minimum serialization: 20 bytes at 100 Gbit/s is 1.6 ns (1 ns
	// truncated).
	look := sim.Microsecond + 1
	cases := []struct {
		name      string
		topo      *fabric.Topology
		want      int
		parts     int
		rule      string
		look      sim.Time
		reason    string
		refusedIn string
	}{
		{"fat tree k=4, 2", ft, 2, 2, "by pod/leaf", look, "", ""},
		{"fat tree k=4, 4", ft, 4, 4, "by pod/leaf", look, "", ""},
		{"fat tree k=4, 64", ft, 64, 8, "by pod/leaf", look, "only 8 units", ""},
		{"2-plane fat tree, 2", ft2, 2, 2, "by plane", look, "", ""},
		{"leaf-spine, 2", ls, 2, 2, "by pod/leaf", look, "", ""},
		{"back to back, 2", b2b, 2, 2, "by pod/leaf", look, "", ""},
		{"one asked", ft, 1, 1, "one partition", sim.Never, "", ""},
		{"zero-delay fabric", zero, 2, 1, "one partition", sim.Never, "could not be cut", "zero delay"},
		{"jittered fabric", imp, 2, 1, "one partition", sim.Never, "could not be cut", "reorders"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := Make(c.topo, c.want, Options{})
			if p.Parts != c.parts || p.Rule != c.rule || p.Lookahead != c.look || !strings.Contains(p.Reason, c.reason) {
				t.Fatalf("plan %s: want %d parts %s lookahead %v reason %q", p, c.parts, c.rule, c.look, c.reason)
			}
			if c.refusedIn != "" && (len(p.Refused) == 0 || !strings.Contains(p.Refused[0], c.refusedIn)) {
				t.Errorf("refused %q, want a %q", p.Refused, c.refusedIn)
			}
			checkPlan(t, c.topo, p)
		})
	}
}

// checkPlan: every partition is used, the cut is exactly the links between
// partitions, and hosts stay with the switch of their first port unless
// the plan is by plane.
func checkPlan(t *testing.T, topo *fabric.Topology, p *Plan) {
	t.Helper()
	part := map[string]int{}
	used := make([]bool, p.Parts)
	for i, h := range topo.Hosts {
		part[h.Name] = p.Host[i]
		used[p.Host[i]] = true
	}
	for i, s := range topo.Switches {
		part[s.Name] = p.Switch[i]
		used[p.Switch[i]] = true
	}
	if slices.Contains(used, false) {
		t.Errorf("plan %s leaves a partition empty: %v", p, used)
	}
	var cut []int
	for i, l := range topo.Links {
		if part[l.A.Node] != part[l.B.Node] {
			cut = append(cut, i)
		}
		if l.A.Port == 0 && p.Rule == "by pod/leaf" && part[l.A.Node] != part[l.B.Node] && strings.HasPrefix(l.A.Node, "h") && !strings.Contains(l.Name, "-h0-h1") {
			t.Errorf("host %s apart from its first switch %s", l.A.Node, l.B.Node)
		}
	}
	if !slices.Equal(cut, p.Cut) {
		t.Errorf("cut %v, want %v", p.Cut, cut)
	}
}

// A fault timeline that impairs a link keeps it uncut.
func TestPlanNoCut(t *testing.T) {
	b2b := must(t)(fabric.BackToBack(fabric.BackToBackParams{Link: link}))
	p := Make(b2b, 2, Options{NoCut: map[string]string{b2b.Links[0].Name: "impaired by fault 1"}})
	if p.Parts != 1 || len(p.Refused) != 1 || !strings.Contains(p.Refused[0], "fault 1") {
		t.Errorf("plan %s refused %q", p, p.Refused)
	}
}

// The same topology and count give the same plan, balanced within a unit.
func TestPlanBalanced(t *testing.T) {
	ft := must(t)(fabric.FatTree(fabric.FatTreeParams{K: 8, HostLink: link, FabricLink: link}))
	a, b := Make(ft, 4, Options{}), Make(ft, 4, Options{})
	if !slices.Equal(a.Host, b.Host) || !slices.Equal(a.Switch, b.Switch) {
		t.Fatal("two plans of one topology differ")
	}
	hosts := make([]int, 4)
	for _, p := range a.Host {
		hosts[p]++
	}
	if slices.Min(hosts) != slices.Max(hosts) {
		t.Errorf("hosts per partition %v on a k=8 fat tree (8 pods on 4 partitions)", hosts)
	}
}
