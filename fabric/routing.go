package fabric

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
)

// recomputeRoutes rebuilds every switch's FIB from the links routing
// believes up (linkCtrl Up or Failing): for each destination host, a
// breadth-first search from the host over switches (hosts never transit)
// gives each switch its hop count; the switch's ECMP group is every routed
// port whose far end is one hop closer. All links cost one hop. Groups are
// shared between destinations with the same next hops.
//
// This runs on the control plane (at Build and after a detection delay),
// so it may allocate; lookups on the data path do not.
func (n *Network) recomputeRoutes() {
	n.routesDirty = false
	nn := len(n.nodes)
	dist := make([]int32, nn)
	queue := make([]int, 0, nn)
	keys := make([]map[string]int32, len(n.switches))
	for i, sw := range n.switches {
		if len(sw.route) != n.numHosts {
			sw.route = make([]int32, n.numHosts)
		}
		sw.groups = sw.groups[:0]
		keys[i] = map[string]int32{}
	}
	// What routing believes of each link, flattened for the inner loops.
	routed := make([]bool, len(n.links))
	for i, l := range n.links {
		routed[i] = l.routed()
	}
	var key []byte
	var members []*Port
	for h := 0; h < n.numHosts; h++ {
		for i := range dist {
			dist[i] = -1
		}
		dist[h] = 0
		queue = append(queue[:0], h)
		for len(queue) > 0 {
			u := queue[0]
			queue = queue[1:]
			for _, p := range n.nodes[u].ports {
				if p == nil || !routed[p.link.idx] {
					continue
				}
				v := p.toNode
				if dist[v] >= 0 || n.nodes[v].host {
					continue
				}
				dist[v] = dist[u] + 1
				queue = append(queue, v)
			}
		}
		for i, sw := range n.switches {
			sw.route[h] = -1
			d := dist[sw.id]
			if d < 0 {
				continue
			}
			key, members = key[:0], members[:0]
			for _, p := range sw.ports {
				if p == nil || !routed[p.link.idx] {
					continue
				}
				if dv := dist[p.toNode]; dv >= 0 && dv == d-1 {
					members = append(members, p)
					key = binary.LittleEndian.AppendUint32(key, uint32(p.idx))
				}
			}
			if len(members) == 0 {
				continue
			}
			gid, ok := keys[i][string(key)]
			if !ok {
				gid = int32(len(sw.groups))
				sw.groups = append(sw.groups, append([]*Port(nil), members...))
				keys[i][string(key)] = gid
			}
			sw.route[h] = gid
		}
	}
}

// Route returns the links of switch sw's ECMP group for destination dst,
// in port order (empty when the switch has no route).
func (n *Network) Route(sw string, dst netip.Addr) ([]string, error) {
	id, ok := n.nodeByNm[sw]
	if !ok || n.nodes[id].host {
		return nil, fmt.Errorf("fabric: no switch %q", sw)
	}
	if !dst.Is4() {
		return nil, fmt.Errorf("fabric: route %v: not IPv4", dst)
	}
	s := n.nodes[id].sw
	h := n.hostOf(addrU32(dst))
	if h < 0 {
		return nil, fmt.Errorf("fabric: route: no host has address %v", dst)
	}
	if s.route[h] < 0 {
		return nil, nil
	}
	var names []string
	for _, p := range s.groups[s.route[h]] {
		names = append(names, p.link.name)
	}
	return names, nil
}

// RouteTable prints switch sw's FIB, one destination host per line:
// "h3 198.18.0.4 -> link1 link2".
func (n *Network) RouteTable(sw string) (string, error) {
	var b strings.Builder
	for _, h := range n.topo.Hosts {
		links, err := n.Route(sw, h.Addr)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s %v -> %s\n", h.Name, h.Addr, strings.Join(links, " "))
	}
	return b.String(), nil
}
