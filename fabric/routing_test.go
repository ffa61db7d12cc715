package fabric_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
)

// referenceRoutes is routing's rule written the plain way: a breadth-first
// search from every host over switches (hosts never transit); a switch's
// group for the host is its routed links, in port order, whose far end is
// one hop closer. routed says whether routing believes a link up.
func referenceRoutes(topo *fabric.Topology, routed func(link string) bool) map[string]map[string][]string {
	type port struct {
		num      int
		link, to string
	}
	isHost := map[string]bool{}
	for _, h := range topo.Hosts {
		isHost[h.Name] = true
	}
	ports := map[string][]port{}
	for _, l := range topo.Links {
		if !routed(l.Name) {
			continue
		}
		ports[l.A.Node] = append(ports[l.A.Node], port{l.A.Port, l.Name, l.B.Node})
		ports[l.B.Node] = append(ports[l.B.Node], port{l.B.Port, l.Name, l.A.Node})
	}
	for _, ps := range ports {
		slices.SortFunc(ps, func(a, b port) int { return a.num - b.num })
	}
	out := map[string]map[string][]string{}
	for _, sw := range topo.Switches {
		out[sw.Name] = map[string][]string{}
	}
	for _, h := range topo.Hosts {
		dist := map[string]int{h.Name: 0}
		q := []string{h.Name}
		for len(q) > 0 {
			u := q[0]
			q = q[1:]
			for _, p := range ports[u] {
				if _, seen := dist[p.to]; seen || isHost[p.to] {
					continue
				}
				dist[p.to] = dist[u] + 1
				q = append(q, p.to)
			}
		}
		for _, sw := range topo.Switches {
			d, ok := dist[sw.Name]
			if !ok {
				continue
			}
			var group []string
			for _, p := range ports[sw.Name] {
				if dp, ok := dist[p.to]; ok && dp == d-1 {
					group = append(group, p.link)
				}
			}
			if group != nil {
				out[sw.Name][h.Name] = group
			}
		}
	}
	return out
}

// fibOf reads every switch's route to every host from the network.
func fibOf(t *testing.T, n *fabric.Network) map[string]map[string][]string {
	t.Helper()
	topo := n.Topology()
	out := map[string]map[string][]string{}
	for _, sw := range topo.Switches {
		out[sw.Name] = map[string][]string{}
		for _, h := range topo.Hosts {
			links, err := n.Route(sw.Name, h.Addr)
			if err != nil {
				t.Fatal(err)
			}
			if links != nil {
				out[sw.Name][h.Name] = links
			}
		}
	}
	return out
}

// meshTopology is an explicit, irregular fabric: random switch-to-switch
// links (some parallel), hosts on one to three switches, some on none.
func meshTopology(seed uint64) *fabric.Topology {
	r := rand.New(rand.NewPCG(seed, 7))
	t := &fabric.Topology{Name: "mesh", Planes: 1}
	const switches, hosts = 9, 12
	next := map[string]int{}
	link := func(a, b string) {
		t.Links = append(t.Links, fabric.Link{
			Name:   fmt.Sprintf("l%d", len(t.Links)),
			A:      fabric.Endpoint{Node: a, Port: next[a]},
			B:      fabric.Endpoint{Node: b, Port: next[b]},
			Params: fabric.LinkParams{Rate: 1e9, Delay: sim.Microsecond},
		})
		next[a]++
		next[b]++
	}
	for i := range switches {
		t.Switches = append(t.Switches, fabric.Switch{Name: fmt.Sprintf("s%d", i), Role: "tor"})
	}
	for range 14 {
		a, b := r.IntN(switches), r.IntN(switches)
		if a != b {
			link(fmt.Sprintf("s%d", a), fmt.Sprintf("s%d", b))
		}
	}
	for i := range hosts {
		name := fmt.Sprintf("h%d", i)
		k := 1 + r.IntN(3)
		t.Hosts = append(t.Hosts, fabric.Host{Name: name, Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), Ports: k})
		for range k {
			link(name, fmt.Sprintf("s%d", r.IntN(switches)))
		}
	}
	return t
}

// TestRoutesEqualReference checks the class-based, per-component routing
// against the plain per-host search on every builder's topology and on
// irregular explicit ones, after Build and after each of a run of random
// link, switch and plane failures and repairs (routing told at once).
func TestRoutesEqualReference(t *testing.T) {
	type bed struct {
		name string
		topo func() (*fabric.Topology, error)
	}
	beds := []bed{
		{"leafspine", func() (*fabric.Topology, error) {
			return fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 4, Spines: 3, HostsPerLeaf: 3, Planes: 2})
		}},
		{"fattree-k4-2planes", func() (*fabric.Topology, error) { return fabric.FatTree(fabric.FatTreeParams{K: 4, Planes: 2}) }},
		{"fattree-k6", func() (*fabric.Topology, error) { return fabric.FatTree(fabric.FatTreeParams{K: 6}) }},
		{"b2b", func() (*fabric.Topology, error) { return fabric.BackToBack(fabric.BackToBackParams{Planes: 2}) }},
	}
	for s := range uint64(4) {
		beds = append(beds, bed{fmt.Sprintf("mesh-%d", s), func() (*fabric.Topology, error) { return meshTopology(s), nil }})
	}
	for _, mode := range []string{"masks", "lists"} {
		for bi, b := range beds {
			t.Run(mode+"/"+b.name, func(t *testing.T) {
				if mode == "lists" {
					defer fabric.SetMaskDegree(0)()
				}
				routesEqualReference(t, bi, b.topo)
			})
		}
	}
}

