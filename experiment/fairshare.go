package experiment

import (
	"math"
	"net/netip"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// arrivals records, per sender, every packet that crossed one link
// direction (an incast's bottleneck: the receiver's downlink), with the
// exact time its last bit arrived. It is a fabric.Observer: it only reads.
type arrivals struct {
	point int
	index map[netip.Addr]int
	// at are arrival times in picoseconds and n the IPv4 bytes, per
	// sender, in time order.
	at [][]int64
	n  [][]int
}

func newArrivals(p *fabric.Port, senders []netip.Addr) *arrivals {
	a := &arrivals{point: p.Index(), index: map[netip.Addr]int{}, at: make([][]int64, len(senders)), n: make([][]int, len(senders))}
	for i, s := range senders {
		a.index[s] = i
	}
	return a
}

// Observe keeps the deliveries at the bottleneck.
func (a *arrivals) Observe(now sim.Time, ev fabric.Event, pt fabric.Point, b *packet.Buffer, _ fabric.DropReason) {
	if ev != fabric.EvDeliver || pt.Link != a.point || b.Len() < header.IPv4MinSize {
		return
	}
	i, ok := a.index[header.IPv4(b.Data()).Src()]
	if !ok {
		return
	}
	a.at[i] = append(a.at[i], int64(b.Stamp))
	a.n[i] = append(a.n[i], b.Len())
}

// fluid returns, for sender i, the bytes delivered by each time of grid
// (ns, increasing), counting a packet's bytes as they cross the wire: a
// packet of n bytes on a line of rate bit/s occupies the rate's n*8/rate
// before its last bit arrives. Counting whole packets at their arrival
// would make a window's share jump by a packet at its edges.
func (a *arrivals) fluid(i int, grid []float64, rate float64) []float64 {
	out := make([]float64, len(grid))
	var done float64 // bytes of packets fully arrived before the pointer
	j := 0
	for k, g := range grid {
		gps := g * 1000
		for j < len(a.at[i]) && float64(a.at[i][j]) <= gps {
			done += float64(a.n[i][j])
			j++
		}
		partial := 0.0
		if j < len(a.at[i]) {
			end := float64(a.at[i][j])
			dur := float64(a.n[i][j]) * 8 / rate * 1e12
			if start := end - dur; gps > start {
				partial = float64(a.n[i][j]) * (gps - start) / dur
			}
		}
		out[k] = done + partial
	}
	return out
}

// settle is the strict fair-share test of an incast: over windows of
// window ns sliding by step ns from t0 to t0+span, is every sender's
// delivered share within tol of fair bytes per window? It returns the
// start of the first window from which every later window passes, in ns
// after t0, or -1 if the last window fails (never settled).
func (a *arrivals) settle(t0, span, window, step sim.Time, rate, fair, tol float64) sim.Time {
	m := int(window / step)
	k := int(span/step) + 1
	if m < 1 || k <= m {
		return -1
	}
	grid := make([]float64, k)
	for i := range grid {
		grid[i] = float64(t0 + sim.Time(i)*step)
	}
	ok := make([]bool, k-m) // window starting at grid point w passes
	for w := range ok {
		ok[w] = true
	}
	for i := range a.at {
		f := a.fluid(i, grid, rate)
		for w := range ok {
			if ok[w] && math.Abs(f[w+m]-f[w]-fair) > tol*fair {
				ok[w] = false
			}
		}
	}
	first := -1
	for w := len(ok) - 1; w >= 0 && ok[w]; w-- {
		first = w
	}
	if first < 0 {
		return -1
	}
	return sim.Time(first) * step
}

// bytesBetween returns the bytes (whole packets) every sender delivered
// with arrival in [from, to) ns.
func (a *arrivals) bytesBetween(i int, from, to sim.Time) int64 {
	var s int64
	for j, t := range a.at[i] {
		if t >= int64(from)*1000 && t < int64(to)*1000 {
			s += int64(a.n[i][j])
		}
	}
	return s
}
