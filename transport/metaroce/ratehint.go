package metaroce

import (
	"math"
	"slices"

	"github.com/mrlab/mrlab/internal/sim"
)

// allocator is a receiver NIC's fair-share allocator: it divides the NIC's
// inbound capacity among the senders that are active toward it by max-min
// water-filling over their advertised demands, and every ACK to a sender
// carries that sender's share.
//
// A sender is active for window after its last data packet. Shares are
// recomputed only when something changes that could move them — a sender
// becomes active or inactive, or its demand changes enough to matter — so
// the per-packet cost is a few comparisons.
type allocator struct {
	capacity float64  // bytes per second to hand out
	window   sim.Time // activity window
	senders  []allocSender
	free     []int32
	order    []int32 // scratch: active senders sorted by demand
	byDemand func(a, b int32) int
	dirty    bool
	computed sim.Time // when shares were last computed
	active   int
	// Recomputes counts water-fill runs (for tests and stats).
	recomputes uint64
}

type allocSender struct {
	used   bool
	active bool
	last   sim.Time
	demand float64 // bytes per second
	share  float64
}

func newAllocator(capacity float64, window sim.Time) *allocator {
	a := &allocator{capacity: capacity, window: window}
	a.byDemand = func(x, y int32) int {
		dx, dy := a.senders[x].demand, a.senders[y].demand
		switch {
		case dx < dy:
			return -1
		case dx > dy:
			return 1
		}
		return int(x - y) // a total order keeps the result deterministic
	}
	return a
}

// register returns a slot for a new connection. A connection the peer
// dialed (presume) counts as active, asking for everything, for one
// activity window from now: its peer dialed to send, and when N senders
// set up connections and then start at once, their first ACKs must carry
// a share of N, not of the few whose first packets happened to arrive
// first (1/1, 1/2, ... of the capacity, which let the early ones overfill
// the queue). A slot that stays idle leaves the count after the window.
func (a *allocator) register(now sim.Time, presume bool) int32 {
	s := a.slot()
	if presume {
		x := &a.senders[s]
		x.active, x.last, x.demand = true, now, a.capacity
		a.dirty = true
	}
	return s
}

// slot takes a free slot or makes one.
func (a *allocator) slot() int32 {
	if n := len(a.free); n > 0 {
		s := a.free[n-1]
		a.free = a.free[:n-1]
		a.senders[s] = allocSender{used: true}
		return s
	}
	a.senders = append(a.senders, allocSender{used: true})
	return int32(len(a.senders) - 1)
}

// unregister frees a connection's slot.
func (a *allocator) unregister(s int32) {
	if s < 0 || int(s) >= len(a.senders) || !a.senders[s].used {
		return
	}
	if a.senders[s].active {
		a.dirty = true
	}
	a.senders[s] = allocSender{}
	a.free = append(a.free, s)
}

// demandBucket quantizes a demand so that small changes do not force a
// recomputation: the exponent and top three mantissa bits of the float,
// so buckets are 6 to 12% apart.
func demandBucket(d float64) int64 {
	if d <= 0 {
		return -1
	}
	return int64(math.Float64bits(d) >> 49)
}

// observe records a data packet from slot s advertising demand bytes/s.
func (a *allocator) observe(s int32, now sim.Time, demand float64) {
	x := &a.senders[s]
	if !x.active || demandBucket(demand) != demandBucket(x.demand) {
		a.dirty = true
	}
	x.last, x.demand = now, demand
	if !x.active {
		x.active = true
	}
}

// share returns slot s's fair share in bytes per second. A sender not (or
// no longer) active may use all of it: it is not competing with anyone
// yet, and its first data packets make it active.
func (a *allocator) share(s int32, now sim.Time) float64 {
	if a.dirty || now-a.computed > a.window/2 {
		a.recompute(now)
	}
	if x := &a.senders[s]; x.active {
		return x.share
	}
	return a.capacity
}

// recompute runs max-min water-filling: in order of increasing demand,
// each sender gets min(its demand, what is left / senders left). Capacity
// no sender asked for is added to every share, so a sender whose demand
// grows can use it at once instead of waiting a round trip for the
// receiver to see the new demand.
func (a *allocator) recompute(now sim.Time) {
	a.recomputes++
	a.dirty = false
	a.computed = now
	a.order = a.order[:0]
	for i := range a.senders {
		x := &a.senders[i]
		if x.used && x.active && now-x.last > a.window {
			x.active = false
		}
		if x.active {
			a.order = append(a.order, int32(i))
		}
	}
	a.active = len(a.order)
	slices.SortFunc(a.order, a.byDemand)
	left := a.capacity
	for i, s := range a.order {
		x := &a.senders[s]
		fair := left / float64(len(a.order)-i)
		x.share = min(x.demand, fair)
		left -= x.share
	}
	if left > 0 {
		for _, s := range a.order {
			a.senders[s].share += left
		}
	}
}
