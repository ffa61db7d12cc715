package web

import (
	"testing"

	"github.com/mrlab/mrlab/fabric"
)

func topo(t *testing.T, f func() (*fabric.Topology, error)) *Topology {
	t.Helper()
	ft, err := f()
	if err != nil {
		t.Fatal(err)
	}
	tp := TopologyOf(ft)
	return &tp
}

// Layout invariants on every builder: nodes inside their box, tiers in
// rows (higher tiers above), each host port under the switch it hangs
// off, links joining the right nodes.
func TestLayout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		topo  func() (*fabric.Topology, error)
		tiers int // switch tiers
	}{
		{"leafspine", func() (*fabric.Topology, error) {
			return fabric.LeafSpine(fabric.LeafSpineParams{Planes: 2, Leaves: 2, Spines: 2, HostsPerLeaf: 4})
		}, 2},
		{"64h8p", func() (*fabric.Topology, error) {
			return fabric.LeafSpine(fabric.LeafSpineParams{Planes: 8, Leaves: 4, Spines: 4, HostsPerLeaf: 16})
		}, 2},
		{"fattree", func() (*fabric.Topology, error) { return fabric.FatTree(fabric.FatTreeParams{K: 4, Planes: 2}) }, 3},
		{"b2b", func() (*fabric.Topology, error) { return fabric.BackToBack(fabric.BackToBackParams{Planes: 3}) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := topo(t, tc.topo)
			v := Layout(tp)
			if v.Planes != tp.Planes || len(v.Links) != len(tp.Links) {
				t.Fatalf("%d planes, %d links; want %d, %d", v.Planes, len(v.Links), tp.Planes, len(tp.Links))
			}
			// One node per switch and per host port.
			ports := 0
			for _, h := range tp.Hosts {
				ports += h.Ports
			}
			if len(v.Nodes) != len(tp.Switches)+ports {
				t.Errorf("%d nodes, want %d switches + %d host ports", len(v.Nodes), len(tp.Switches), ports)
			}
			maxTier := 0
			for _, n := range v.Nodes {
				if n.X < 0 || n.X > v.BoxW || n.Y < 0 || n.Y > v.BoxH {
					t.Errorf("%s (plane %d) at %v,%v outside its %vx%v box", n.Name, n.Plane, n.X, n.Y, v.BoxW, v.BoxH)
				}
				if n.Host != (n.Tier == 0) {
					t.Errorf("%s: host %v at tier %d", n.Name, n.Host, n.Tier)
				}
				maxTier = max(maxTier, n.Tier)
				if want := v.Top + float64(maxTierOf(v)-n.Tier)*rowGap; n.Y != want {
					t.Errorf("%s tier %d at y %v, want %v", n.Name, n.Tier, n.Y, want)
				}
			}
			if maxTier != tc.tiers {
				t.Errorf("%d switch tiers, want %d", maxTier, tc.tiers)
			}
			for i, l := range v.Links {
				a, b := v.Nodes[l.A], v.Nodes[l.B]
				if a.Name != tp.Links[i].A || b.Name != tp.Links[i].B {
					t.Errorf("link %s drawn between %s and %s", tp.Links[i].Name, a.Name, b.Name)
				}
				if a.Plane != l.Plane || b.Plane != l.Plane {
					t.Errorf("link %s in plane %d joins planes %d and %d", tp.Links[i].Name, l.Plane, a.Plane, b.Plane)
				}
				// A host port sits under its switch: nearer to it than
				// to any other switch of that tier.
				if a.Host && !b.Host {
					for _, o := range v.Nodes {
						if !o.Host && o.Tier == b.Tier && o.Plane == b.Plane && o.Name != b.Name && abs(o.X-a.X) < abs(b.X-a.X) {
							t.Errorf("%s port %d is nearer %s than its own %s", a.Name, a.Port, o.Name, b.Name)
						}
					}
				}
			}
			// Switches of a tier do not overlap (boxes are 54 wide).
			for i, n := range v.Nodes {
				for _, o := range v.Nodes[i+1:] {
					if !n.Host && !o.Host && n.Plane == o.Plane && n.Tier == o.Tier && abs(n.X-o.X) < 56 {
						t.Errorf("%s and %s overlap (x %v, %v)", n.Name, o.Name, n.X, o.X)
					}
				}
			}
		})
	}
}

func maxTierOf(v View) int {
	m := 0
	for _, n := range v.Nodes {
		m = max(m, n.Tier)
	}
	return m
}

// Fat-tree pods: a pod's aggregation switches sit over its edge switches.
func TestLayoutPods(t *testing.T) {
	v := Layout(topo(t, func() (*fabric.Topology, error) { return fabric.FatTree(fabric.FatTreeParams{K: 4}) }))
	span := map[int][2]float64{}
	for _, n := range v.Nodes {
		if n.Tier == 1 {
			s, ok := span[n.Pod]
			if !ok {
				s = [2]float64{n.X, n.X}
			}
			span[n.Pod] = [2]float64{min(s[0], n.X), max(s[1], n.X)}
		}
	}
	for _, n := range v.Nodes {
		if n.Tier == 2 {
			s := span[n.Pod]
			if n.Pod < 0 || n.X < s[0]-swGap || n.X > s[1]+swGap {
				t.Errorf("%s (pod %d) at x %v, outside its pod's edges %v", n.Name, n.Pod, n.X, s)
			}
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
