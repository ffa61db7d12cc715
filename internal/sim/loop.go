package sim

import (
	"math/bits"
	"unsafe"
)

// Func is a timer callback. arg is the value given to Timer.Init; passing a
// pointer there lets one method value serve many timers without allocating.
type Func func(now Time, arg any)

// Timer is an event that a Loop fires once per arming. Its zero value is an
// unarmed timer with no callback; call Init before arming it. Timers are meant
// to be embedded in the structs that own them (a link, a connection, a packet
// buffer) so that arming one never allocates.
type Timer struct {
	at  Time
	idx int // position in the heap plus one; 0 when not armed
	org *Origin
	fn  Func
	arg any
}

// Init sets the callback and its argument.
func (t *Timer) Init(fn Func, arg any) { t.fn, t.arg = fn, arg }

// Own makes o the timer's origin: every arming takes the next number of o's
// own counter, and events at the same time fire in (origin, seq) order. A
// timer with no origin is origin 0: it fires before every owned timer at the
// same time, in the order such timers were armed on its loop. Set it while
// the timer is not armed.
func (t *Timer) Own(o *Origin) { t.org = o }

// Origin is a component that arms timers (a port, a NIC, a connection, a
// workload driver), numbered in the lab's build order, which is
// deterministic. An event's key is (time, origin, seq) where seq counts the
// origin's own armings: two events at the same nanosecond fire in the same
// order whichever loop (partition) they are on and whichever loop ran
// first, because the key depends only on who armed them and how often that
// component armed before. That is what lets a lab run on several loops and
// give the trace of one.
type Origin struct {
	id  uint64 // pre-shifted by seqBits
	seq uint64
}

// ID returns the origin's number (1, 2, ... in allocation order).
func (o *Origin) ID() uint64 { return o.id >> seqBits }

// next returns the key of o's next arming.
func (o *Origin) next() uint64 {
	o.seq++
	return o.id | o.seq&seqMask
}

// Key packing: 24 bits of origin (16.7 million components; more share the
// last number, which stays deterministic on one loop) and 40 bits of
// per-origin sequence (10^12 armings per component before it wraps).
const (
	seqBits   = 40
	seqMask   = 1<<seqBits - 1
	maxOrigin = 1<<(64-seqBits) - 1
)

// Origins numbers origins. Every loop of a lab shares one, so numbers
// follow the build order whatever the partitioning; allocate only while
// building (single-threaded), never from a running partition.
type Origins struct{ n uint64 }

// New returns the next origin.
func (a *Origins) New() *Origin {
	if a.n < maxOrigin {
		a.n++
	}
	return &Origin{id: a.n << seqBits}
}

// Count returns how many origins were allocated.
func (a *Origins) Count() uint64 { return a.n }

// Armed reports whether t is scheduled.
func (t *Timer) Armed() bool { return t.idx != 0 }

// When returns the time t is armed for, or Never.
func (t *Timer) When() Time {
	if t.idx == 0 {
		return Never
	}
	return t.at
}

// Scheduler is what components see of the engine: the current time and
// timers. Both the virtual Loop and the live runtime's paced loop provide it.
type Scheduler interface {
	Now() Time
	Arm(t *Timer, at Time)
	Disarm(t *Timer)
	// ArmKey arms t with a key reserved earlier (Origin.NextKey).
	ArmKey(t *Timer, at Time, key uint64)
	// NewOrigin numbers a component that arms timers (see Origin).
	NewOrigin() *Origin
}

// Loop is a discrete-event scheduler with a virtual clock. It is not safe for
// concurrent use: one goroutine owns it (that is the point).
//
// The timer queue is a 4-ary min-heap of (time, key, timer) entries with
// the keys stored inline: comparisons read only the contiguous heap array,
// never the timers themselves (which live scattered in packet buffers and
// connections), and a 4-ary heap is half as deep as a binary one. A moved
// entry writes its new position into its timer, so Disarm and re-Arm stay
// O(log n) without a search.
type Loop struct {
	now Time
	// seq is origin 0's counter (timers without an origin); its top bit
	// is the Stop flag, which keeps Loop (embedded in every connection)
	// as small as before origins.
	seq     uint64
	origins *Origins
	heap    []heapEntry
	fired   uint64
	// cur is the key of the event running (0 between events): what a
	// partition's observer orders its records by (EventKey).
	cur uint64
}

// stopBit and holeBit are flags in Loop.seq. holeBit: heap[0] is the
// entry of the event running, already fired (its timer unarmed), left in
// place until the event arms a timer that is not armed, which then takes
// the root and sifts down once, instead of the last leaf sifting down
// from the root and the new entry sifting up (most events arm another:
// a link its next arrival, a sender its next packet). settle takes the
// hole out before anything else reads or changes the heap.
const (
	stopBit = 1 << 63
	holeBit = 1 << 62
)

