package live

import (
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// A crossing is one cut link direction of a partitioned live lab
// (partition.go): the only way a packet leaves one partition's loop for
// another's. It is a bounded single-producer single-consumer ring: the
// sending partition's goroutine pushes a packet when its serialization on
// the cut link ends, stamped with the lab time it arrives at the far end
// (the end of serialization plus the link's delay: at least the lookahead
// after the sender's now); the receiving partition's goroutine drains the
// ring between its events and arms each packet at its stamp.
//
// No barrier holds the partitions together: each is paced to the wall
// clock on its own, and the stamp is what keeps them honest. A packet
// drained at or before its stamp arrives exactly on time; one drained
// after it (its sender ran late, or the receiver did not look in time)
// arrives late, by the difference: the crossing counts it, and the
// receiving pacer counts its arrival as a late event (crosspoll.go), so
// the lab's lag figures include every packet that crossed (live mode
// never lies).
//
// A full ring drops the packet on the sender's side and counts the drop,
// as a link's queue would: a receiver that stalls must not make its
// senders allocate without end. Neither side allocates per packet; the
// slots are allocated once.
type crossing struct {
	name  string
	slots []crossSlot
	mask  uint64

	_    [64]byte // keep the producer's and the consumer's words apart
	tail atomic.Uint64
	// Producer-only: the head last seen, so a push reads the consumer's
	// word only when the ring looks full.
	headSeen uint64
	sent     atomic.Uint64
	drops    atomic.Uint64

	// Waking a receiver that sleeps (SetWake): its sleeping flag and the
	// eventfd its epoll watches. Set before use, read-only after.
	asleep *atomic.Bool
	wakeFD int

	_        [64]byte
	head     atomic.Uint64
	received atomic.Uint64
	late     atomic.Uint64 // packets drained later than the lag threshold after their stamp
	lateAny  atomic.Uint64 // packets drained after their stamp at all
	maxLate  atomic.Int64  // worst lateness, ns of lab time
}

// wakeOne is an eventfd increment of 1.
var wakeOne = [8]byte{1}

// crossSlot is one packet in flight between partitions: its arrival time
// and the key its sender armed it with (sim.Loop.ArmKey), so equal
// arrival times fire in one loop's order.
type crossSlot struct {
	at  sim.Time
	key uint64
	b   *packet.Buffer
}

// newCrossing returns a crossing holding up to capacity packets, rounded up
// to a power of two (at least 2).
func newCrossing(name string, capacity int) (*crossing, error) {
	if capacity < 1 || capacity > 1<<20 {
		return nil, fmt.Errorf("crossing %s: capacity %d: want 1 to %d packets", name, capacity, 1<<20)
	}
	n := 2
	for n < capacity {
		n <<= 1
	}
	return &crossing{name: name, slots: make([]crossSlot, n), mask: uint64(n - 1), wakeFD: -1}, nil
}

// SetWake makes Push wake a receiver that sleeps, as Pacer.kick does: when
// asleep is set after a push is published, Push clears it and writes 1 to
// the eventfd efd. The receiver sets asleep, then looks at Pending once
// more before it sleeps on efd (with sequentially consistent atomics one
// of the two sees the other: no packet waits for the next timer). Call it
// before use.
func (c *crossing) SetWake(asleep *atomic.Bool, efd int) { c.asleep, c.wakeFD = asleep, efd }

// Cap is how many packets the crossing holds.
func (c *crossing) Cap() int { return len(c.slots) }

// Push hands b to the far partition, to arrive at at with key. It reports
// false when the ring is full: b is then freed (into the sender's pool:
// the sender still owns it) and counted as dropped. Sending goroutine only.
func (c *crossing) Push(at sim.Time, key uint64, b *packet.Buffer) bool {
	t := c.tail.Load()
	if t-c.headSeen >= uint64(len(c.slots)) {
		c.headSeen = c.head.Load()
		if t-c.headSeen >= uint64(len(c.slots)) {
			c.drops.Add(1)
			b.Free()
			return false
		}
	}
	c.slots[t&c.mask] = crossSlot{at: at, key: key, b: b}
	c.tail.Store(t + 1) // publishes the slot
	c.sent.Add(1)
	if c.asleep != nil && c.asleep.CompareAndSwap(true, false) {
		unix.Write(c.wakeFD, wakeOne[:]) // EAGAIN: a wake is pending already
	}
	return true
}

// Drain hands fn every packet pushed so far, in push order, and returns
// how many. now is the receiver's lab time: a packet whose stamp is before
// now arrives late by the difference, counted (late past threshold, the
// pacer's LagThreshold) and passed to fn with its stamp unchanged; fn arms
// it at max(at, now). fn owns the buffer (Rehome it into the receiver's
// pool). Receiving goroutine only.
func (c *crossing) Drain(now sim.Time, threshold sim.Time, fn func(at sim.Time, key uint64, b *packet.Buffer)) int {
	h := c.head.Load()
	t := c.tail.Load() // the slots before t are published
	n := 0
	for ; h != t; h++ {
		s := &c.slots[h&c.mask]
		at, key, b := s.at, s.key, s.b
		*s = crossSlot{}
		if now > at {
			lat := int64(now - at)
			c.lateAny.Add(1)
			if sim.Time(lat) > threshold {
				c.late.Add(1)
			}
			if lat > c.maxLate.Load() {
				c.maxLate.Store(lat)
			}
		}
		// Free the slot before fn runs: fn may take long (it runs the
		// receiver's code), and the sender may be waiting for room.
		c.head.Store(h + 1)
		n++
		fn(at, key, b)
	}
	c.received.Add(uint64(n))
	return n
}

// Pending reports how many packets are in the ring now (any goroutine; a
// snapshot).
func (c *crossing) Pending() int { return int(c.tail.Load() - c.head.Load()) }

// CrossingStats is one crossing's counters, as status shows them.
type CrossingStats struct {
	Name     string `json:"name"`
	Sent     uint64 `json:"sent"`
	Dropped  uint64 `json:"dropped"`
	Received uint64 `json:"received"`
	// Late counts packets that reached the far partition more than the
	// lag threshold after their stamp; LateAny those that reached it
	// after their stamp at all; MaxLate is the worst.
	Late    uint64        `json:"late"`
	LateAny uint64        `json:"late_any"`
	MaxLate time.Duration `json:"max_late_ns"`
}

// Stats reads the crossing's counters (any goroutine).
func (c *crossing) Stats() CrossingStats {
	return CrossingStats{Name: c.name, Sent: c.sent.Load(), Dropped: c.drops.Load(), Received: c.received.Load(),
		Late: c.late.Load(), LateAny: c.lateAny.Load(), MaxLate: time.Duration(c.maxLate.Load())}
}
