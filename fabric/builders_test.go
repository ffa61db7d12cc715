package fabric_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/workload/udpgen"
)

func TestLeafSpineBuilder(t *testing.T) {
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Planes: 4, Leaves: 3, Spines: 2, HostsPerLeaf: 5,
		HostLink: fabric.LinkParams{Rate: 200e9}, Oversubscription: 2.5})
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.Hosts) != 15 || len(topo.Switches) != 4*(3+2) || len(topo.Links) != 4*(15+3*2) {
		t.Fatalf("%d hosts, %d switches, %d links", len(topo.Hosts), len(topo.Switches), len(topo.Links))
	}
	h7 := topo.Hosts[7] // leaf 1, host 2
	if diff := cmp.Diff(fabric.Host{Name: "h7", Addr: netip.MustParseAddr("198.18.1.3"), Ports: 4}, h7, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("h7 (-want +got):\n%s", diff)
	}
	links := map[string]fabric.Link{}
	for _, l := range topo.Links {
		links[l.Name] = l
	}
	want := fabric.Link{Name: "h7-p3", A: fabric.Endpoint{Node: "h7", Port: 3}, B: fabric.Endpoint{Node: "p3-leaf1", Port: 2}, Params: fabric.LinkParams{Rate: 200e9}}
	if diff := cmp.Diff(want, links["h7-p3"]); diff != "" {
		t.Errorf("h7-p3 (-want +got):\n%s", diff)
	}
	// 5 x 200G down / (2 x 2.5) = 200G per uplink.
	want = fabric.Link{Name: "p2-leaf1-spine1", A: fabric.Endpoint{Node: "p2-leaf1", Port: 6}, B: fabric.Endpoint{Node: "p2-spine1", Port: 1}, Params: fabric.LinkParams{Rate: 200e9}}
	if diff := cmp.Diff(want, links["p2-leaf1-spine1"]); diff != "" {
		t.Errorf("p2-leaf1-spine1 (-want +got):\n%s", diff)
	}
	if err := topo.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []fabric.LeafSpineParams{
		{Leaves: 0, Spines: 1, HostsPerLeaf: 1},
		{Leaves: 2, Spines: 0, HostsPerLeaf: 1},
		{Leaves: 1, Spines: 1, HostsPerLeaf: 255},
		{Leaves: 513, Spines: 1, HostsPerLeaf: 1},
		{Leaves: 1, Spines: 1, HostsPerLeaf: 1, Planes: -1},
	} {
		if _, err := fabric.LeafSpine(bad); err == nil {
			t.Errorf("LeafSpine(%+v) accepted", bad)
		}
	}
	// Leaves past 255 continue in 198.19.0.0/16.
	big, err := fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 300, Spines: 1, HostsPerLeaf: 1})
	if err != nil || big.Hosts[299].Addr != netip.MustParseAddr("198.19.43.1") {
		t.Errorf("leaf 299's host: %v, %v", big.Hosts[299].Addr, err)
	}
}

func TestBackToBackBuilder(t *testing.T) {
	topo, err := fabric.BackToBack(fabric.BackToBackParams{Planes: 2})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range topo.Links {
		names = append(names, fmt.Sprintf("%s %v %v", l.Name, l.A, l.B))
	}
	if diff := cmp.Diff([]string{"p0-h0-h1 {h0 0} {h1 0}", "p1-h0-h1 {h0 1} {h1 1}"}, names); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
}