func (l *Loop) stopped() bool { return l.seq&stopBit != 0 }

func (l *Loop) clearStop() { l.seq &^= stopBit }

func (l *Loop) hole() bool { return l.seq&holeBit != 0 }

// heapEntry is one armed timer in the heap, with a copy of its key.
type heapEntry struct {
	at  Time
	key uint64
	t   *Timer
}

// before orders entries by time, then by (origin, seq): (at, key) read
// as one 128-bit number, compared by the borrow of a subtraction, without
// a branch the processor would mispredict about half the time in the
// heap's sifts. Times in the heap are never negative (arm clamps them
// to now).
func (e *heapEntry) before(o *heapEntry) bool {
	return e.beforeBit(o) != 0
}

// beforeBit is before as 1 or 0.
func (e *heapEntry) beforeBit(o *heapEntry) uint64 {
	_, borrow := bits.Sub64(e.key, o.key, 0)
	_, borrow = bits.Sub64(uint64(e.at), uint64(o.at), borrow)
	return borrow
}

var _ Scheduler = (*Loop)(nil)

// NewLoop returns a loop at time 0.
func NewLoop() *Loop { return NewLoopShared(&Origins{}) }

// NewLoopShared returns a loop at time 0 that numbers origins from o: the
// loops of one partitioned lab share one Origins.
func NewLoopShared(o *Origins) *Loop {
	return &Loop{heap: make([]heapEntry, 0, 1024), origins: o}
}

// NewOrigin numbers a new component from the loop's Origins.
func (l *Loop) NewOrigin() *Origin { return l.origins.New() }

// Now returns the current virtual time.
func (l *Loop) Now() Time { return l.now }

// Fired returns the number of events run so far.
func (l *Loop) Fired() uint64 { return l.fired }

// Pending returns the number of armed timers.
func (l *Loop) Pending() int {
	l.settle()
	return len(l.heap)
}

// Arm schedules t at time at (clamped to now), replacing any earlier arming.
// Timers armed for the same time fire in (origin, seq) order: one origin's
// timers in the order they were armed.
func (l *Loop) Arm(t *Timer, at Time) {
	var key uint64
	if t.org != nil {
		key = t.org.next()
	} else {
		l.seq++
		key = l.seq & seqMask
	}
	l.arm(t, at, key)
}

// ArmKey schedules t at time at with a key given by its origin earlier (a
// packet handed from one loop to another keeps the key its sender gave it).
func (l *Loop) ArmKey(t *Timer, at Time, key uint64) { l.arm(t, at, key) }

// NextKey reserves o's next key without arming anything, for an event
// whose timer is armed later or on another loop.
func (o *Origin) NextKey() uint64 { return o.next() }

func (l *Loop) arm(t *Timer, at Time, key uint64) {
	if at < l.now {
		at = l.now
	}
	t.at = at
	if l.hole() {
		if t.idx == 0 {
			l.seq &^= holeBit
			l.sift(0, heapEntry{at: at, key: key, t: t})
			return
		}
		l.settle()
	}
	if t.idx != 0 {
		i := t.idx - 1
		e := &l.heap[i]
		later := at > e.at || (at == e.at && key > e.key)
		e.at, e.key = at, key
		if later {
			l.down(i)
		} else {
			l.up(i)
		}
		return
	}
	l.heap = append(l.heap, heapEntry{at: at, key: key, t: t})
	l.up(len(l.heap) - 1)
}

// ArmAfter schedules t at now+d.
func (l *Loop) ArmAfter(t *Timer, d Time) { l.Arm(t, l.now+d) }

// Disarm cancels t if it is armed.
func (l *Loop) Disarm(t *Timer) {
	if t.idx == 0 {
		return
	}
	l.settle()
	l.remove(t.idx - 1)
}

// settle takes the hole (see holeBit) out of the heap.
func (l *Loop) settle() {
	if l.hole() {
		l.seq &^= holeBit
		l.remove(0)
	}
}

// remove takes the entry at heap index i out of the heap.
func (l *Loop) remove(i int) {
	h := l.heap
	h[i].t.idx = 0
	last := len(h) - 1
	if i != last {
		h[i] = h[last]
	}
	h[last] = heapEntry{}
	l.heap = h[:last]
	if i != last {
		// The moved entry came from a leaf: it can only need to go down,
		// unless it came from another subtree with an earlier key.
		if i > 0 && l.heap[i].before(&l.heap[(i-1)/4]) {
			l.up(i)
		} else {
			l.down(i)
		}
	}
}

// At runs fn at time at. It allocates a Timer, so it is for set-up and
// scripted events (a fault timeline), not for per-packet work.
func (l *Loop) At(at Time, fn func(now Time)) *Timer {
	t := &Timer{}
	t.Init(func(now Time, _ any) { fn(now) }, nil)
	l.Arm(t, at)
	return t
}

