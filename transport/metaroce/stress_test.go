package metaroce

import (
	"math"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// TestPaceSkipsPayloadless: a probe or hole filler sent under a tiny hint
// must not push the next data packet out. In a 64-host all-to-all at 1%
// loss a resent tail-loss probe (20 bytes) paced at a 1 kB/s hint held the
// connection's next operation for 86 ms.
func TestPaceSkipsPayloadless(t *testing.T) {
	l := newLab(t, transporttest.Config{Seed: 1, LinkRate: 100e9}, Options{})
	c := metaConn(l.ca)
	c.s.hint = 1000 // bytes/s: a share given while the sender asked for nothing
	c.s.pacer.next = c.now
	for _, n := range []int{wire.CommonSize + wire.TrailerSize, wire.DataSize + wire.TrailerSize} {
		c.pace(n)
		if c.s.pacer.next != c.now {
			t.Fatalf("a %d-byte packet without payload moved the pacer %v ahead", n, c.s.pacer.next-c.now)
		}
	}
	c.pace(wire.DataSize + wire.TrailerSize + 4096)
	if c.s.pacer.next <= c.now+sim.Second {
		t.Fatalf("a full data packet at 1 kB/s: next send only %v ahead", c.s.pacer.next-c.now)
	}
}

// TestMessageDoesNotWaitForDelayedAck: the chunks of a small WRITE go over
// several planes; the receiver ACKs every path the moment the message is
// placed, so the WRITE completes about one RTT after it is sent instead of
// an RTT plus the delayed-ACK timer.
func TestMessageDoesNotWaitForDelayedAck(t *testing.T) {
	opts := Options{AckDelay: 50 * sim.Microsecond} // large, so waiting for it shows
	l := newLab(t, transporttest.Config{Seed: 3, Ports: 4, LinkRate: 100e9, LinkDelay: sim.Microsecond}, opts)
	const size = 4 * 4096 // one chunk per plane
	for i := range 8 {
		start := l.net.Loop.Now()
		if err := l.ca.PostSend(write(uint64(i+1), 0, addrRW, addrRW+0x80000, size)); err != nil {
			t.Fatal(err)
		}
		if !l.runUntil(sim.Millisecond, func() bool { return len(l.ca.Completions) == i+1 }) {
			t.Fatalf("WRITE %d did not complete", i+1)
		}
		if wc := l.ca.Completions[i]; wc.Status != transport.StatusOK {
			t.Fatalf("WRITE %d: %v", i+1, wc.Status)
		}
		if took := l.net.Loop.Now() - start; took >= opts.AckDelay {
			t.Errorf("WRITE %d of %d bytes took %v: it waited for a delayed ACK (%v)", i+1, size, took, opts.AckDelay)
		}
		l.run(200 * sim.Microsecond) // idle: every path's ACK state settles
	}
}

// TestHeavyLossNoStall: at 25% random loss on every packet (data, ACKs,
// probes) in both directions, a stream of WRITEs keeps completing without
// error, no path is declared failed for what is only random loss, and no
// message waits more than a few milliseconds.
func TestHeavyLossNoStall(t *testing.T) {
	cfg := transporttest.Config{Seed: 7, Ports: 2, LinkRate: 100e9, LinkDelay: sim.Microsecond, Loss: 0.25}
	l := newLab(t, cfg, Options{})
	const size, depth, total = 64 << 10, 8, 96
	posted := 0
	postAt := map[uint64]sim.Time{}
	var worst sim.Time
	l.ca.OnComplete = func(_ *transporttest.Conn, wc transport.Completion) {
		if wc.Status != transport.StatusOK {
			t.Errorf("completion %+v", wc)
		}
		worst = max(worst, l.net.Loop.Now()-postAt[wc.ID])
	}
	for len(l.ca.Completions) < total {
		for posted < total && posted-len(l.ca.Completions) < depth {
			id := uint64(posted + 1)
			postAt[id] = l.net.Loop.Now()
			if err := l.ca.PostSend(write(id, 0, addrRW, addrRW+0x80000, size)); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		before := len(l.ca.Completions)
		if !l.runUntil(20*sim.Millisecond, func() bool { return len(l.ca.Completions) > before }) {
			t.Fatalf("stalled after %d of %d WRITEs", before, total)
		}
	}
	c := metaConn(l.ca)
	for i := range c.s.paths {
		if p := &c.s.paths[i]; p.state == PathFailed {
			t.Errorf("path %d failed under random loss only", i)
		}
	}
	st := c.Stats()
	t.Logf("%d WRITEs of %d KiB at %.0f%% loss: worst %v, %d retransmits, %d timeouts, %d entropy changes",
		total, size>>10, 100*cfg.Loss, worst, st.Retransmits, st.Timeouts, st.EntropyChanges)
	if worst > 5*sim.Millisecond {
		t.Errorf("a WRITE took %v", worst)
	}
}

// TestFirstFlightAndECNRate: before the receiver's first ACK a
// connection has one packet in flight (without hints, the usual window);
// once hinted it paces at hint x m; marks cut m by (1 - alpha/2) at most
// once per round and unmarked ACKs raise it again; a rise of the hint
// shortens the pacing gap in proportion instead of ending it.
func TestFirstFlightAndECNRate(t *testing.T) {
	l := newLab(t, transporttest.Config{Seed: 1, LinkRate: 100e9}, Options{})
	c := metaConn(l.ca)
	c.s.heard, c.s.hint = false, 0
	if got := c.window(); got != c.mss {
		t.Errorf("before the first ACK: window %d, want one packet (%d)", got, c.mss)
	}
	nh := metaConn(newLab(t, transporttest.Config{Seed: 1, LinkRate: 100e9}, Options{DisableRateHint: true}).ca)
	nh.s.heard, nh.s.hint = false, 0
	if got := nh.window(); got <= nh.mss {
		t.Errorf("hints disabled: window %d before the first ACK, want the usual window", got)
	}

	const hint = 1e9 // bytes/s
	c.s.dataRTT, c.s.minRTT, c.s.srtt = true, 10*sim.Microsecond, 10*sim.Microsecond
	n := wire.DataSize + wire.TrailerSize + 4096
	gap := func() sim.Time {
		c.s.hint, c.s.heard, c.s.pacer.next = hint, true, c.now
		c.pace(n)
		return c.s.pacer.next - c.now
	}
	base := gap()
	if want := sim.Time(float64(n+ipUDPOverhead) / hint * 1e9); base != want {
		t.Errorf("no marks: gap %v, want %v (the hint)", base, want)
	}
	c.ensurePaths() // the paths are allocated on first use
	p := &c.s.paths[0]
	c.use(p)
	c.s.alpha, c.s.cutUntil = 0.5, 0
	c.ccOnRecord(p, 1, 4096, 4, 1)
	if c.s.mult != 0.75 {
		t.Errorf("a mark at alpha 0.5: m = %v, want 0.75", c.s.mult)
	}
	if g := gap(); g < base*4/3-2 || g > base*4/3+2 {
		t.Errorf("m 0.75: gap %v, want %v", g, base*4/3)
	}
	c.ccOnRecord(p, 1, 4096, 4, 1)
	if c.s.mult != 0.75 {
		t.Errorf("a second mark in the same round cut again: m = %v", c.s.mult)
	}
	for i := range 4 { // four rounds of unmarked ACKs: back to 1 at 1/16 per round
		l.run(c.s.srtt)
		c.now = l.net.Loop.Now()
		c.ccOnRecord(p, 1, 4096, 1, 0)
		if want := min(1, 0.75+float64(i+1)/16); math.Abs(c.s.mult-want) > 0.01 {
			t.Errorf("after %d unmarked rounds: m = %v, want %v", i+1, c.s.mult, want)
		}
	}
	c.s.hint = hint
	c.s.pacer.next = c.now + 1000
	c.noteHint(uint32(2 * hint / 1000))
	if got := c.s.pacer.next - c.now; got != 500 {
		t.Errorf("hint doubled with 1000 ns of gap left: %v left, want 500", got)
	}
}
