package fabric

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"strings"
)

// Routing computes every switch's FIB from the links routing believes up
// (linkCtrl Up or Failing). The rule is a breadth-first search from each
// destination host over switches (hosts never transit), giving each switch
// its hop count; the switch's ECMP group is every routed port whose far end
// is one hop closer. All links cost one hop. Groups list their ports in
// port order, so the ECMP choice depends only on the group's members.
//
// Two facts make this cheap at any scale without changing its result:
//
//   - Away from the destination's own switches, a host's routes depend only
//     on the set of switches it reaches over routed links (its attachment
//     set): every host of a leaf, one per plane in a multi-plane fabric,
//     routes alike. Hosts with the same attachment set form a destination
//     class; a switch's FIB holds one entry per class (a k=64 fat tree has
//     2,048 classes for 65,536 hosts), and the search runs once per class,
//     from all the class's attachment switches at hop 1. At an attachment
//     switch the group is the ports to the host itself (routeDirect), kept
//     per host.
//   - A change of a link's routed state is mostly local. Each class keeps
//     its hop counts; for a switch-to-switch link whose ends are one hop
//     apart for a class, only the farther end's group changes, unless that
//     end loses its last member (or the link, coming up, shortens paths):
//     then the class is searched again, in the link's component only
//     (switches that no link joins, such as planes, are apart). A host
//     link moves its host to the class of its new attachment set. A
//     switch cut off or rejoining, and a new class, need no search where
//     no other hop count moves (reroute.go).
//
// This runs on the control plane (at Build and after a detection delay),
// so it may allocate; lookups on the data path do not.

// routeDirect in a switch's class FIB means: the class's hosts are
// attached to this switch; the group is the host's own (directEntry).
const routeDirect = -2

// routeState is the routing bookkeeping of a Network. Switches are named
// by their index in Network.switches (node id - numHosts).
type routeState struct {
	comp   []int32   // switch -> component
	compSw [][]int32 // component -> its switches

	// Switch-to-switch adjacency in port order: switch s's neighbours are
	// adjTo[adjOff[s]:adjOff[s+1]], over ports adjPort.
	adjOff  []int32
	adjTo   []int32
	adjPort []*Port
	adjLink []int32 // link index of adjPort[j], read without a pointer chase
	// adjRev[j] is the position, in its far end's adjacency, of the port
	// back over the same link. byMask says every switch has at most 64
	// switch neighbours, so a group towards switches is a bit mask over
	// its adjacency (bit i: adjacency entry adjOff[s]+i): the search then
	// builds each switch's group as it goes, and finds its index by mask.
	adjRev    []int32
	byMask    bool
	maskGroup []map[uint64]int32 // switch -> group by adjacency mask
	lastMask  []uint64           // switch -> the mask it looked up last
	lastGroup []int32            // switch -> lastMask's group
	adjUp     []bool             // routed[adjLink[j]], in adjacency order

	hostAttach [][]int32        // host -> switches it reaches over routed links, sorted
	hostClass  []int32          // host -> destination class
	hostDirect [][]directEntry  // host -> its group at each attachment switch
	classes    [][]int32        // class -> attachment switches, sorted
	classDist  [][]int16        // class -> hop count at each switch, -1 unreachable
	classByKey map[string]int32 // attachment set -> class
	// compRep maps a component and the attachment switches in it to the
	// first class searched there with them (newClassIn).
	compRep map[string]int32

	dirty []int32 // links whose routed state changed since the last recompute

	searches int // class searches so far (searchClass), for tests

	// Scratch.
	routed []bool // by link, what routing believes now
	queue  []int32
	mask   []uint64 // by switch, in searchClass
	key    []byte
	mem    []*Port
}

// maskDegree is the most switch neighbours a switch may have for groups
// to be masks (a variable so that tests can take the list path).
var maskDegree int32 = 64

// directEntry is a host's group at one switch it is attached to.
type directEntry struct{ sw, group int32 }

// markRouted notes that link l's routed state changed.
func (n *Network) markRouted(l *netLink) { n.rt.dirty = append(n.rt.dirty, int32(l.idx)) }

// groupFor returns the index in s.groups of the ECMP group for host h, or
// -1 when s has no route to it.
func (s *switchNode) groupFor(h int32) int32 {
	rt := &s.net.rt
	g := s.route[rt.hostClass[h]]
	if g != routeDirect {
		return g
	}
	si := int32(s.id - s.net.numHosts)
	for _, d := range rt.hostDirect[h] {
		if d.sw == si {
			return d.group
		}
	}
	return -1
}

