package fabric

import (
	"fmt"
	"net/netip"
)

// DefaultRate is the link rate builders use when a LinkParams leaves Rate
// at 0: 100 Gbit/s.
const DefaultRate = 100e9

// labBase is the first address of the lab subnet 198.18.0.0/15 (RFC 2544's
// benchmarking range).
const labBase = 198<<24 | 18<<16

// maxSubnets is how many /24s fit in 198.18.0.0/15.
const maxSubnets = 512

// maxFatTreeK is the largest fat-tree radix: k^3/4 = 65,536 hosts, whose
// k^2/2 = 2,048 edges use the whole /15 (edgeBlockBits).
const maxFatTreeK = 64

// maxPlanes is the most planes a builder makes.
const maxPlanes = 64

// commonParams applies the defaults every builder shares (name kind, one
// plane) and checks the number of planes. kind prefixes its errors.
func commonParams(kind string, name *string, planes *int) error {
	if *name == "" {
		*name = kind
	}
	if *planes == 0 {
		*planes = 1
	}
	if *planes < 1 || *planes > maxPlanes {
		return fmt.Errorf("%s: planes %d: want 1..%d", kind, *planes, maxPlanes)
	}
	return nil
}

// tierLinks returns the host and fabric links' parameters with their
// default rates: DefaultRate for host links, the host rate for fabric
// links.
func tierLinks(host, fab LinkParams) (LinkParams, LinkParams) {
	if host.Rate == 0 {
		host.Rate = DefaultRate
	}
	if fab.Rate == 0 {
		fab.Rate = host.Rate
	}
	return host, fab
}

// addSwitch adds switch name to plane pl.
func (t *Topology) addSwitch(name string, pl int, role string) {
	t.Switches = append(t.Switches, Switch{Name: name, Plane: pl, Role: role})
}

// addLink adds link name from a to b.
func (t *Topology) addLink(name string, a, b Endpoint, lp LinkParams) {
	t.Links = append(t.Links, Link{Name: name, A: a, B: b, Params: lp})
}

// addHostLink wires host's plane-pl port to port port of switch sw, as
// link "<host>-p<pl>".
func (t *Topology) addHostLink(host string, pl int, sw string, port int, lp LinkParams) {
	t.addLink(fmt.Sprintf("%s-p%d", host, pl), Endpoint{host, pl}, Endpoint{sw, port}, lp)
}

// subnetHost returns the address of host h (0-based) in the lab's /24
// number sub: 198.18.0.0 + sub<<8 + h+1 (sub 256.. spill into 198.19.x).
func subnetHost(sub, h int) netip.Addr { return blockHost(sub, 8, h) }

// blockHost returns the address of host h (0-based) in block sub of
// 2^bits addresses of the lab's /15: 198.18.0.0 + sub<<bits + h+1.
func blockHost(sub, bits, h int) netip.Addr {
	a := uint32(labBase) + uint32(sub)<<bits + uint32(h+1)
	return netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
}

// edgeBlockBits is the size (as a power of two) of the address block of
// each of edges edges of hosts hosts each: a /24 (8 bits) while the edges
// fit 198.18.0.0/15 that way, else the smallest block that holds an edge's
// hosts and a spare address (a k=64 fat tree: 2,048 edges of 32 hosts get
// 64 addresses each, the whole /15).
func edgeBlockBits(edges, hosts int) int {
	if edges <= maxSubnets {
		return 8
	}
	bits := 0
	for 1<<bits < hosts+1 {
		bits++
	}
	return bits
}

// LeafSpineParams describe a multi-plane leaf/spine fabric.
type LeafSpineParams struct {
	// Name names the topology (default "leafspine").
	Name string
	// Planes is the number of planes (0 means 1). Each plane has its own
	// Leaves leaves and Spines spines; each host has one port per plane,
	// wired to its leaf in that plane.
	Planes int
	Leaves int
	Spines int
	// HostsPerLeaf hosts hang off each leaf (at most 254).
	HostsPerLeaf int
	// HostLink configures host-leaf links; Rate 0 means DefaultRate.
	HostLink LinkParams
	// FabricLink configures leaf-spine links; Rate 0 means HostLink's rate.
	FabricLink LinkParams
	// Oversubscription, if > 0, overrides FabricLink.Rate so that a leaf's
	// host-facing capacity is Oversubscription times its spine-facing
	// capacity: rate = HostsPerLeaf x host rate / (Spines x
	// Oversubscription). 1 is a non-blocking fabric.
	Oversubscription float64
}

