package fabric

// SetMaskDegree sets the most switch neighbours for which routing keeps
// groups as masks (0: never) and returns what restores it.
func SetMaskDegree(d int32) (restore func()) {
	old := maskDegree
	maskDegree = d
	return func() { maskDegree = old }
}

// HoldsImpairState reports whether p keeps netem state (impairState).
func (p *Port) HoldsImpairState() bool { return p.ia != nil }

// RingGrow is ringGrow, for TestRingGrowPowersOfTwo.
var RingGrow = ringGrow

// RecomputeAllRoutes throws routing's state away and computes every FIB
// from nothing, as Build does: the baseline BenchmarkRouteFailure compares
// a failure's incremental work with.
func (n *Network) RecomputeAllRoutes() {
	n.rt = routeState{}
	for _, sw := range n.switches {
		sw.route, sw.groups, sw.groupKeys = nil, nil, nil
	}
	n.recomputeRoutes()
}

// RouteSearches returns how many class searches routing has run.
func (n *Network) RouteSearches() int { return n.rt.searches }

// NewestEndsAtBusy reports the invariant Port.retire's shortcut relies
// on: with departures in the ring, the newest ends at busyPs.
func (p *Port) NewestEndsAtBusy() bool {
	return p.dLen == 0 || p.deps[(p.dHead+p.dLen-1)&(len(p.deps)-1)].endPs == p.busyPs
}