// recomputeRoutes brings every FIB up to date with what routing believes:
// all of them the first time, then what the links marked since
// (markRouted) change.
func (n *Network) recomputeRoutes() {
	n.routesDirty = false
	rt := &n.rt
	first := rt.comp == nil
	if first {
		n.initRouting()
	}
	if len(rt.routed) != len(n.links) {
		rt.routed = make([]bool, len(n.links))
	}
	for i, l := range n.links {
		rt.routed[i] = l.routed()
	}
	for j, li := range rt.adjLink {
		rt.adjUp[j] = rt.routed[li]
	}
	dirtyHost := make([]bool, n.numHosts)
	if first {
		for h := range dirtyHost {
			dirtyHost[h] = true
		}
	}
	var swLinks []int32
	for _, li := range rt.dirty {
		a, b := n.links[li].ends[AtoB].fromNode, n.links[li].ends[BtoA].fromNode
		ha, hb := n.nodes[a].host, n.nodes[b].host
		if ha {
			dirtyHost[a] = true
		}
		if hb {
			dirtyHost[b] = true
		}
		if !ha && !hb {
			swLinks = append(swLinks, li)
		}
	}
	rt.dirty = rt.dirty[:0]

	// Hosts whose attachments changed move class; a new class is filled in
	// after the old ones are brought up to date (newClassIn).
	firstNew := len(rt.classes)
	for h, d := range dirtyHost {
		if d {
			rt.hostAttach[h] = n.attachments(h, rt.hostAttach[h][:0])
			rt.hostClass[h] = rt.classOf(rt.hostAttach[h], len(n.switches))
		}
	}
	if nc := len(rt.classes); nc > firstNew {
		for _, sw := range n.switches {
			if cap(sw.route) < nc {
				// Room for a few more classes, so that the first
				// failures of host links do not reallocate every FIB.
				sw.route = append(make([]int32, 0, nc+nc/8+4), sw.route...)
			}
			for len(sw.route) < nc {
				sw.route = append(sw.route, -1)
			}
		}
	}

	research := n.switchLinksChanged(swLinks, firstNew)
	for k := range research {
		n.searchClass(k[0], k[1])
	}
	for c := firstNew; c < len(rt.classes); c++ {
		for ci := range rt.compSw {
			n.newClassIn(int32(c), int32(ci))
		}
	}
	for h, d := range dirtyHost {
		if d {
			n.directGroups(int32(h))
		}
	}
}

// initRouting sizes routing's tables and splits the switches into
// components joined by links in any state (planes, in the builders'
// fabrics).
func (n *Network) initRouting() {
	rt := &n.rt
	ns := len(n.switches)
	rt.adjOff = make([]int32, ns+1)
	for s, sw := range n.switches {
		for _, p := range sw.ports {
			if p != nil && !n.nodes[p.toNode].host {
				rt.adjTo = append(rt.adjTo, int32(p.toNode-n.numHosts))
				rt.adjPort = append(rt.adjPort, p)
				rt.adjLink = append(rt.adjLink, int32(p.link.idx))
			}
		}
		rt.adjOff[s+1] = int32(len(rt.adjTo))
	}
	rt.byMask = true
	rt.adjRev = make([]int32, len(rt.adjTo))
	for u := range ns {
		if rt.adjOff[u+1]-rt.adjOff[u] > maskDegree {
			rt.byMask = false
		}
		for j := rt.adjOff[u]; j < rt.adjOff[u+1]; j++ {
			v := rt.adjTo[j]
			for r := rt.adjOff[v]; r < rt.adjOff[v+1]; r++ {
				if rt.adjLink[r] == rt.adjLink[j] && rt.adjTo[r] == int32(u) {
					rt.adjRev[j] = r
					break
				}
			}
		}
	}
	rt.mask = make([]uint64, ns)
	rt.maskGroup = make([]map[uint64]int32, ns)
	rt.lastMask = make([]uint64, ns) // 0 is never a group's mask
	rt.lastGroup = make([]int32, ns)
	rt.adjUp = make([]bool, len(rt.adjTo))
	rt.comp = make([]int32, ns)
	for i := range rt.comp {
		rt.comp[i] = -1
	}
	var q []int32
	for s := range ns {
		if rt.comp[s] >= 0 {
			continue
		}
		ci := int32(len(rt.compSw))
		rt.comp[s] = ci
		q = append(q[:0], int32(s))
		for i := 0; i < len(q); i++ {
			for _, v := range rt.adjTo[rt.adjOff[q[i]]:rt.adjOff[q[i]+1]] {
				if rt.comp[v] < 0 {
					rt.comp[v] = ci
					q = append(q, v)
				}
			}
		}
		rt.compSw = append(rt.compSw, slices.Clone(q))
	}
	rt.hostAttach = make([][]int32, n.numHosts)
	rt.hostClass = make([]int32, n.numHosts)
	rt.hostDirect = make([][]directEntry, n.numHosts)
	rt.classByKey = map[string]int32{}
	rt.compRep = map[string]int32{}
}

