package sim

import (
	"math/bits"
	"math/rand/v2"
	"strconv"
	"testing"
)

// refHeap is the timer heap sim used before the bottom-up sift-down
// (8bc9314), kept as the reference order: a 4-ary heap of (at, key, id)
// with each entry's position written back per id, the same tournament
// and tie rule, sifting down the usual way. It pops the fired entry at
// once (the loop's reuse of the root slot only saves work).
type refHeap struct {
	h   []refEntry
	idx map[int]int // id -> position+1
}

type refEntry struct {
	at  Time
	key uint64
	id  int
}

func (e *refEntry) beforeBit(o *refEntry) uint64 {
	_, borrow := bits.Sub64(e.key, o.key, 0)
	_, borrow = bits.Sub64(uint64(e.at), uint64(o.at), borrow)
	return borrow
}

func (e *refEntry) before(o *refEntry) bool { return e.beforeBit(o) != 0 }

func (r *refHeap) arm(id int, at Time, key uint64) {
	if i, ok := r.idx[id]; ok {
		e := &r.h[i-1]
		later := at > e.at || (at == e.at && key > e.key)
		e.at, e.key = at, key
		if later {
			r.down(i - 1)
		} else {
			r.up(i - 1)
		}
		return
	}
	r.h = append(r.h, refEntry{at, key, id})
	r.up(len(r.h) - 1)
}

func (r *refHeap) disarm(id int) {
	if i, ok := r.idx[id]; ok {
		r.remove(i - 1)
	}
}

func (r *refHeap) pop() (refEntry, bool) {
	if len(r.h) == 0 {
		return refEntry{}, false
	}
	e := r.h[0]
	r.remove(0)
	return e, true
}

func (r *refHeap) remove(i int) {
	delete(r.idx, r.h[i].id)
	last := len(r.h) - 1
	if i != last {
		r.h[i] = r.h[last]
	}
	r.h = r.h[:last]
	if i != last {
		if i > 0 && r.h[i].before(&r.h[(i-1)/4]) {
			r.up(i)
		} else {
			r.down(i)
		}
	}
}

func (r *refHeap) up(i int) {
	e := r.h[i]
	for i > 0 {
		p := (i - 1) / 4
		if !e.before(&r.h[p]) {
			break
		}
		r.h[i] = r.h[p]
		r.idx[r.h[i].id] = i + 1
		i = p
	}
	r.h[i] = e
	r.idx[e.id] = i + 1
}

func (r *refHeap) down(i int) {
	h := r.h
	n := len(h)
	e := h[i]
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		if c+3 < n {
			ch := h[c : c+4]
			m01 := ch[1].beforeBit(&ch[0])
			m23 := 2 + ch[3].beforeBit(&ch[2])
			k := m01 + (m23-m01)&-ch[m23&3].beforeBit(&ch[m01&3])
			m = c + int(k&3)
		} else {
			for k := c + 1; k < n; k++ {
				if h[k].before(&h[m]) {
					m = k
				}
			}
		}
		if !h[m].before(&e) {
			break
		}
		h[i] = h[m]
		r.idx[h[i].id] = i + 1
		i = m
	}
	h[i] = e
	r.idx[e.id] = i + 1
}