func TestFatTreeBuilderAndRoutes(t *testing.T) {
	topo, err := fabric.FatTree(fabric.FatTreeParams{K: 4})
	if err != nil {
		t.Fatal(err)
	}
	// k=4: 16 hosts, 8 edge + 8 agg + 4 core, 16 host + 16 edge-agg + 16
	// agg-core links.
	if len(topo.Hosts) != 16 || len(topo.Switches) != 20 || len(topo.Links) != 48 {
		t.Fatalf("%d hosts, %d switches, %d links", len(topo.Hosts), len(topo.Switches), len(topo.Links))
	}
	if a := topo.Hosts[13].Addr; a != netip.MustParseAddr("198.18.6.2") { // pod 3 edge 0 host 1: edge #6
		t.Errorf("h13 addr %v", a)
	}
	l := newLab(t, topo, fabric.BuildOptions{})
	dst := topo.Hosts[13].Addr
	cases := []struct {
		sw   string
		want []string
	}{
		{"p0-pod0-edge0", []string{"p0-pod0-edge0-agg0", "p0-pod0-edge0-agg1"}}, // up, two ways
		{"p0-pod0-agg1", []string{"p0-pod0-agg1-core2", "p0-pod0-agg1-core3"}},
		{"p0-core2", []string{"p0-pod3-agg1-core2"}}, // down into pod 3
		{"p0-pod3-agg0", []string{"p0-pod3-edge0-agg0"}},
		{"p0-pod3-edge0", []string{"h13-p0"}},
		{"p0-pod3-edge1", []string{"p0-pod3-edge1-agg0", "p0-pod3-edge1-agg1"}},
	}
	for _, c := range cases {
		got, err := l.net.Route(c.sw, dst)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s -> h13 (-want +got):\n%s", c.sw, diff)
		}
	}
	// Every host reaches every other.
	hs, err := udpgen.AttachAll(l.net, l.pool, l.loop)
	if err != nil {
		t.Fatal(err)
	}
	for i, src := range hs {
		for j, dst := range hs {
			if i != j {
				src.AddFlow(udpgen.FlowSpec{Dst: dst.Addr(), SrcPort: uint16(j), DstPort: 1, Size: 100, Count: 1})
			}
		}
		src.Start(0)
	}
	l.loop.Run()
	for _, h := range hs {
		if n, _ := h.ReceivedTotal(); n != 15 {
			t.Errorf("%s received %d of 15", h.Name(), n)
		}
	}
	for _, k := range []int{0, 3, 66} {
		if _, err := fabric.FatTree(fabric.FatTreeParams{K: k}); err == nil {
			t.Errorf("FatTree(k=%d) accepted", k)
		}
	}
}

// TestFatTreeAddressPlan: edges keep their /24 while they fit the lab's
// /15 (k <= 32), and k=64's 2,048 edges get 64 addresses each: every host
// address unique, inside 198.18.0.0/15, and an edge's hosts in one block.
func TestFatTreeAddressPlan(t *testing.T) {
	lab := netip.MustParsePrefix("198.18.0.0/15")
	for _, c := range []struct {
		k     int
		block int // addresses per edge
	}{{4, 256}, {32, 256}, {64, 64}} {
		topo, err := fabric.FatTree(fabric.FatTreeParams{K: c.k})
		if err != nil {
			t.Fatalf("k=%d: %v", c.k, err)
		}
		if want := c.k * c.k * c.k / 4; len(topo.Hosts) != want {
			t.Fatalf("k=%d: %d hosts, want %d", c.k, len(topo.Hosts), want)
		}
		if err := topo.Validate(); err != nil {
			t.Fatalf("k=%d: %v", c.k, err)
		}
		half := c.k / 2
		seen := map[netip.Addr]bool{}
		base := lab.Addr().As4()
		b0 := uint32(base[0])<<24 | uint32(base[1])<<16
		for i, h := range topo.Hosts {
			if !lab.Contains(h.Addr) || seen[h.Addr] {
				t.Fatalf("k=%d: host %s address %v outside the lab or repeated", c.k, h.Name, h.Addr)
			}
			seen[h.Addr] = true
			a := h.Addr.As4()
			off := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) - b0
			if edge, want := int(off)/c.block, i/half; edge != want || int(off)%c.block != i%half+1 {
				t.Fatalf("k=%d: host %s at %v: block %d offset %d, want block %d offset %d", c.k, h.Name, h.Addr, edge, int(off)%c.block, want, i%half+1)
			}
		}
	}
}