// LeafSpine builds a leaf/spine topology with P planes. Host i (0-based,
// leaf l = i / HostsPerLeaf, h = i % HostsPerLeaf) is "h<i>" with address
// 198.18.l.(h+1) (leaves past 255 continue in 198.19.x), shared by its
// planes; port p of the host is its plane-p port, link "h<i>-p<p>" to
// switch "p<p>-leaf<l>" port h. Leaf l's port HostsPerLeaf+j is link
// "p<p>-leaf<l>-spine<j>" to "p<p>-spine<j>" port l. Links' A ends are the
// lower tier (host, then leaf).
func LeafSpine(p LeafSpineParams) (*Topology, error) {
	if err := commonParams("leafspine", &p.Name, &p.Planes); err != nil {
		return nil, err
	}
	switch {
	case p.Leaves < 1 || p.Leaves > maxSubnets:
		return nil, fmt.Errorf("leafspine: leaves %d: want 1..%d (one /24 of 198.18.0.0/15 each)", p.Leaves, maxSubnets)
	case p.Spines < 0:
		return nil, fmt.Errorf("leafspine: spines %d: want >= 0", p.Spines)
	case p.Spines == 0 && p.Leaves > 1:
		return nil, fmt.Errorf("leafspine: %d leaves need at least one spine", p.Leaves)
	case p.HostsPerLeaf < 1 || p.HostsPerLeaf > 254:
		return nil, fmt.Errorf("leafspine: hosts per leaf %d: want 1..254", p.HostsPerLeaf)
	case p.Oversubscription < 0:
		return nil, fmt.Errorf("leafspine: oversubscription %v: want > 0 (or 0 to use FabricLink.Rate)", p.Oversubscription)
	}
	host, fab := tierLinks(p.HostLink, p.FabricLink)
	if p.Oversubscription > 0 && p.Spines > 0 {
		fab.Rate = float64(p.HostsPerLeaf) * host.Rate / (float64(p.Spines) * p.Oversubscription)
	}
	t := &Topology{Name: p.Name, Planes: p.Planes}
	for l := 0; l < p.Leaves; l++ {
		for h := 0; h < p.HostsPerLeaf; h++ {
			t.Hosts = append(t.Hosts, Host{Name: fmt.Sprintf("h%d", l*p.HostsPerLeaf+h), Addr: subnetHost(l, h), Ports: p.Planes})
		}
	}
	for pl := 0; pl < p.Planes; pl++ {
		for l := 0; l < p.Leaves; l++ {
			t.addSwitch(fmt.Sprintf("p%d-leaf%d", pl, l), pl, "leaf")
		}
		for s := 0; s < p.Spines; s++ {
			t.addSwitch(fmt.Sprintf("p%d-spine%d", pl, s), pl, "spine")
		}
	}
	for pl := 0; pl < p.Planes; pl++ {
		for l := 0; l < p.Leaves; l++ {
			leaf := fmt.Sprintf("p%d-leaf%d", pl, l)
			for h := 0; h < p.HostsPerLeaf; h++ {
				t.addHostLink(fmt.Sprintf("h%d", l*p.HostsPerLeaf+h), pl, leaf, h, host)
			}
		}
		for l := 0; l < p.Leaves; l++ {
			for s := 0; s < p.Spines; s++ {
				t.addLink(fmt.Sprintf("p%d-leaf%d-spine%d", pl, l, s),
					Endpoint{fmt.Sprintf("p%d-leaf%d", pl, l), p.HostsPerLeaf + s},
					Endpoint{fmt.Sprintf("p%d-spine%d", pl, s), l}, fab)
			}
		}
	}
	return t, nil
}

// BackToBackParams describe two hosts wired directly.
type BackToBackParams struct {
	// Name names the topology (default "b2b").
	Name string
	// Planes is the number of direct links (0 means 1).
	Planes int
	// Link configures every link; Rate 0 means DefaultRate.
	Link LinkParams
}

// BackToBack builds two hosts, h0 (198.18.0.1) and h1 (198.18.0.2), with
// one direct link per plane: "p<p>-h0-h1" from h0 port p (A) to h1 port p.
func BackToBack(p BackToBackParams) (*Topology, error) {
	if err := commonParams("b2b", &p.Name, &p.Planes); err != nil {
		return nil, err
	}
	lp, _ := tierLinks(p.Link, LinkParams{})
	t := &Topology{Name: p.Name, Planes: p.Planes, Hosts: []Host{
		{Name: "h0", Addr: subnetHost(0, 0), Ports: p.Planes},
		{Name: "h1", Addr: subnetHost(0, 1), Ports: p.Planes},
	}}
	for pl := 0; pl < p.Planes; pl++ {
		t.addLink(fmt.Sprintf("p%d-h0-h1", pl), Endpoint{"h0", pl}, Endpoint{"h1", pl}, lp)
	}
	return t, nil
}

