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
// A sender is active for a while after its last data packet: four of
// its round trips, four of its packet intervals at its share, or eight of
// its recent packet intervals (a sender held below its share by marks),
// whichever is longest: a sender that paces slowly is still a sender.
// A packet that says it is its sender's last (demand 0: nothing left to
// send or to send again) ends the sender's activity at once.
// Shares are recomputed only when something changes that could move
// them — a sender becomes active or inactive, or its demand changes
// enough to matter — so the per-packet cost is a few comparisons.
//
// The receiver owns the congestion its senders share. While it is busy —
// its active senders ask for at least its capacity and their arrivals fill
// at least busyFraction of what it hands out, so that it is the bottleneck
// they share — CE marks on their packets are its to answer: it runs DCTCP
// on the aggregate, once per period, alpha the EWMA of the periods' marked
// fractions (the first period's fraction itself: it holds many packets).
// A period is long enough for a cut to show: the largest of its senders'
// RTT plus packet interval at their share (a sender hears a new share
// only in the ACK of its next packet), and at least 8 packet times. On a
// period with marks the fraction handed out is multiplied by
// (1 - alpha/2), and no further cut comes for two periods, nor on a
// period whose marked fraction is below the previous period's: the
// queue the last cut was for is still draining, and alpha (an EWMA)
// stays high long after its marks thin, so a cut on the drain's tail
// takes capacity the drain does not need (a 63-to-1 incast at 0.4
// packets per RTT each, its first queue deepened by a first flight, was
// cut to half its capacity and settled in 83 RTTs instead of 13). A cut
// ends when its queue has drained (drained): a block of fillBlock
// arrivals unmarked and slower than halfway from the fraction handed out
// to the capacity brings the whole capacity back at once.
// Otherwise recovery is DCQCN's: halfway back to the fraction before the cut per unmarked
// period (the cut was for the queue that was there), and once there,
// 1/16 more per period, up to the whole capacity; while not busy, halfway
// to the whole capacity per period. Every sender's share moves alike, so
// the queue drains without costing any sender more than another, and ACKs
// say the receiver is busy (wire.FlagBusy) so that the senders leave those
// marks to it. A sender whose marks come while its receiver is not busy
// answers them itself.
type allocator struct {
	capacity float64  // bytes per second the NIC takes in
	ports    int      // the NIC's ports (planes), each capacity/ports
	presume  sim.Time // how long a newly accepted connection counts as active
	gain     float64  // DCTCP's g
	// Link control: the fraction of capacity handed out and its alpha (-1:
	// no period yet), the fraction recovery heads for, and the current
	// period's start, length and arrivals.
	frac, alpha    float64
	target         float64
	pStart, pRTT   sim.Time
	pPkts, pMarked int
	lastF          float64 // the last period's marked fraction
	// Fill: the arrival rate over blocks of fillBlock packets.
	fStart   sim.Time
	fBytes   float64
	fPkts    int
	fMarked  int
	asked    bool // the active senders' demands add up to the capacity
	filled   bool // the last block's arrivals came at busyFraction of what is handed out
	busy     bool // asked && filled
	hold     int  // periods before marks may cut again
	senders  []allocSender
	free     []int32
	order    []int32 // scratch: active senders sorted by demand
	byDemand func(a, b int32) int
	dirty    bool
	expiry   sim.Time // the earliest time an active sender goes inactive
	active   int
	// Recomputes counts water-fill runs (for tests and stats).
	recomputes uint64
	// holdGrants (Options.HoldFirstGrant): a grant outlives its sender's
	// presumption and holds until its first data packet arrives.
	holdGrants bool
	// revise, if set, lowers slot s's outstanding grant to g bytes per
	// second and tells its dialer (a SYN_ACK with FlagRevise); false if
	// it cannot (no way to send now), and the grant stands.
	revise func(s int32, g float64) bool
}

type allocSender struct {
	used   bool
	active bool
	last   sim.Time
	window sim.Time // active until last + window
	gap    sim.Time // smoothed time between its packets
	demand float64  // bytes per second
	share  float64
	// grant is the first-round-trip rate its SYN_ACK offered (firstGrant),
	// held against the capacity until its first data packet arrives or
	// its presumption ends (with holdGrants: until that packet arrives,
	// however late, or the slot is freed).
	grant float64
}

// busyFraction: the receiver is the bottleneck its senders share only if
// their packets arrive at this much of the rate it hands out, measured
// over blocks of fillBlock packets: a queue at the receiver's switch port
// delivers back to back, at the whole rate, from its first packet on. If
// they arrive slower, something else (a congested fabric port, their own
// cuts) holds them back and the marks are theirs to answer.
const (
	busyFraction = 0.9
	fillBlock    = 16
)