// TestHeapOrderMatchesReference drives a Loop and the old heap with the
// same random schedules: many timers at few distinct times (so most
// events tie on time and fire by key), timers of several origins and of
// none, keys reserved early and armed late (ArmKey, as a packet crossing
// partitions), re-arms earlier and later, cancellations, and events that
// arm, re-arm and cancel from inside their callback (the root-reuse
// path). Every event must fire in the reference's order, with its time
// and key, and Pending and Next must agree throughout. Keys are distinct
// within a loop, as in every lab: each arming takes a fresh (origin,
// seq), and a reserved key is armed once.
func TestHeapOrderMatchesReference(t *testing.T) {
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 29))
		n := 8 + r.IntN(600)
		spread := Time(1 + r.IntN(40)) // few distinct times: many ties
		var alloc Origins
		l := NewLoopShared(&alloc)
		if seed%4 == 3 {
			l = &Loop{origins: &alloc} // a zero loop, as a connection's
		}
		origins := []*Origin{nil, l.NewOrigin(), l.NewOrigin(), l.NewOrigin()}
		ref := &refHeap{idx: map[int]int{}}
		timers := make([]Timer, n)
		var reserved []uint64 // keys taken by NextKey, not yet armed
		fired := 0

		arm := func(i int) {
			tm := &timers[i]
			at := l.Now() + Time(r.IntN(int(spread)))
			if r.IntN(8) == 0 {
				at = l.Now() - 1 // clamped to now
			}
			if len(reserved) > 0 && r.IntN(4) == 0 {
				k := r.IntN(len(reserved))
				key := reserved[k]
				reserved = append(reserved[:k], reserved[k+1:]...)
				l.ArmKey(tm, at, key)
				ref.arm(i, max(at, l.Now()), key)
				return
			}
			if !tm.Armed() {
				tm.Own(origins[r.IntN(len(origins))])
			}
			l.Arm(tm, at)
			var key uint64
			if o := tm.org; o != nil {
				key = o.id | o.seq&seqMask
			} else {
				key = l.seq & seqMask
			}
			ref.arm(i, max(at, l.Now()), key)
		}
		act := func() {
			i := r.IntN(n)
			switch r.IntN(10) {
			case 0, 1, 2, 3, 4:
				arm(i)
			case 5, 6:
				l.Disarm(&timers[i])
				ref.disarm(i)
			case 7:
				reserved = append(reserved, origins[1+r.IntN(3)].NextKey())
			case 8:
				if p := l.Pending(); p != len(ref.h) {
					t.Fatalf("seed %d: %d pending, reference %d", seed, p, len(ref.h))
				}
			case 9:
				want := Never
				if len(ref.h) > 0 {
					want = ref.h[0].at
				}
				if got := l.Next(); got != want {
					t.Fatalf("seed %d: next %v, reference %v", seed, got, want)
				}
			}
		}
		var want refEntry
		for i := range timers {
			timers[i].Init(func(now Time, arg any) {
				id := arg.(int)
				if id != want.id || now != want.at || l.EventKey() != want.key {
					t.Fatalf("seed %d, event %d: timer %d at %v key %#x, reference timer %d at %v key %#x",
						seed, fired, id, now, l.EventKey(), want.id, want.at, want.key)
				}
				fired++
				for range r.IntN(5) {
					act()
				}
				if r.IntN(3) != 0 {
					arm(id) // most events arm their own timer again
				}
			}, i)
		}
		for range 2 * n {
			act()
		}
		for fired < 20000 {
			var ok bool
			want, ok = ref.pop()
			if !ok {
				if l.Step() {
					t.Fatalf("seed %d: loop fired an event the reference does not have", seed)
				}
				for range 1 + r.IntN(n) {
					act()
				}
				if len(ref.h) == 0 {
					break
				}
				continue
			}
			if !l.Step() {
				t.Fatalf("seed %d: nothing to step, reference has timer %d at %v", seed, want.id, want.at)
			}
		}
		if fired < 1000 {
			t.Fatalf("seed %d: only %d events fired", seed, fired)
		}
		if p := l.Pending(); p != len(ref.h) {
			t.Fatalf("seed %d: %d pending at the end, reference %d", seed, p, len(ref.h))
		}
	}
}

// TestHeapNoAllocPerEvent: once the heap has grown, firing, re-arming
// and cancelling allocate nothing.
func TestHeapNoAllocPerEvent(t *testing.T) {
	l := NewLoop()
	r := rand.New(rand.NewPCG(1, 1))
	timers := selfArming(l, 4096, r)
	allocs := testing.AllocsPerRun(10000, func() {
		l.Step()
		j := r.IntN(len(timers))
		l.Disarm(&timers[j])
		l.Arm(&timers[j], l.Now()+Time(r.IntN(1000)))
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per event, want 0", allocs)
	}
}

// BenchmarkHeap: the loop's timer heap alone, at the sizes of the 128-host
// and 1,024-host benches' pending timers and beyond: every event re-arms
// its timer a little later (as a link its next arrival) and one in eight
// also cancels and re-arms another timer (as a transport its
// retransmission timeout). The timers sit in their own 1 KiB owners, so
// anything that touches a timer while sifting meets cold memory as in a
// run.
func BenchmarkHeap(b *testing.B) {
	type owner struct {
		t Timer
		_ [1024]byte
	}
	for _, size := range []int{256, 4096, 65536} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			l := NewLoop()
			var alloc Origins
			l.origins = &alloc
			o := l.NewOrigin()
			owners := make([]*owner, size)
			r := rand.New(rand.NewPCG(1, 1))
			span := 4 * size
			for i := range owners {
				w := &owner{}
				owners[i] = w
				w.t.Own(o)
				w.t.Init(func(now Time, arg any) {
					l.Arm(arg.(*Timer), now+Time(1+r.IntN(span)))
					if r.IntN(8) == 0 {
						v := &owners[r.IntN(size)].t
						l.Disarm(v)
						l.Arm(v, now+Time(r.IntN(2*span)))
					}
				}, &w.t)
				l.Arm(&w.t, Time(r.IntN(span)))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				l.Step()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
