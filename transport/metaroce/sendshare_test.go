package metaroce

import (
	"math"
	"testing"
)

// TestSendGrid: a part is rounded up to the grid by at most an eighth (of
// its octave's base), the grid is monotone, and a bucket's value rounds
// to itself.
func TestSendGrid(t *testing.T) {
	for _, c := range []struct {
		q      int64
		bucket int
		value  int64
	}{
		{1, 1, 1},
		{7, 7, 7},
		{8, 8, 8},
		{9, 9, 9},
		{15, 15, 15},
		{16, 16, 16},
		{17, 17, 18},   // 2 per step from 16
		{31, 24, 32},   // rounds up into the next octave
		{100, 37, 104}, // 100 Gb/s-ish in units: 8 per octave
		{1562500, 8 + 8*17 + 4, 1572864},
		{math.MaxUint32, 8 + 8*29, 1 << 32},
	} {
		b := sendGrid(c.q)
		if b != c.bucket || sendGridValue(b) != c.value {
			t.Errorf("sendGrid(%d) = bucket %d value %d, want bucket %d value %d", c.q, b, sendGridValue(b), c.bucket, c.value)
		}
		if b >= sendBuckets {
			t.Errorf("sendGrid(%d) = %d, beyond %d buckets", c.q, b, sendBuckets)
		}
	}
	prev := 0
	for q := int64(1); q < 1<<33; q = q*9/8 + 1 {
		b := sendGrid(q)
		v := sendGridValue(b)
		if b < prev || v < q || float64(v) > float64(q)*1.125+1 || sendGrid(v) != b {
			t.Fatalf("sendGrid(%d) = bucket %d value %d (previous bucket %d)", q, b, v, prev)
		}
		prev = b
	}
}

// TestSendBudgetLevel: the water level over the NIC's parts: none while
// they fit the capacity; otherwise the parts below it are met whole, the
// rest get the level, and the rates add up to the capacity at most.
func TestSendBudgetLevel(t *testing.T) {
	for _, c := range []struct {
		name     string
		capacity int64
		parts    []int64 // kB/s, before rounding
		level    float64 // +Inf: no cap
	}{
		{"nothing", 100, nil, math.Inf(1)},
		{"one below", 100, []int64{50}, math.Inf(1)},
		{"fit exactly", 100, []int64{40, 40, 16}, math.Inf(1)},
		{"one at the whole line", 104, []int64{104}, math.Inf(1)},
		{"restart: every hint most of a receiver", 1000, []int64{800, 800, 800, 800}, 250},
		{"one congested receiver, one free", 100, []int64{10, 100}, 90},
		{"two small, three large", 100, []int64{10, 10, 104, 104, 104}, 80.0 / 3},
		{"63 peers at a share each", 100 * 63, repeat(104, 63), 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b sendBudget
			b.capacity = c.capacity
			for _, q := range c.parts {
				b.move(0, sendGrid(q))
			}
			lvl := b.waterLevel()
			if math.Abs(lvl-c.level) > 1e-9 && !(math.IsInf(lvl, 1) && math.IsInf(c.level, 1)) {
				t.Fatalf("level %v, want %v", lvl, c.level)
			}
			sum := 0.0
			for _, q := range c.parts {
				sum += min(float64(q), lvl)
			}
			if !math.IsInf(lvl, 1) && sum > float64(c.capacity)+1e-9 {
				t.Errorf("rates add up to %v, above the capacity %d", sum, c.capacity)
			}
			// Taking the parts away leaves an empty budget.
			for _, q := range c.parts {
				b.move(sendGrid(q), 0)
			}
			if b.sum != 0 || !math.IsInf(b.waterLevel(), 1) {
				t.Errorf("emptied: sum %d level %v", b.sum, b.waterLevel())
			}
		})
	}
}

func repeat(q int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = q
	}
	return out
}

// TestSendBudgetConns: connections of one NIC. A connection holds a part
// only with a hint and new data; restarting on hints that add up to many
// times the line, they pace at the capacity together, each the level or
// its hint if lower; one whose last data went gives its part back; with
// rate hints off nothing is scaled.
func TestSendBudgetConns(t *testing.T) {
	const line = 100e9 / 8 // bytes/s
	p := &Protocol{}
	p.send.capacity = line / 1000
	conns := make([]*Conn, 4)
	for i := range conns {
		conns[i] = &Conn{proto: p, opts: &p.opts, lineBytes: line}
	}
	set := func(c *Conn, hint float64, unsent int64) {
		c.s.hint, c.s.unsent = hint, unsent
		c.noteBacklog(false)
	}
	total := func() float64 {
		s := 0.0
		for _, c := range conns {
			if c.s.unsent > 0 {
				s += c.refRate()
			}
		}
		return s
	}
	// No hint yet: one packet before the first ACK, no part.
	set(conns[0], 0, 1<<20)
	if conns[0].ctl.sendBucket != 0 || conns[0].refRate() != line {
		t.Fatalf("no hint: bucket %d, rate %v", conns[0].ctl.sendBucket, conns[0].refRate())
	}
	// Restart: four hints of 0.8 of the line each.
	for _, c := range conns {
		set(c, 0.8*line, 1<<20)
	}
	for i, c := range conns {
		if r := c.refRate(); math.Abs(r-line/4) > 1 {
			t.Errorf("restart: conn %d at %.4g B/s, want %.4g", i, r, line/4)
		}
	}
	// One receiver's share is small: that connection keeps it, the others
	// split the rest.
	set(conns[0], 0.1*line, 1<<20)
	if r := conns[0].refRate(); r != 0.1*line {
		t.Errorf("small hint: %.4g B/s, want %.4g", r, 0.1*line)
	}
	if s := total(); s > line*(1+1e-9) || s < 0.99*line {
		t.Errorf("rates add up to %.4g B/s, want the line %.4g", s, line)
	}
	// Two finish: the other two are no longer scaled (0.1 + 0.8 fit).
	set(conns[2], 0.8*line, 0)
	set(conns[3], 0.8*line, 0)
	if r := conns[1].refRate(); r != 0.8*line {
		t.Errorf("after two finish: %.4g B/s, want its hint %.4g", r, 0.8*line)
	}
	// Closing gives the part back.
	conns[0].noteBacklog(true)
	conns[1].noteBacklog(true)
	if p.send.sum != 0 {
		t.Errorf("all closed or done: budget sum %d", p.send.sum)
	}
	// Rate hints off: DCTCP alone, no part.
	p.opts.DisableRateHint = true
	set(conns[0], 0.8*line, 1<<20)
	if conns[0].ctl.sendBucket != 0 {
		t.Errorf("rate hints off: bucket %d", conns[0].ctl.sendBucket)
	}
}
