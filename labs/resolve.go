package labs

import (
	"fmt"
	"net/netip"
	"sort"

	"go.yaml.in/yaml/v3"

	"github.com/mrlab/mrlab/fabric"
)

// resolve turns a decoded spec into a Lab: it runs the topology builder (or
// checks the explicit topology), settles every link's parameters, and checks
// that every name the file uses exists.
func (s *spec) resolve(d *decoder) (*Lab, error) {
	var topo *fabric.Topology
	if s.topo.builder != "" {
		topo = s.topo.runBuilder(d, s)
	} else {
		topo = s.topo.explicit(d)
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	topo.Name = s.name
	s.settleLinks(d, topo)
	faults := s.checkFaults(d, topo)
	if err := d.err(); err != nil {
		return nil, err
	}
	// The fabric has the last word on what it can build; place whatever
	// it still objects to at the part of the file that made it.
	if err := topo.Validate(); err != nil {
		s.placeTopologyErrors(d, err)
		return nil, d.err()
	}
	builder := s.topo.builder
	if builder == "" {
		builder = "explicit"
	}
	return &Lab{
		Name:           s.name,
		Description:    s.desc,
		Seed:           s.seed,
		Transport:      s.transport,
		DetectionDelay: s.detection,
		Builder:        builder,
		Faults:         faults,
		Transports:     s.transports,
		topo:           topo,
	}, nil
}

// placeTopologyErrors records the fabric's objections to the topology at
// the nodes of the file that produced them.
func (s *spec) placeTopologyErrors(d *decoder, err error) {
	var tes []*fabric.TopologyError
	var walk func(error)
	walk = func(err error) {
		if te, ok := err.(*fabric.TopologyError); ok {
			tes = append(tes, te)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	if len(tes) == 0 {
		d.errorf(s.topo.node, "topology", "%v", err)
		return
	}
	t := &s.topo
	for _, te := range tes {
		node, field := t.node, "topology"
		switch {
		case t.builder != "":
			// A builder's output is only wrong if its parameters are.
			node, field = t.builderNode, "topology."+t.builder
		case te.Kind == "host" && te.Index >= 0 && te.Index < len(t.hosts):
			h := t.hosts[te.Index]
			node, field = h.node, index("topology.hosts", te.Index)
			if te.Field == "addr" && h.addrNode != nil {
				node, field = h.addrNode, field+".addr"
			}
		case te.Kind == "switch" && te.Index >= 0 && te.Index < len(t.switches):
			node, field = t.switches[te.Index].node, index("topology.switches", te.Index)
		case te.Kind == "link" && te.Index >= 0 && te.Index < len(t.links):
			l := t.links[te.Index]
			node, field = l.node, index("topology.links", te.Index)
			switch te.Field {
			case "a":
				node, field = l.a.node, field+".a"
			case "b":
				node, field = l.b.node, field+".b"
			}
		}
		msg := te.Err.Error()
		if te.Name != "" {
			msg = fmt.Sprintf("%s %s: %s", te.Kind, te.Name, msg)
		}
		d.errorf(node, field, "%s", msg)
	}
}

// defaultSubnet is where lab addresses live unless a lab says otherwise:
// 198.18.0.0/15 is reserved for network benchmarking (RFC 2544).
var defaultSubnet = netip.MustParsePrefix("198.18.0.0/15")

// explicit builds the topology a file spells out, checking names, ends and
// addresses.
func (t *topoSpec) explicit(d *decoder) *fabric.Topology {
	topo := &fabric.Topology{Planes: 1}
	where := map[string]*yaml.Node{} // node name -> where it was declared
	isHost := map[string]int{}       // host name -> ports
	declare := func(name string, n *yaml.Node, path string) bool {
		if prev, dup := where[name]; dup {
			d.errorf(n, path, "duplicate node name %q (first declared at line %d)", name, prev.Line)
			return false
		}
		where[name] = n
		return true
	}
	maxPlane := 0
	for i, sw := range t.switches {
		if sw.nameNode == nil || !declare(sw.name, sw.nameNode, index("topology.switches", i)+".name") {
			continue
		}
		if t.planesNode != nil && sw.plane >= t.planes {
			d.errorf(sw.planeNode, index("topology.switches", i)+".plane", "plane %d is not below planes: %d", sw.plane, t.planes)
		}
		maxPlane = max(maxPlane, sw.plane)
		topo.Switches = append(topo.Switches, fabric.Switch{Name: sw.name, Plane: sw.plane, Role: sw.role})
	}
	// Without switches (hosts cabled to each other), a host's port p is
	// its plane-p port, so the planes are the widest host's ports.
	topo.Planes = maxPlane + 1
	if len(t.switches) == 0 {
		for _, h := range t.hosts {
			topo.Planes = max(topo.Planes, h.ports)
		}
	}
	if t.planesNode != nil {
		topo.Planes = t.planes
	}
	addrs := map[netip.Addr]string{}
	for i, h := range t.hosts {
		path := index("topology.hosts", i)
		if h.nameNode == nil || !declare(h.name, h.nameNode, path+".name") {
			continue
		}
		isHost[h.name] = h.ports
		addr, at := h.addr, h.addrNode
		if at == nil {
			// Hosts without an address get the i-th one of the lab subnet.
			addr, at = nthAddr(defaultSubnet, i+1), h.node
		}
		if other, dup := addrs[addr]; dup {
			d.errorf(at, path+".addr", "address %v is already %s's", addr, other)
		}
		addrs[addr] = h.name
		topo.Hosts = append(topo.Hosts, fabric.Host{Name: h.name, Addr: addr, Ports: h.ports})
	}
	used := map[fabric.Endpoint]int{} // endpoint -> link index using it
	names := map[string]int{}
	for i, l := range t.links {
		path := index("topology.links", i)
		if l.a.node == nil || l.b.node == nil {
			continue
		}
		name, nameAt := l.name, l.nameNode
		if nameAt == nil {
			name, nameAt = l.a.ep.Node+"-"+l.b.ep.Node, l.node
		}
		if j, dup := names[name]; dup {
			d.errorf(nameAt, path+".name", "duplicate link name %q (also topology.links[%d]; set name: to tell them apart)", name, j)
		}
		names[name] = i
		ok := true
		for _, e := range []struct {
			end   endpointSpec
			field string
		}{{l.a, ".a"}, {l.b, ".b"}} {
			ep := e.end.ep
			if _, found := where[ep.Node]; !found {
				d.errorf(e.end.node, path+e.field, "no host or switch named %q%s", ep.Node, suggest(ep.Node, sortedKeys(where)))
				ok = false
				continue
			}
			if ports, host := isHost[ep.Node]; host && ep.Port >= ports {
				d.errorf(e.end.node, path+e.field, "host %s has ports 0 to %d, not %d", ep.Node, ports-1, ep.Port)
				ok = false
			}
			if j, dup := used[ep]; dup {
				d.errorf(e.end.node, path+e.field, "%s:%d is already used by topology.links[%d]", ep.Node, ep.Port, j)
				ok = false
			}
			used[ep] = i
		}
		if ok && l.a.ep.Node == l.b.ep.Node {
			d.errorf(l.b.node, path+".b", "a link from %s to itself", l.a.ep.Node)
		}
		topo.Links = append(topo.Links, fabric.Link{Name: name, A: l.a.ep, B: l.b.ep})
	}
	return topo
}

// DefaultLinkParams are the parameters of a link that the lab file does
// not set: 100 Gbit/s, 1 us, a 512 KiB queue and DCTCP-style step ECN
// marking above 64 KiB.
func DefaultLinkParams() fabric.LinkParams {
	return fabric.LinkParams{
		Rate:       100e9,
		Delay:      1000,
		QueueBytes: 512 << 10,
		ECN:        fabric.ECNConfig{Mode: fabric.ECNStep, K: 64 << 10},
	}
}

// nthAddr returns the n-th address of prefix p.
func nthAddr(p netip.Prefix, n int) netip.Addr {
	b := p.Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// classParams returns the parameters of a host link (host true) or a
// fabric link before per-link settings: DefaultLinkParams, then the
// lab-wide impair, links.default, and links.host or links.fabric. Builders
// get these for their two classes of links.
func (s *spec) classParams(host bool) fabric.LinkParams {
	p := DefaultLinkParams()
	if s.impair != nil {
		p.Impair = s.impair.imp
	}
	s.linkDef.apply(&p)
	if host {
		s.linkHost.apply(&p)
	} else {
		s.linkFab.apply(&p)
	}
	return p
}

// settleLinks gives every link its final parameters. Later settings win:
// classParams (which builders already applied), an explicit link's own,
// then overrides in file order.
func (s *spec) settleLinks(d *decoder, topo *fabric.Topology) {
	hosts := hostSet(topo)
	byName := make(map[string]int, len(topo.Links))
	for i := range topo.Links {
		byName[topo.Links[i].Name] = i
	}
	if s.topo.builder == "" {
		for i := range topo.Links {
			k := &topo.Links[i]
			k.Params = s.classParams(hosts[k.A.Node] || hosts[k.B.Node])
			s.topo.links[i].params.apply(&k.Params)
		}
	}
	for i, o := range s.overrides {
		if o.linkNode == nil {
			continue
		}
		j, ok := byName[o.link]
		if !ok {
			d.errorf(o.linkNode, index("links.overrides", i)+".link", "no link named %q in this lab%s", o.link, suggest(o.link, linkNames(topo)))
			continue
		}
		o.params.apply(&topo.Links[j].Params)
	}
}

// checkFaults resolves the timeline's names against the topology.
func (s *spec) checkFaults(d *decoder, topo *fabric.Topology) []Fault {
	links := map[string]bool{}
	for _, k := range topo.Links {
		links[k.Name] = true
	}
	switches := map[string]bool{}
	for _, sw := range topo.Switches {
		switches[sw.Name] = true
	}
	hosts := hostSet(topo)
	out := make([]Fault, 0, len(s.faults))
	for _, f := range s.faults {
		if f.nameNode == nil || f.actionNode == nil || f.targets != 1 {
			continue // already reported
		}
		switch f.target {
		case TargetLink:
			if !links[f.name] {
				d.errorf(f.nameNode, f.path+".link", "no link named %q in this lab%s", f.name, suggest(f.name, linkNames(topo)))
				continue
			}
		case TargetSwitch:
			if hosts[f.name] {
				d.errorf(f.nameNode, f.path+".switch", "%q is a host, not a switch (fail its links instead)", f.name)
				continue
			}
			if !switches[f.name] {
				d.errorf(f.nameNode, f.path+".switch", "no switch named %q in this lab%s", f.name, suggest(f.name, sortedKeys(switches)))
				continue
			}
		case TargetPlane:
			if f.plane >= topo.Planes {
				d.errorf(f.nameNode, f.path+".plane", "no plane %d in this lab (it has planes 0 to %d)", f.plane, topo.Planes-1)
				continue
			}
		}
		fault := Fault{At: f.at, Target: f.target, Name: f.name, Plane: f.plane, Action: f.action, Dir: f.dir, Line: max(f.node.Line, 0)}
		if f.impair != nil {
			fault.Impair, fault.ImpairText = f.impair.imp, f.impair.text
		}
		out = append(out, fault)
	}
	return out
}

func linkNames(topo *fabric.Topology) []string {
	out := make([]string, len(topo.Links))
	for i, k := range topo.Links {
		out[i] = k.Name
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// suggest returns ` (did you mean "x"?)` for the closest name within a
// small edit distance, or "" if none is close.
func suggest(name string, names []string) string {
	best, ok := Closest(name, names)
	if !ok {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// Closest returns the name in names closest to name within a small edit
// distance (a third of its length, plus one), for "did you mean"
// suggestions; ok is false when none is that close.
func Closest(name string, names []string) (best string, ok bool) {
	bestD := len(name)/3 + 2
	for _, n := range names {
		if dist := editDistance(name, n, bestD); dist < bestD {
			best, bestD = n, dist
		}
	}
	return best, best != ""
}

// editDistance is the Levenshtein distance of a and b, or limit if it is
// at least limit.
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d >= limit || -d >= limit {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], limit)
}
