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

// NewestEndsAtBusy reports the invariant Port.retire's shortcut relies
// on: with departures in the ring, the newest ends at busyPs.
func (p *Port) NewestEndsAtBusy() bool {
	return p.dLen == 0 || p.deps[(p.dHead+p.dLen-1)&(len(p.deps)-1)].endPs == p.busyPs
}
