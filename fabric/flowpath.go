package fabric

import (
	"fmt"
	"net/netip"
)

// FlowTuple is the part of a packet ECMP hashes: its IPv4 addresses,
// protocol and ports. For UDP, the source port is a path's entropy.
type FlowTuple struct {
	Src, Dst         netip.Addr
	Proto            uint8
	SrcPort, DstPort uint16
}

// FlowPath returns the link directions (Port.Index values, in hop order)
// that a packet with tuple ft, sent now from host's NIC port, would cross:
// the same choices forwarding makes (routes as routing believes them, the
// ECMP hash of each switch), computed without sending anything. It is a
// read-only query for tools (the web view's path highlighting); it costs
// one hash per hop and nothing on the data path.
//
// reached is false when the walk ends before the destination host: a
// switch with no route for ft.Dst, or a node with no port for the hop. A
// path into a link that is down but still routed (before the detection
// delay) is returned as far as that link, with reached true: forwarding
// would send the packet there and black-hole it. dirs is appended to and
// returned, so a caller can reuse its storage.
func (n *Network) FlowPath(host string, port int, ft FlowTuple, dirs []int) (_ []int, reached bool, err error) {
	id, ok := n.nodeByNm[host]
	if !ok || !n.nodes[id].host {
		return dirs, false, fmt.Errorf("fabric: flow path: no host %q", host)
	}
	if !ft.Src.Is4() || !ft.Dst.Is4() {
		return dirs, false, fmt.Errorf("fabric: flow path from %s: addresses %v -> %v are not IPv4", host, ft.Src, ft.Dst)
	}
	ports := n.nodes[id].ports
	if port < 0 || port >= len(ports) || ports[port] == nil {
		return dirs, false, fmt.Errorf("fabric: flow path: host %s has no port %d", host, port)
	}
	dst := n.hostOf(addrU32(ft.Dst))
	if dst < 0 {
		return dirs, false, nil
	}
	src := addrU32(ft.Src)
	p := ports[port]
	// A loop-free route crosses each node at most once; the bound only
	// guards against a corrupted FIB.
	for range len(n.nodes) {
		dirs = append(dirs, p.idx)
		to := &n.nodes[p.toNode]
		if to.host {
			return dirs, p.toNode == int(dst), nil
		}
		sw := to.sw
		g := sw.groupFor(dst)
		if g < 0 {
			return dirs, false, nil
		}
		group := sw.groups[g]
		out := group[0]
		if len(group) > 1 {
			out = group[pick(ecmpHash(sw.seed, src, addrU32(ft.Dst), ft.Proto, ft.SrcPort, ft.DstPort), len(group))]
		}
		p = out
	}
	return dirs, false, nil
}

// NodeUp reports whether a host or switch is up: a switch goes down with
// SetSwitchUp or SetPlaneUp.
func (n *Network) NodeUp(name string) (bool, error) {
	id, ok := n.nodeByNm[name]
	if !ok {
		return false, fmt.Errorf("fabric: no node %q", name)
	}
	return n.nodes[id].up, nil
}

// NumPorts returns the number of link directions: Port.Index values run
// from 0 to NumPorts()-1, link i's AtoB direction at 2i and BtoA at 2i+1,
// in the Topology's link order.
func (n *Network) NumPorts() int { return len(n.ports) }

// Impairment returns the impairment this direction applies now (the zero
// Impairment when none).
func (p *Port) Impairment() Impairment { return p.impairment() }