// FatTreeParams describe a 3-tier k-ary fat-tree (Al-Fares et al. 2008).
type FatTreeParams struct {
	// Name names the topology (default "fattree").
	Name string
	// K is the switch radix: even, 2..64 (k=64: 65,536 hosts per plane).
	K int
	// Planes is the number of planes (0 means 1), each a full fat-tree.
	Planes int
	// HostLink configures host-edge links; Rate 0 means DefaultRate.
	HostLink LinkParams
	// FabricLink configures edge-agg and agg-core links; Rate 0 means
	// HostLink's rate.
	FabricLink LinkParams
}

// FatTree builds a k-ary fat-tree per plane: k pods of k/2 edge and k/2
// aggregation switches, (k/2)^2 core switches, k^3/4 hosts.
//
// Names: "p<p>-pod<i>-edge<j>", "p<p>-pod<i>-agg<j>", "p<p>-core<c>".
// Host "h<n>", n = (pod*(k/2) + edge)*(k/2) + i, hangs off edge j of pod i
// at edge port i; its address is 198.18.e.(i+1) with e = pod*(k/2)+edge the
// edge switch's global number (the leaf/spine scheme with edges as leaves).
// Edge ports k/2+a go to agg a (link "p<p>-pod<i>-edge<j>-agg<a>"); agg a's
// ports 0..k/2-1 go to the edges, ports k/2+c to core a*(k/2)+c (link
// "p<p>-pod<i>-agg<a>-core<n>"); core ports are pod numbers.
func FatTree(p FatTreeParams) (*Topology, error) {
	if p.K < 2 || p.K%2 != 0 || p.K > maxFatTreeK {
		return nil, fmt.Errorf("fattree: k %d: want an even number in 2..%d", p.K, maxFatTreeK)
	}
	if err := commonParams("fattree", &p.Name, &p.Planes); err != nil {
		return nil, err
	}
	host, fab := tierLinks(p.HostLink, p.FabricLink)
	k, half := p.K, p.K/2
	bits := edgeBlockBits(k*half, half)
	t := &Topology{Name: p.Name, Planes: p.Planes,
		// Sized up front: at 8 planes x k=32 growing them by appending
		// cost a quarter of the lab's set-up.
		Hosts:    make([]Host, 0, k*half*half),
		Switches: make([]Switch, 0, p.Planes*(k*k+half*half)),
		Links:    make([]Link, 0, p.Planes*3*k*half*half),
	}
	for pod := 0; pod < k; pod++ {
		for e := 0; e < half; e++ {
			for i := 0; i < half; i++ {
				n := (pod*half+e)*half + i
				t.Hosts = append(t.Hosts, Host{Name: fmt.Sprintf("h%d", n), Addr: blockHost(pod*half+e, bits, i), Ports: p.Planes})
			}
		}
	}
	for pl := 0; pl < p.Planes; pl++ {
		for pod := 0; pod < k; pod++ {
			for e := 0; e < half; e++ {
				t.addSwitch(fmt.Sprintf("p%d-pod%d-edge%d", pl, pod, e), pl, "edge")
			}
			for a := 0; a < half; a++ {
				t.addSwitch(fmt.Sprintf("p%d-pod%d-agg%d", pl, pod, a), pl, "agg")
			}
		}
		for c := 0; c < half*half; c++ {
			t.addSwitch(fmt.Sprintf("p%d-core%d", pl, c), pl, "core")
		}
		for pod := 0; pod < k; pod++ {
			for e := 0; e < half; e++ {
				edge := fmt.Sprintf("p%d-pod%d-edge%d", pl, pod, e)
				for i := 0; i < half; i++ {
					t.addHostLink(fmt.Sprintf("h%d", (pod*half+e)*half+i), pl, edge, i, host)
				}
			}
		}
		for pod := 0; pod < k; pod++ {
			for e := 0; e < half; e++ {
				for a := 0; a < half; a++ {
					t.addLink(fmt.Sprintf("p%d-pod%d-edge%d-agg%d", pl, pod, e, a),
						Endpoint{fmt.Sprintf("p%d-pod%d-edge%d", pl, pod, e), half + a},
						Endpoint{fmt.Sprintf("p%d-pod%d-agg%d", pl, pod, a), e}, fab)
				}
			}
			for a := 0; a < half; a++ {
				for c := 0; c < half; c++ {
					core := a*half + c
					t.addLink(fmt.Sprintf("p%d-pod%d-agg%d-core%d", pl, pod, a, core),
						Endpoint{fmt.Sprintf("p%d-pod%d-agg%d", pl, pod, a), half + c},
						Endpoint{fmt.Sprintf("p%d-core%d", pl, core), pod}, fab)
				}
			}
		}
	}
	return t, nil
}
