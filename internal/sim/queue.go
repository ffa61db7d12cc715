package sim

import "math/bits"

// queue is a Loop's armed timers: a 4-ary min-heap of (time, key) in a
// compact array of its own, ordered as before says.
//
// Layout, and why:
//
//   - keys holds only the 16-byte (time, key) of each entry, so the four
//     children a sift compares are 64 contiguous bytes; the root sits at
//     index qRoot (3), which puts every node's four children at 4a-8 ..
//     4a-5, a multiple of four: one cache line each when the array is
//     64-byte aligned (Go places arrays of 16 KiB and more, this one's
//     smallest size, on such boundaries).
//   - A timer is not in the heap itself: it holds a slot (Timer.idx, plus
//     one), the heap's entry holds the slot number, and pos maps a slot
//     to its heap position. A sift that moves an entry writes its new
//     position into pos, a small dense array, instead of into the timer
//     (timers live scattered in packet buffers and connections, where the
//     write was a cache miss), and moves no pointer (no GC write barrier).
//   - tm maps a slot to its timer; it is written when a timer is armed
//     and read when it fires, never while sifting.
//
// Slots are recycled last-in first-out, so the few in use stay in cache.
type queue struct {
	keys []qkey   // by heap position from qRoot; keys[:qRoot] unused
	pos  []int32  // by slot: its heap position (while armed)
	tm   []*Timer // by slot: its timer (while armed)
	free []int32  // slots not in use
}

// qkey is a heap entry: its order (time, then (origin, seq) key) and
// its timer's slot.
type qkey struct {
	at   Time
	key  uint64
	slot int32
}

// qRoot is the root's index in queue.keys and queue.slot. With it the
// parent of index a is a/4+2 and its first child 4a-8.
const qRoot = 3

// newQueue returns an empty queue with room for n entries before it
// grows (NewLoop's 1,024: 16 KiB of keys, page-aligned by the allocator).
func newQueue(initial int) *queue {
	q := &queue{
		keys: make([]qkey, qRoot, qRoot+initial),
		pos:  make([]int32, 0, initial),
		tm:   make([]*Timer, 0, initial),
		free: make([]int32, 0, initial),
	}
	return q
}

// before orders entries by time, then by (origin, seq): (at, key) read
// as one 128-bit number, compared by the borrow of a subtraction, without
// a branch the processor would mispredict about half the time in the
// heap's sifts. Times in the heap are never negative (arm clamps them
// to now).
func (e *qkey) before(o *qkey) bool {
	return e.beforeBit(o) != 0
}

// beforeBit is before as 1 or 0.
func (e *qkey) beforeBit(o *qkey) uint64 {
	_, borrow := bits.Sub64(e.key, o.key, 0)
	_, borrow = bits.Sub64(uint64(e.at), uint64(o.at), borrow)
	return borrow
}

// len returns the number of entries.
func (q *queue) len() int { return len(q.keys) - qRoot }

// root returns the earliest entry (the queue must not be empty).
func (q *queue) root() *qkey { return &q.keys[qRoot] }

// rootTimer returns the earliest entry's timer.
func (q *queue) rootTimer() *Timer { return q.tm[q.keys[qRoot].slot] }

// newSlot gives t a slot.
func (q *queue) newSlot(t *Timer) int32 {
	var s int32
	if n := len(q.free); n > 0 {
		s = q.free[n-1]
		q.free = q.free[:n-1]
		q.tm[s] = t
	} else {
		s = int32(len(q.tm))
		q.tm = append(q.tm, t)
		q.pos = append(q.pos, 0)
	}
	t.idx = int(s) + 1
	return s
}

// push adds t, which is not armed, at (at, key).
func (q *queue) push(t *Timer, at Time, key uint64) {
	s := q.newSlot(t)
	q.keys = append(q.keys, qkey{at, key, s})
	q.up(len(q.keys) - 1)
}

// replaceRoot puts t, which is not armed, at the root in place of the
// entry there, whose timer fired (it gives t its slot), and sifts it down.
func (q *queue) replaceRoot(t *Timer, at Time, key uint64) {
	r := &q.keys[qRoot]
	q.tm[r.slot] = t
	t.idx = int(r.slot) + 1
	r.at, r.key = at, key
	q.downStd(qRoot)
}

// rekey moves armed t to (at, key).
func (q *queue) rekey(t *Timer, at Time, key uint64) {
	a := int(q.pos[t.idx-1])
	e := &q.keys[a]
	later := at > e.at || (at == e.at && key > e.key)
	e.at, e.key = at, key
	if later {
		q.down(a)
	} else {
		q.up(a)
	}
}