// attachments appends to dst the switches host h reaches over a routed
// link, sorted and without repeats.
func (n *Network) attachments(h int, dst []int32) []int32 {
	for _, p := range n.nodes[h].ports {
		if p != nil && n.rt.routed[p.link.idx] && !n.nodes[p.toNode].host {
			dst = append(dst, int32(p.toNode-n.numHosts))
		}
	}
	slices.Sort(dst)
	return slices.Compact(dst)
}

// classOf returns the destination class of an attachment set, adding one
// (with hop counts for switches switches, all unreachable) if it is new.
func (rt *routeState) classOf(attach []int32, switches int) int32 {
	rt.key = rt.key[:0]
	for _, s := range attach {
		rt.key = binary.LittleEndian.AppendUint32(rt.key, uint32(s))
	}
	if c, ok := rt.classByKey[string(rt.key)]; ok {
		return c
	}
	c := int32(len(rt.classes))
	rt.classes = append(rt.classes, slices.Clone(attach))
	dist := make([]int16, switches)
	for i := range dist {
		dist[i] = -1
	}
	rt.classDist = append(rt.classDist, dist)
	rt.classByKey[string(rt.key)] = c
	return c
}

// searchClass recomputes class c's hop counts and FIB entries in component
// ci: a breadth-first search from the class's attachment switches (hop 1)
// over routed links.
func (n *Network) searchClass(c, ci int32) {
	rt := &n.rt
	rt.searches++
	dist := rt.classDist[c]
	for _, si := range rt.compSw[ci] {
		dist[si] = -1
	}
	q := rt.queue[:0]
	for _, si := range rt.classes[c] {
		if rt.comp[si] == ci {
			dist[si] = 1
			q = append(q, si)
		}
	}
	if rt.byMask {
		n.searchMasks(c, ci, q)
		return
	}
	for i := 0; i < len(q); i++ {
		u := q[i]
		for j := rt.adjOff[u]; j < rt.adjOff[u+1]; j++ {
			if v := rt.adjTo[j]; dist[v] < 0 && rt.routed[rt.adjLink[j]] {
				dist[v] = dist[u] + 1
				q = append(q, v)
			}
		}
	}
	rt.queue = q
	n.assignClass(c, ci, false)
}

// assignClass sets the route to class c of every switch of component ci
// from the search's hop counts: none (unreachable), direct (hop 1), else
// its group towards the switches one hop closer, read from the masks the
// search built when byMask, else from the routed links (setClassGroup).
func (n *Network) assignClass(c, ci int32, byMask bool) {
	rt := &n.rt
	dist := rt.classDist[c]
	for _, si := range rt.compSw[ci] {
		switch d := dist[si]; {
		case d < 0:
			n.switches[si].route[c] = -1
		case d == 1:
			n.switches[si].route[c] = routeDirect
		case byMask:
			n.switches[si].route[c] = n.groupOfMask(si, rt.mask[si])
		default:
			n.setClassGroup(c, si)
		}
	}
}