func newAllocator(capacity float64, presume sim.Time, gain float64) *allocator {
	a := &allocator{capacity: capacity, ports: 1, presume: presume, gain: gain, frac: 1, target: 1, alpha: -1}
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
// dialed (presume) counts as active, asking for everything, from now until
// a few round trips after the handshake completes (presumeFor), at most
// RTOMax if it never does: its peer dialed to send, and when N senders
// set up connections and then start at once, their first ACKs must carry
// a share of N, not of the few whose first packets happened to arrive
// first (1/1, 1/2, ... of the capacity, which let the early ones overfill
// the queue). A slot that stays idle leaves the count after the window.
func (a *allocator) register(now sim.Time, presume bool) int32 {
	s := a.slot()
	if presume {
		x := &a.senders[s]
		x.active, x.last, x.window, x.demand = true, now, a.presume, a.capacity
		a.dirty = true
	}
	return s
}

// presumeFor keeps a slot presumed active, as if it had sent, until window
// from now: a connection just confirmed sends its first data about then.
func (a *allocator) presumeFor(s int32, now, window sim.Time) {
	x := &a.senders[s]
	if !x.active {
		return // it stopped being presumed, or never was
	}
	x.last, x.window = now, max(x.window, window)
	a.expiry = min(a.expiry, now+x.window)
}

// firstGrant is the rate (bytes per second) slot s, just registered as
// presumed active, may send at before its first ACK: its fair share among
// the active senders, but no more than the capacity that grants still
// outstanding (to senders whose first data has not arrived) leave. So the
// first flights the receiver has granted add up to at most its capacity
// for a round trip however many senders dial at once. When what is left
// is less than the share, the outstanding grants above the share are
// first lowered to it (reviseGrants), so N simultaneous dialers end with
// the share of N each rather than the first with all of it and the rest
// one packet each (an all-to-all's first operation lost a round trip per
// connection to that: 0.69x lossless RoCEv2 at 400G on the quick bed).
func (a *allocator) firstGrant(s int32, now sim.Time) float64 {
	share := a.share(s, now)
	left := a.capacity * a.frac
	for i := range a.senders {
		if x := &a.senders[i]; int32(i) != s && (x.active || a.holdGrants) {
			left -= x.grant
		}
	}
	if share > left && a.revise != nil {
		left = a.reviseGrants(s, share, left)
	}
	g := max(0, min(share, left))
	a.senders[s].grant = g
	return g
}

// reviseGrants lowers every outstanding grant above share (other than
// slot s's) to share, where revise can tell its dialer, and returns
// left (the capacity the outstanding grants leave) after. Only grants
// above the share move, and only when a new dialer finds less than its
// share left: grants that fit are never revised, and a dialer hears at
// most one revision per later dialer (fewer: its NIC sends the latest
// value once however often it changed before its port took it).
func (a *allocator) reviseGrants(s int32, share, left float64) float64 {
	for i := range a.senders {
		x := &a.senders[i]
		if int32(i) == s || !(x.active || a.holdGrants) || x.grant <= share {
			continue
		}
		if a.revise(int32(i), share) {
			left += x.grant - share
			x.grant = share
		}
	}
	return left
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

// observe records a data packet of pkt bytes from slot s advertising
// demand bytes/s, CE-marked or not; rtt is the receiver's estimate of the
// round trip to the sender.
//
// A demand of 0 marks the sender's last packet (demandKBs): it has
// nothing left to send or to send again, so it is active no longer, and
// its share goes to the others at once instead of at the end of its
// activity window (on plane-scaling's 4,000 connections, 250 per
// receiver, that window is four packet intervals at C/250, 340 us: the
// last senders of every receiver stayed paced at C/250 for as long while
// its link idled). Its ACK offers what one more sender would get, as to
// any sender not active (share).
func (a *allocator) observe(s int32, now sim.Time, demand float64, rtt sim.Time, pkt int, ce bool) {
	x := &a.senders[s]
	// interval: between this sender's packets at its share.
	var interval sim.Time
	if x.share > 0 {
		interval = sim.Time(float64(pkt) / x.share * float64(sim.Second))
	}
	if demand == 0 {
		a.linkControl(now, rtt+interval, pkt, ce)
		if x.active {
			x.active = false
			a.dirty = true
		}
		x.last, x.demand, x.grant = now, 0, 0
		return
	}
	if !x.active || demandBucket(demand) != demandBucket(x.demand) {
		a.dirty = true
	}
	if x.active {
		x.gap = (7*x.gap + (now - x.last)) / 8
	}
	a.linkControl(now, rtt+interval, pkt, ce)
	x.last, x.demand, x.grant = now, demand, 0
	x.window = max(4*rtt, 4*interval, 8*x.gap)
	a.expiry = min(a.expiry, now+x.window)
	if !x.active {
		x.active = true
	}
}

// linkControl counts one arrival toward the link control's period and
// closes the period when it is over; span is how long the arriving
// packet's sender takes to show a change of its share (its RTT plus its
// packet interval).
func (a *allocator) linkControl(now, span sim.Time, pkt int, ce bool) {
	if a.fPkts == 0 {
		a.fStart = now
	} else {
		a.fBytes += float64(pkt)
	}
	if ce {
		a.fMarked++
	}
	if a.fPkts++; a.fPkts == fillBlock {
		in := a.fBytes / (now - a.fStart).Seconds() // the block's arrival rate
		a.filled = in >= busyFraction*a.frac*a.capacity
		a.busy = a.asked && a.filled
		if a.ports == 1 && a.frac < a.target && a.fMarked == 0 && in < (1+a.frac)/2*a.capacity {
			a.drained(now)
		}
		a.fPkts, a.fBytes, a.fMarked = 0, 0, 0
	}
	a.pPkts++
	if ce {
		a.pMarked++
	}
	a.pRTT = max(a.pRTT, span, sim.Time(8*float64(pkt)/a.capacity*float64(sim.Second)))
	d := now - a.pStart
	if d < a.pRTT {
		return
	}
	old := a.frac
	f := float64(a.pMarked) / float64(a.pPkts)
	if a.alpha < 0 {
		a.alpha = f
	} else {
		a.alpha = (1-a.gain)*a.alpha + a.gain*f
	}
	switch {
	case a.busy && a.pMarked > 0:
		switch {
		case a.hold > 0:
			a.hold--
		case f >= a.lastF: // marks not thinning: no queue is draining
			a.target = a.frac
			a.frac = max(a.frac*(1-a.alpha/2), 1.0/1024)
			a.hold = 2 // the queue that drew the marks drains for two periods before the next cut
		}
	case !a.busy:
		a.hold = 0
		a.target = 1
		a.frac += (1 - a.frac) / 2
		if a.frac > 1-1.0/64 {
			a.frac = 1
		}
	default:
		a.hold = 0
		if a.target-a.frac < 1.0/256 {
			a.target = min(1, a.target+aiPerRound)
		}
		a.frac += (a.target - a.frac) / 2
	}
	if a.frac != old {
		a.dirty = true
	}
	a.pStart, a.pRTT, a.pPkts, a.pMarked, a.lastF = now, 0, 0, 0, f
}

// drained ends a cut whose queue has drained: while the receiver's queue
// holds packets its line delivers them back to back, at the capacity, so
// arrivals slower than halfway from the fraction handed out to the whole
// capacity mean the senders' packets no longer wait, and the cuts (which
// were for that queue) have done their work. Only on a NIC of one port:
// with several, a queue at one port moves the aggregate arrival rate by
// a fraction of that port's line only, and the rule, tried there, cost an
// 8-plane all-to-all 2.7% on one seed of three (455 -> 443 Gb/s). The whole capacity comes
// back at once, not the fraction before the last cut: the receiver knows
// its capacity, and handing all of it out cannot build a queue by itself;
// a cut held after the drain only idles the line, for as long as recovery
// takes (four periods: 13 RTTs of a 63-to-1 incast at 100 Gb/s), and a
// second cut on the same queue (one that drains slowly at 25 Gb/s) would
// otherwise be restored only to the first cut's fraction (0.66). The
// period restarts, so marks from before the drain do not count against
// the restored fraction.
func (a *allocator) drained(now sim.Time) {
	a.frac, a.target, a.hold, a.dirty = 1, 1, 0, true
	a.pStart, a.pRTT, a.pPkts, a.pMarked, a.lastF = now, 0, 0, 0, 0
}

// share returns slot s's fair share in bytes per second. A sender not (or
// no longer) active gets what it would get as one more active sender
// asking for everything (all of it if nobody else is active): its first
// data packets make it active, and a sender that paused (a message
// boundary, a lost tail) does not come back at a share that others are
// using too.
func (a *allocator) share(s int32, now sim.Time) float64 {
	if a.dirty || now > a.expiry {
		a.recompute(now)
	}
	if x := &a.senders[s]; x.active {
		return x.share
	}
	return a.capacity * a.frac / float64(a.active+1)
}

// recompute runs max-min water-filling: in order of increasing demand,
// each sender gets min(its demand, what is left / senders left). Capacity
// no sender asked for is added to every share, so a sender whose demand
// grows can use it at once instead of waiting a round trip for the
// receiver to see the new demand.
func (a *allocator) recompute(now sim.Time) {
	a.recomputes++
	a.dirty = false
	a.expiry = sim.Never
	a.order = a.order[:0]
	for i := range a.senders {
		x := &a.senders[i]
		if x.used && x.active && now-x.last > x.window {
			x.active = false
			if !a.holdGrants {
				x.grant = 0
			}
		}
		if x.active {
			a.order = append(a.order, int32(i))
			a.expiry = min(a.expiry, x.last+x.window)
		}
	}
	a.active = len(a.order)
	slices.SortFunc(a.order, a.byDemand)
	asked := 0.0
	for _, s := range a.order {
		asked += a.senders[s].demand
	}
	a.asked = asked >= a.capacity
	a.busy = a.asked && a.filled
	left := a.capacity * a.frac
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