// EventKey returns the key of the event the loop is running, 0 between
// events (no event has key 0). Events run in (time, key) order, so
// (Now, EventKey) places whatever an event does in the order one loop
// runs it, on whichever loop (partition) it ran: fabric merges the
// observations of a partitioned run by it.
func (l *Loop) EventKey() uint64 { return l.cur }

// Next returns the time of the earliest armed timer, or Never.
func (l *Loop) Next() Time {
	l.settle()
	if len(l.heap) == 0 {
		return Never
	}
	return l.heap[0].at
}

// Step runs the earliest event, advancing the clock to its time. It returns
// false when nothing is armed.
func (l *Loop) Step() bool {
	if len(l.heap) == 0 {
		return false
	}
	t, key := l.heap[0].t, l.heap[0].key
	t.idx = 0
	l.seq |= holeBit
	l.now = t.at
	l.fired++
	l.cur = key
	t.fn(l.now, t.arg)
	l.cur = 0
	l.settle()
	return true
}

// RunUntil runs every event due at or before end, then leaves the clock at
// end. Stop ends it early.
func (l *Loop) RunUntil(end Time) {
	l.clearStop()
	for !l.stopped() && len(l.heap) > 0 && l.heap[0].at <= end {
		l.Step()
	}
	if !l.stopped() && end > l.now && end != Never {
		l.now = end
	}
}

// Run runs events until none is left or Stop is called.
func (l *Loop) Run() { l.RunUntil(Never) }

// Stop makes the current Run or RunUntil return after the running event.
func (l *Loop) Stop() { l.seq |= stopBit }

// AdvanceTo moves the clock forward to t without running events. The live
// runtime uses it when wall time passes with nothing due. It never moves the
// clock past an armed timer or backwards.
func (l *Loop) AdvanceTo(t Time) {
	if n := l.Next(); t > n {
		t = n
	}
	if t > l.now {
		l.now = t
	}
}

// up moves the entry at i towards the root until its parent is earlier,
// shifting parents down into the hole instead of swapping.
func (l *Loop) up(i int) {
	h := l.heap
	e := h[i]
	for i > 0 {
		p := (i - 1) / 4
		if !e.before(&h[p]) {
			break
		}
		h[i] = h[p]
		h[i].t.idx = i + 1
		i = p
	}
	h[i] = e
	e.t.idx = i + 1
}

// down moves the entry at i towards the leaves until no child is earlier.
//
// It sifts bottom-up (Floyd): the hole at i follows the earliest child of
// each node down to a leaf, then the entry climbs back from there to the
// first position whose parent is earlier. The earliest children along
// that path increase, so the entry ends where the usual sift (stop at the
// first node whose earliest child is not earlier) would leave it, for
// entries with distinct keys (a loop's keys are); the descent makes no
// comparison with the entry, and the climb is short because an event
// armed by the one running is usually later than most of those pending.
// A node with four children reads them as one array (one bounds check,
// not one per child) and keeps a pointer to the hole it fills.
func (l *Loop) down(i int) { l.sift(i, l.heap[i]) }

// sift is down for entry e, which goes at i or below (i's slot is a hole
// whatever it holds): the root's hole takes the entry an event arms
// without a store and a reload of it.
func (l *Loop) sift(i int, e heapEntry) {
	h := l.heap
	n := len(h)
	hole := &h[i]
	// base addresses the children of a node with four: c+3 < n was
	// checked, so the slice's bounds check on h[c:c+4] is redundant.
	base := unsafe.Pointer(unsafe.SliceData(h))
	for {
		c := 4*i + 1
		if c+3 >= n {
			if c >= n {
				break
			}
			m := c
			for k := c + 1; k < n; k++ {
				if h[k].before(&h[m]) {
					m = k
				}
			}
			*hole = h[m]
			hole.t.idx = i + 1
			i = m
			break
		}
		// Four children: the earliest by a tournament without
		// branches (which child wins is a coin toss the processor
		// would mispredict about half the time). On equal entries
		// the lower index wins, as in the scan above.
		ch := (*[4]heapEntry)(unsafe.Add(base, uintptr(c)*unsafe.Sizeof(heapEntry{})))
		m01 := ch[1].beforeBit(&ch[0])
		m23 := 2 + ch[3].beforeBit(&ch[2])
		k := (m01 + (m23-m01)&-ch[m23&3].beforeBit(&ch[m01&3])) & 3
		*hole = ch[k]
		hole.t.idx = i + 1
		i, hole = c+int(k), &ch[k]
	}
	// Climb from the leaf the hole reached.
	for i > 0 {
		p := (i - 1) / 4
		if !e.before(&h[p]) {
			break
		}
		h[i] = h[p]
		h[i].t.idx = i + 1
		i = p
	}
	h[i] = e
	e.t.idx = i + 1
}
