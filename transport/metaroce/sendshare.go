package metaroce

import (
	"math"
	"math/bits"
)

// The sender's side of the rate hints: a NIC's connections together pace
// at most at its capacity (docs/metaroce-wire.md §9, "The sender's
// budget").
//
// Each receiver's hint is a share of the receiver's capacity; nothing in
// it knows what else the sender is sending. A sender with data for many
// receivers can so hold hints that add up to many times its own line: the
// hint of a connection's last packet ("what one more sender would get")
// is most of an idle receiver's capacity, and a many-peer all-to-all
// restarts every connection on one. Paced at those rates they queue in
// the sender's own NIC, and the receivers' first shares go to the few
// senders whose packets they see first.
//
// The rule: a connection with a hint and new data to send holds a part,
// min(line rate, hint), of the NIC's sending budget. While the parts add
// up to more than the capacity (the NIC's ports x line rate x
// HintUtilization, as its receiver side counts it), they are shared by
// max-min water-filling: a part below the level is met whole, every
// larger one paces at the level, and together they add up to the
// capacity. A connection holds no part while it has no new data (its
// last packet went) or no hint (before its first ACK or SYN_ACK share:
// one packet; with rate hints off: DCTCP alone).

// sendBudget is a NIC's sending budget: the capacity and its
// connections' parts (kB/s), counted by value. A part is rounded up to a
// grid of 8 steps per octave (sendGrid: at most 12.5% up), so the parts
// fall in sendBuckets buckets of one value each, and the water level is
// exact over the rounded parts: a change of hint within its step changes
// nothing, and the level is recomputed (a scan of the buckets) only when
// a part moves to another step.
type sendBudget struct {
	capacity int64
	sum      int64 // of the rounded parts
	count    [sendBuckets]int32
	level    float64 // the water level (kB/s) when the parts do not fit
	dirty    bool    // level is to be recomputed
}

// sendBuckets is the number of grid values a part (1 to 2^32-1 kB/s,
// rounded up: below 2^33) can take.
const sendBuckets = 8 + 30*8

// sendGrid rounds a part (kB/s, > 0) up to the grid and returns its
// bucket: below 8 the value itself, above it 8 steps per octave.
func sendGrid(q int64) int {
	if q < 8 {
		return int(q)
	}
	e := bits.Len64(uint64(q)) - 4
	m := (q + 1<<e - 1) >> e // 8..16
	if m == 16 {
		e, m = e+1, 8
	}
	return 8 + 8*e + int(m-8)
}

// sendGridValue is the part (kB/s) of bucket i.
func sendGridValue(i int) int64 {
	if i < 8 {
		return int64(i)
	}
	e, m := (i-8)/8, int64(8+(i-8)%8)
	return m << e
}

// move replaces a connection's part in bucket old by one in bucket new
// (0: no part).
func (b *sendBudget) move(old, new int) {
	if old == new {
		return
	}
	if old > 0 {
		b.count[old]--
		b.sum -= sendGridValue(old)
	}
	if new > 0 {
		b.count[new]++
		b.sum += sendGridValue(new)
	}
	b.dirty = true
}

// waterLevel is the max-min level of the parts over the capacity: the
// parts below it are met whole, every larger one gets the level, and
// together they add up to the capacity. +Inf when the parts fit.
func (b *sendBudget) waterLevel() float64 {
	if b.sum <= b.capacity {
		return math.Inf(1)
	}
	if !b.dirty {
		return b.level
	}
	b.dirty = false
	b.level = math.Inf(1)
	var n int64
	for _, k := range b.count {
		n += int64(k)
	}
	left := float64(b.capacity)
	for i, k := range b.count {
		if k == 0 {
			continue
		}
		v := float64(sendGridValue(i))
		if v*float64(n) > left {
			b.level = left / float64(n)
			return b.level
		}
		left -= v * float64(k)
		n -= int64(k)
	}
	return b.level
}

// sendPartKBs is the part (kB/s) of a connection whose hint is hint and
// line rate line (bytes/s), with or without new data to send.
func sendPartKBs(hint, line float64, backlog bool) int64 {
	if !backlog || hint <= 0 {
		return 0
	}
	return min(int64(math.Ceil(min(hint, line)/1000)), math.MaxUint32)
}

// noteBacklog brings the connection's part of the NIC's sending budget up
// to date: after its hint or its new data changed, and with closing
// (part 0).
func (c *Conn) noteBacklog(closing bool) {
	var part int64
	if !closing && !c.opts.DisableRateHint {
		part = sendPartKBs(c.s.hint, c.lineBytes, c.s.unsent > 0)
	}
	var bucket int
	if part > 0 {
		bucket = sendGrid(part)
	}
	if bucket != int(c.ctl.sendBucket) {
		c.proto.send.move(int(c.ctl.sendBucket), bucket)
		c.ctl.sendBucket = uint8(bucket)
	}
}

// sendScale is the factor this connection's reference rate (its hint, at
// most its line rate) is scaled by: 1 if it holds no part or its part is
// below the water level, level / rate otherwise.
func (c *Conn) sendScale() float64 {
	if c.ctl.sendBucket == 0 {
		return 1
	}
	lvl := c.proto.send.waterLevel() * 1000
	return min(1, lvl/min(c.s.hint, c.lineBytes))
}
