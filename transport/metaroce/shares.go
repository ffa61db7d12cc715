package metaroce

import (
	"math"
	"math/bits"
)

// Path shares: each usable path's part of the window W, in whole packets.
//
// The window in whole packets, T = floor(W / MSS), is apportioned to the
// usable paths in proportion to their weights (in sixteenths, cc.go) by
// largest remainders (Hamilton's method): path i of weight w_i, S the sum
// of the weights, gets floor(T x w_i / S), and, in a dialer's first
// flight (before the first ACK), the T - sum of those packets left over
// go one each to the paths with the largest remainders T x w_i mod S,
// ties to the lowest path index. The first flight's parts so sum to it
// (it is share x the first ACK's round trip, no headroom): rounded down
// alone they sent 80 of its 90 packets over 16 paths, and the ports idled
// until the first ACK (regimes, fattree 100 Gbit/s, 6 hops). No path has
// a mark yet, so the parts differ by a packet at most.
//
// After the first ACK each part is rounded down, the leftover packets
// handed to no path: W's headroom (a quarter of the BDP and 2 MSS) covers
// them.
// Handing them out on every flight too put a packet more per sender in
// the queues that W was sized for (the 2:1 congestion and many-peer
// all-to-all figures both fell; docs/metaroce-wire.md §9 has the
// measurements).
//
// The parts are recomputed when a weight or a path's state changes
// (sharesDirty) or T does, not per packet.

// apportionment hands out T packets over paths of integer weights by
// largest remainders (above), one path at a time in index order: the
// first pass counts the weights (newApportionment), the second asks each
// path's part (part). A path's remainder depends only on its weight, so
// at most 16 distinct remainders are sorted, not one per path.
type apportionment struct {
	t, sum int
	// cut and tie: a path whose remainder exceeds cut gets one packet
	// more, and so do the first tie paths (by index) whose remainder is
	// cut.
	cut, tie int
}

// newApportionment prepares the apportionment of t packets over paths
// whose weights (1-16; a path of weight 0 takes none) are counted in
// count, sum being their total. With floorOnly no leftover packet is
// handed out (after the first ACK; in the first flight, the planted
// fault MutPathShareFloor).
func newApportionment(t int, count *[17]int, sum int, floorOnly bool) apportionment {
	a := apportionment{t: max(t, 0), sum: sum, cut: sum}
	if sum <= 0 {
		return a
	}
	left := a.t
	for x := 1; x <= 16; x++ {
		left -= count[x] * (a.t * x / sum)
	}
	if floorOnly {
		return a
	}
	// The weights' remainders from the largest down, until the leftover
	// packets run out. The remainders add up to left x sum and each is
	// below sum, so more than left paths have one above 0: the loop ends
	// at a remainder above 0.
	var done [17]bool
	for left > 0 {
		best, r := 0, -1
		for x := 1; x <= 16; x++ {
			if count[x] > 0 && !done[x] && a.t*x%sum > r {
				best, r = x, a.t*x%sum
			}
		}
		if best == 0 {
			break
		}
		n := 0
		for x := best; x <= 16; x++ { // every weight with this remainder
			if count[x] > 0 && !done[x] && a.t*x%sum == r {
				n += count[x]
				done[x] = true
			}
		}
		a.cut, a.tie = r, min(n, left)
		left -= n
	}
	return a
}

// part returns the part of the next path in index order of weight x
// (0: none).
func (a *apportionment) part(x uint8) int {
	if x == 0 || a.sum <= 0 {
		return 0
	}
	q := a.t * int(x) / a.sum
	if r := a.t * int(x) % a.sum; r > a.cut || r == a.cut && a.tie > 0 {
		if r == a.cut {
			a.tie--
		}
		q++
	}
	return q
}

// shares recomputes the usable paths' number, total and largest weight,
// and each usable path's part of the window w (in bytes), when a weight
// or a path's state changed or the window's whole packets did.
func (c *Conn) shares(w int) {
	t := max(w/c.mss, 0)
	if !c.s.sharesDirty && t == int(c.s.sharePkts) {
		return
	}
	c.s.sharesDirty = false
	c.s.sharePkts = int32(min(t, math.MaxInt32))
	if c.s.sel.spareDirty {
		c.s.sel.spareDirty = false
		c.setSpare(int(c.s.perPlane))
	}
	var count [17]int
	var open [256]uint8 // the usable paths, in index order
	sum, top, n := 0, uint8(0), 0
	// The paths not spare, in index order: a spare path is not usable
	// (pathSel).
	for w, word := range c.s.sel.open {
		for word != 0 {
			i := w<<6 | bits.TrailingZeros64(word)
			word &= word - 1
			if p := &c.s.paths[i]; p.usable() {
				x := quantWeight(p)
				count[x]++
				sum += int(x)
				top = max(top, x)
				open[n] = uint8(i)
				n++
			}
		}
	}
	c.s.weightSum, c.s.weightTop, c.s.usable = int32(sum), float64(top)/16, int32(n)
	// After the first ACK the leftover packets go to no path (each part
	// rounded down): see above.
	a := newApportionment(t, &count, sum, c.s.heard || c.mutated(MutPathShareFloor))
	for _, i := range open[:n] {
		p := &c.s.paths[i]
		// A path holds at most maxPathWindow packets (its SACK window),
		// so the cap changes nothing it can hold.
		p.part = uint16(min(a.part(quantWeight(p)), math.MaxUint16))
	}
}

// pathShare returns p's share of the window, in bytes: its part in whole
// packets.
func (c *Conn) pathShare(p *sndPath) int {
	c.shares(c.window())
	if !p.usable() {
		return 0
	}
	return int(p.part) * c.mss
}

// freshShare is pathShare for path p of a connection whose paths are not
// allocated: all are as built (usable, with p's weight), so the parts are
// those of pathCount paths of p's weight.
func (c *Conn) freshShare(p *sndPath) int {
	if !p.usable() {
		return 0
	}
	n, x := c.pathCount(), quantWeight(p)
	var count [17]int
	count[x] = n
	a := newApportionment(c.window()/c.mss, &count, n*int(x), c.s.heard || c.mutated(MutPathShareFloor))
	part := 0
	for range int(p.id) + 1 {
		part = a.part(x)
	}
	return part * c.mss
}