func routesEqualReference(t *testing.T, bi int, topoFn func() (*fabric.Topology, error)) {
	tp, err := topoFn()
	topo := mustTopo(t, tp, err)
	l := newLab(t, topo, fabric.BuildOptions{Seed: 1, DetectionDelay: -1})
	n := l.net
	routed := routedIn(t, n)
	check := func(step string) {
		t.Helper()
		if diff := cmp.Diff(referenceRoutes(topo, routed), fibOf(t, n)); diff != "" {
			t.Fatalf("%s: FIB differs from the reference (-want +got):\n%s", step, diff)
		}
	}
	check("after Build")
	r := rand.New(rand.NewPCG(uint64(bi), 3))
	now := sim.Time(0)
	for step := range 40 {
		now += sim.Microsecond
		var what string
		var err error
		switch k := r.IntN(10); {
		case k < 7 || len(topo.Switches) == 0:
			lk := topo.Links[r.IntN(len(topo.Links))].Name
			up := r.IntN(2) == 0
			what, err = fmt.Sprintf("link %s up=%v", lk, up), n.SetLinkUp(now, lk, up)
		case k < 9:
			sw := topo.Switches[r.IntN(len(topo.Switches))].Name
			up := r.IntN(2) == 0
			what, err = fmt.Sprintf("switch %s up=%v", sw, up), n.SetSwitchUp(now, sw, up)
		default:
			pl := r.IntN(max(topo.Planes, 1))
			up := r.IntN(2) == 0
			what, err = fmt.Sprintf("plane %d up=%v", pl, up), n.SetPlaneUp(now, pl, up)
		}
		if err != nil {
			t.Fatalf("step %d %s: %v", step, what, err)
		}
		check(fmt.Sprintf("step %d (%s)", step, what))
	}
}

// TestFailureRouteWork: a single link or switch failure, and its repair,
// on a fat tree of two planes searches only the classes whose hop counts
// it moves (a search per class and plane is the unit of route work: a full
// computation is one per class and plane), and the FIB then equals the
// reference. Per failure, k=8 (4 edges per pod, 32 classes, 64 searches
// in full): a core switch's failure and repair move no hop count (the
// switch is cut off, then joins); an aggregation link or switch moves the
// hop counts of its pod's classes at the cores (k/2); an edge's uplink
// those of the edge's class; a host link or an edge switch makes a new
// class, copied from the old one where its attachment switches are the
// same (one search, of the plane it left, the first time).
func TestFailureRouteWork(t *testing.T) {
	const k = 8
	topo, err := fabric.FatTree(fabric.FatTreeParams{K: k, Planes: 2})
	if err != nil {
		t.Fatal(err)
	}
	l := newLab(t, topo, fabric.BuildOptions{Seed: 1, DetectionDelay: -1})
	n := l.net
	routed := routedIn(t, n)
	full := n.RouteSearches()
	if want := 2 * k * k / 2; full != want {
		t.Fatalf("Build searched %d class-planes, want %d (32 classes x 2 planes)", full, want)
	}
	cases := []struct {
		name, sw, link string
		fail, repair   int // most searches
	}{
		{name: "host link", link: "h5-p1", fail: 1, repair: 0},
		{name: "edge uplink", link: "p1-pod2-edge1-agg3", fail: 1, repair: 1},
		{name: "core link", link: "p1-pod2-agg3-core13", fail: k / 2, repair: k / 2},
		{name: "core switch", sw: "p1-core13", fail: 0, repair: 0},
		{name: "agg switch", sw: "p1-pod2-agg3", fail: k / 2, repair: k / 2},
		{name: "edge switch", sw: "p1-pod2-edge1", fail: 1, repair: 1},
	}
	now := sim.Time(0)
	for _, c := range cases {
		for i, up := range []bool{false, true} {
			now += sim.Microsecond
			before := n.RouteSearches()
			var err error
			if c.sw != "" {
				err = n.SetSwitchUp(now, c.sw, up)
			} else {
				err = n.SetLinkUp(now, c.link, up)
			}
			if err != nil {
				t.Fatalf("%s up=%v: %v", c.name, up, err)
			}
			got, want := n.RouteSearches()-before, []int{c.fail, c.repair}[i]
			if got > want {
				t.Errorf("%s up=%v: %d class searches, want at most %d (a full computation is %d)", c.name, up, got, want, full)
			}
		}
	}
	// TestRoutesEqualReference checks the FIB after every step of random
	// failures; here once, after all of them.
	if diff := cmp.Diff(referenceRoutes(topo, routed), fibOf(t, n)); diff != "" {
		t.Fatalf("FIB differs from the reference (-want +got):\n%s", diff)
	}
}

// routedIn says whether routing uses a link of n (up, or failing and not
// yet detected).
func routedIn(t *testing.T, n *fabric.Network) func(link string) bool {
	return func(link string) bool {
		_, r, err := n.LinkState(link)
		if err != nil {
			t.Fatal(err)
		}
		return r == "up" || r == "failing"
	}
}
