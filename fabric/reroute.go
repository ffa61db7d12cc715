package fabric

import (
	"encoding/binary"
	"slices"
)

// This file holds routing's incremental rules (routing.go holds the
// search): what a change of some links' routed state does to the classes
// that exist, and how a new class is filled in.

// switchLinksChanged updates the classes before firstNew for the
// switch-to-switch links swLinks whose routed state changed: a local fix
// per class where hop counts stay, else a new search of the class in the
// link's component, returned as the (class, component) pairs left to
// search. The hop counts read are those before the change: a switch that
// lost its last way closer and every switch-to-switch link (a failed
// switch) is unreachable, and no other switch's hop count depended on it
// alone (each of its neighbours is checked over its own link), so it is
// marked so afterwards instead of searched; one that was unreachable and
// gains a link to a reachable switch joins (join).
func (n *Network) switchLinksChanged(swLinks []int32, firstNew int) map[[2]int32]bool {
	rt := &n.rt
	slices.Sort(swLinks)
	swLinks = slices.Compact(swLinks)
	research := map[[2]int32]bool{}
	var cutOff [][2]int32 // (class, switch) unreachable now
	var joins [][2]int32  // (class, switch) reachable now
	for _, li := range swLinks {
		u := int32(n.links[li].ends[AtoB].fromNode - n.numHosts)
		v := int32(n.links[li].ends[BtoA].fromNode - n.numHosts)
		ci := rt.comp[u]
		for c := 0; c < firstNew; c++ {
			k := [2]int32{int32(c), ci}
			if research[k] {
				continue
			}
			dist := rt.classDist[c]
			du, dv := dist[u], dist[v]
			switch {
			case du < 0 && dv < 0, du == dv:
				// On no shortest path before, nor after: hop counts are
				// equal or the link is unreachable for the class.
			case du >= 0 && dv >= 0 && (du-dv == 1 || dv-du == 1):
				x := u
				if dv > du {
					x = v
				}
				switch {
				case n.setClassGroup(int32(c), x):
				case n.isolated(x):
					cutOff = append(cutOff, [2]int32{int32(c), x})
				default:
					research[k] = true // x lost its last way closer
				}
			case !rt.routed[li]:
				// Down, and not routed before either: a routed link
				// joins switches at most one hop apart, or two that are
				// both unreachable.
			case du >= 0 && dv >= 0:
				research[k] = true // the link shortens paths
			default:
				x := u // the unreachable end joins
				if du >= 0 {
					x = v
				}
				joins = append(joins, [2]int32{int32(c), x})
			}
		}
	}
	for _, cx := range cutOff {
		if !research[[2]int32{cx[0], rt.comp[cx[1]]}] {
			rt.classDist[cx[0]][cx[1]] = -1
			n.switches[cx[1]].route[cx[0]] = -1
		}
	}
	n.join(joins, research)
	return research
}

// join gives each switch x of joins, unreachable for class c before this
// recompute and now linked to a reachable switch (a repaired switch or
// link), its hop count and group without a search when that changes no
// other switch's hop count: x's hop count is one more than its nearest
// routed neighbour's (m+1), and nothing else moves when no routed
// neighbour of x is unreachable (it would join through x) or farther than
// m+2 (x would shorten its paths). Neighbours at m+2 gain x in their
// groups. Otherwise the class is searched again in x's component (added
// to research). Hop counts read are current: every class and component
// not in research is up to date but for joins.
func (n *Network) join(joins [][2]int32, research map[[2]int32]bool) {
	rt := &n.rt
	var gain [][2]int32
	for _, cx := range joins {
		c, x := cx[0], cx[1]
		k := [2]int32{c, rt.comp[x]}
		dist := rt.classDist[c]
		if research[k] || dist[x] >= 0 {
			continue // searched anyway, or joined over another link
		}
		m := int16(-1)
		for j := rt.adjOff[x]; j < rt.adjOff[x+1]; j++ {
			if !rt.adjUp[j] {
				continue
			}
			d := dist[rt.adjTo[j]]
			if d < 0 {
				m = -1
				break
			}
			if m < 0 || d < m {
				m = d
			}
		}
		ok := m > 0
		for j := rt.adjOff[x]; ok && j < rt.adjOff[x+1]; j++ {
			if rt.adjUp[j] && dist[rt.adjTo[j]] > m+2 {
				ok = false
			}
		}
		if !ok {
			research[k] = true
			continue
		}
		dist[x] = m + 1
		if !n.setClassGroup(c, x) {
			research[k] = true
			continue
		}
		for j := rt.adjOff[x]; j < rt.adjOff[x+1]; j++ {
			if rt.adjUp[j] && dist[rt.adjTo[j]] == m+2 {
				gain = append(gain, [2]int32{c, rt.adjTo[j]})
			}
		}
	}
	for _, cy := range gain {
		if k := [2]int32{cy[0], rt.comp[cy[1]]}; !research[k] && !n.setClassGroup(cy[0], cy[1]) {
			research[k] = true
		}
	}
}

// isolated reports whether switch si has no routed link to a switch.
func (n *Network) isolated(si int32) bool {
	rt := &n.rt
	for j := rt.adjOff[si]; j < rt.adjOff[si+1]; j++ {
		if rt.adjUp[j] {
			return false
		}
	}
	return true
}

// newClassIn fills in new class c's hop counts and FIB entries in
// component ci. A class's routes in a component depend only on its
// attachment switches there, so when a class with the same ones exists
// (every class is up to date when this runs) they are copied from it; else
// the class is searched and becomes the one to copy from. A host link's
// failure thus costs a copy per component, not a search.
func (n *Network) newClassIn(c, ci int32) {
	rt := &n.rt
	rt.key = binary.LittleEndian.AppendUint32(rt.key[:0], uint32(ci))
	for _, si := range rt.classes[c] {
		if rt.comp[si] == ci {
			rt.key = binary.LittleEndian.AppendUint32(rt.key, uint32(si))
		}
	}
	rep, ok := rt.compRep[string(rt.key)]
	if !ok {
		rt.compRep[string(rt.key)] = c
		n.searchClass(c, ci)
		return
	}
	dist, from := rt.classDist[c], rt.classDist[rep]
	for _, si := range rt.compSw[ci] {
		dist[si] = from[si]
		r := n.switches[si].route
		r[c] = r[rep]
	}
}