// searchMasks is searchClass's search when groups are masks: from the
// seeds q (hop 1), each switch reached over a routed link from one hop
// closer gains that link's port in its mask, so the groups are known when
// the search ends.
func (n *Network) searchMasks(c, ci int32, q []int32) {
	rt := &n.rt
	dist := rt.classDist[c]
	mask := rt.mask
	for _, si := range rt.compSw[ci] {
		mask[si] = 0
	}
	for i := 0; i < len(q); i++ {
		u := q[i]
		du := dist[u] + 1
		for j := rt.adjOff[u]; j < rt.adjOff[u+1]; j++ {
			if !rt.adjUp[j] {
				continue
			}
			v := rt.adjTo[j]
			dv := dist[v]
			if dv < 0 {
				dist[v], dv = du, du
				q = append(q, v)
			}
			if dv == du {
				mask[v] |= 1 << (rt.adjRev[j] - rt.adjOff[v])
			}
		}
	}
	rt.queue = q
	n.assignClass(c, ci, true)
}

// groupOfMask returns the index of switch si's group whose members are
// the adjacency entries of mask (non-zero), adding it if new.
func (n *Network) groupOfMask(si int32, mask uint64) int32 {
	rt := &n.rt
	if rt.lastMask[si] == mask {
		return rt.lastGroup[si]
	}
	m := rt.maskGroup[si]
	if g, ok := m[mask]; ok {
		rt.lastMask[si], rt.lastGroup[si] = mask, g
		return g
	}
	mem := rt.mem[:0]
	for b := mask; b != 0; b &= b - 1 {
		mem = append(mem, rt.adjPort[rt.adjOff[si]+int32(bits.TrailingZeros64(b))])
	}
	rt.mem = mem
	g := n.switches[si].groupID(mem, rt)
	if m == nil {
		m = map[uint64]int32{}
		rt.maskGroup[si] = m
	}
	m[mask] = g
	rt.lastMask[si], rt.lastGroup[si] = mask, g
	return g
}

// setClassGroup sets switch si's FIB entry for class c (hop count >= 2) to
// its routed links towards switches one hop closer. It reports false, and
// leaves the entry alone, when there are none.
func (n *Network) setClassGroup(c, si int32) bool {
	rt := &n.rt
	dist := rt.classDist[c]
	want := dist[si] - 1
	if rt.byMask {
		var mask uint64
		for j := rt.adjOff[si]; j < rt.adjOff[si+1]; j++ {
			if dist[rt.adjTo[j]] == want && rt.routed[rt.adjLink[j]] {
				mask |= 1 << (j - rt.adjOff[si])
			}
		}
		if mask == 0 {
			return false
		}
		n.switches[si].route[c] = n.groupOfMask(si, mask)
		return true
	}
	mem := rt.mem[:0]
	for j := rt.adjOff[si]; j < rt.adjOff[si+1]; j++ {
		if p := rt.adjPort[j]; dist[rt.adjTo[j]] == want && rt.routed[rt.adjLink[j]] {
			mem = append(mem, p)
		}
	}
	rt.mem = mem
	if len(mem) == 0 {
		return false
	}
	sw := n.switches[si]
	sw.route[c] = sw.groupID(mem, rt)
	return true
}

// directGroups recomputes host h's groups at its attachment switches: the
// routed ports to h itself.
func (n *Network) directGroups(h int32) {
	rt := &n.rt
	rt.hostDirect[h] = rt.hostDirect[h][:0]
	for _, si := range rt.hostAttach[h] {
		sw := n.switches[si]
		mem := rt.mem[:0]
		for _, p := range sw.ports {
			if p != nil && rt.routed[p.link.idx] && p.toNode == int(h) {
				mem = append(mem, p)
			}
		}
		rt.mem = mem
		if len(mem) > 0 {
			rt.hostDirect[h] = append(rt.hostDirect[h], directEntry{sw: si, group: sw.groupID(mem, rt)})
		}
	}
}

// groupID returns the index of the group with exactly these members (in
// this order), adding it if s has none.
func (s *switchNode) groupID(members []*Port, rt *routeState) int32 {
	rt.key = rt.key[:0]
	for _, p := range members {
		rt.key = binary.LittleEndian.AppendUint32(rt.key, uint32(p.idx))
	}
	if g, ok := s.groupKeys[string(rt.key)]; ok {
		return g
	}
	g := int32(len(s.groups))
	s.groups = append(s.groups, slices.Clone(members))
	if s.groupKeys == nil {
		s.groupKeys = map[string]int32{}
	}
	s.groupKeys[string(rt.key)] = g
	return g
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
	g := s.groupFor(h)
	if g < 0 {
		return nil, nil
	}
	var names []string
	for _, p := range s.groups[g] {
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