// remove takes the entry at index a out and unarms its timer.
func (q *queue) remove(a int) {
	s := q.keys[a].slot
	q.tm[s].idx = 0
	q.tm[s] = nil
	q.free = append(q.free, s)
	last := len(q.keys) - 1
	if a != last {
		q.keys[a] = q.keys[last]
		q.pos[q.keys[a].slot] = int32(a)
	}
	q.keys = q.keys[:last]
	if a != last {
		// The moved entry came from a leaf: it can only need to go down,
		// unless it came from another subtree with an earlier key.
		if a > qRoot && q.keys[a].before(&q.keys[a/4+2]) {
			q.up(a)
		} else {
			q.down(a)
		}
	}
}

// up moves the entry at a towards the root until its parent is earlier,
// shifting parents down into the hole instead of swapping.
func (q *queue) up(a int) {
	keys, pos := q.keys, q.pos
	e := keys[a]
	for a > qRoot {
		p := a/4 + 2
		if !e.before(&keys[p]) {
			break
		}
		keys[a] = keys[p]
		pos[keys[a].slot] = int32(a)
		a = p
	}
	keys[a] = e
	pos[e.slot] = int32(a)
}

// down moves the entry at a towards the leaves until no child is earlier.
//
// It sifts bottom-up (Floyd): the hole at a follows the earliest child of
// each node down to a leaf, then the entry climbs back from there to the
// first position whose parent is earlier. The earliest children along
// that path increase, so the entry ends where the usual sift (stop at the
// first node whose earliest child is not earlier) leaves it, for entries
// with distinct keys; the descent needs no comparison with the entry,
// one in four of the usual sift's, and the climb is short because an
// event armed by the one running is usually later than most of those
// pending. A node with four children reads them, and their slots, as one
// array each (one bounds check, not one per child).
func (q *queue) down(a int) {
	keys, pos := q.keys, q.pos
	n := len(keys)
	e := keys[a]
	hole := &keys[a]
	for {
		c := 4*a - 8
		if c+3 >= n {
			if c >= n {
				break
			}
			m := c
			for k := c + 1; k < n; k++ {
				if keys[k].before(&keys[m]) {
					m = k
				}
			}
			*hole = keys[m]
			pos[hole.slot] = int32(a)
			a = m
			break
		}
		// Four children: the earliest by a tournament without
		// branches (which child wins is a coin toss the processor
		// would mispredict about half the time). On equal entries
		// the lower index wins, as in the scan above.
		ch := (*[4]qkey)(keys[c : c+4])
		m01 := ch[1].beforeBit(&ch[0])
		m23 := 2 + ch[3].beforeBit(&ch[2])
		k := (m01 + (m23-m01)&-ch[m23&3].beforeBit(&ch[m01&3])) & 3
		*hole = ch[k]
		pos[hole.slot] = int32(a)
		hole = &ch[k]
		a = c + int(k)
	}
	// Climb: a is the hole, at a leaf.
	for a > qRoot {
		p := a/4 + 2
		if !e.before(&keys[p]) {
			break
		}
		keys[a] = keys[p]
		pos[keys[a].slot] = int32(a)
		a = p
	}
	keys[a] = e
	pos[e.slot] = int32(a)
}

// downStd is the usual sift-down (stop at the first node whose earliest
// child is not earlier than the entry).
func (q *queue) downStd(a int) {
	keys, pos := q.keys, q.pos
	n := len(keys)
	e := keys[a]
	hole := &keys[a]
	for {
		c := 4*a - 8
		var next *qkey
		var m int
		if c+3 < n {
			ch := (*[4]qkey)(keys[c : c+4])
			m01 := ch[1].beforeBit(&ch[0])
			m23 := 2 + ch[3].beforeBit(&ch[2])
			k := (m01 + (m23-m01)&-ch[m23&3].beforeBit(&ch[m01&3])) & 3
			next = &ch[k]
			m = c + int(k)
		} else {
			if c >= n {
				break
			}
			m = c
			for k := c + 1; k < n; k++ {
				if keys[k].before(&keys[m]) {
					m = k
				}
			}
			next = &keys[m]
		}
		if !next.before(&e) {
			break
		}
		*hole = *next
		pos[hole.slot] = int32(a)
		hole = next
		a = m
	}
	*hole = e
	pos[e.slot] = int32(a)
}
