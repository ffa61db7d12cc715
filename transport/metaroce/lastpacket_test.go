package metaroce

import (
	"math"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// TestDemandLastPacket: a data packet's demand is 0 exactly when the
// sender has nothing queued after it (no bytes left to cut, nothing to
// send again), whatever is in flight: it is the sender's last packet.
// Otherwise it asks for at least one MSS per base RTT (and 1 kB/s), and
// counting the packet being sent never lowers it.
func TestDemandLastPacket(t *testing.T) {
	l := newLab(t, transporttest.Config{Seed: 1, LinkRate: 100e9}, Options{})
	c := metaConn(l.ca)
	floor := uint32(float64(c.mss) / c.baseRTT().Seconds() / 1000)
	for _, tc := range []struct {
		name     string
		unsent   int64
		inflight int
		rexmit   int // chunks queued to go again (moved off a path)
		size     int
		last     bool
	}{
		{"nothing queued or in flight, a full packet", 0, 0, 0, 4096, true},
		{"nothing queued or in flight, a filler", 0, 0, 0, 0, true},
		{"nothing queued, packets in flight", 0, 64 << 10, 0, 4096, true},
		{"a few bytes queued", 64, 0, 0, 4096, false},
		{"a chunk to send again", 0, 0, 1, 4096, false},
		{"a message queued", 1 << 20, 64 << 10, 0, 4096, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.s.unsent, c.s.inflight = tc.unsent, tc.inflight
			c.s.rexmit, c.s.rexHead = c.s.rexmit[:0], 0
			for i := range tc.rexmit {
				c.s.rexmit = append(c.s.rexmit, uint32(i))
			}
			got := c.demandKBs(tc.size)
			if tc.last {
				if got != 0 {
					t.Errorf("demand %d kB/s, want 0 (the sender's last packet)", got)
				}
				return
			}
			if got < max(floor, 1) {
				t.Errorf("demand %d kB/s, want at least %d (one MSS per base RTT)", got, floor)
			}
			if without := c.demandKBs(0); got < without {
				t.Errorf("demand fell from %d to %d kB/s counting the packet being sent", without, got)
			}
		})
	}
	c.s.rexmit, c.s.rexHead = c.s.rexmit[:0], 0
}

// TestLastPacketLeaves: a packet that says it is its sender's last
// (demand 0) ends the sender's activity at once: the others share its
// part from then on, and the sender is offered what one more sender would
// get (its next message starts there), never a share of its zero demand.
// Its next packet that asks for more makes it active again.
func TestLastPacketLeaves(t *testing.T) {
	const rtt = 10 * sim.Microsecond
	a := newAllocator(100, 40*sim.Microsecond, 1.0/16)
	var s []int32
	for range 4 {
		x := a.register(0, false)
		a.observe(x, 0, 1e12, rtt, 4096, false)
		s = append(s, x)
	}
	if got := a.share(s[0], 0); got != 25 {
		t.Fatalf("4 senders: share %v, want 25", got)
	}
	now := sim.Microsecond // well inside every activity window
	a.observe(s[3], now, 0, rtt, 4096, false)
	for _, x := range s[:3] {
		if got := a.share(x, now); math.Abs(got-100.0/3) > 1e-9 {
			t.Errorf("after sender 3's last packet: sender %d share %v, want 33.3", x, got)
		}
	}
	if a.active != 3 {
		t.Errorf("%d senders active, want 3", a.active)
	}
	if got := a.share(s[3], now); got != 25 {
		t.Errorf("the sender that finished is offered %v, want 25 (one more sender's share)", got)
	}
	a.observe(s[3], 2*now, 1e12, rtt, 4096, false)
	if got := a.share(s[0], 2*now); got != 25 {
		t.Errorf("after sender 3 came back: share %v, want 25", got)
	}
}

// TestFinishedSendersFreeShare: 16 senders each WRITE to one receiver,
// 15 of them 16 KiB and one 512 KiB. Paced at C/16 the short ones finish
// within a few of their packet intervals; the long one must then get the
// receiver's whole link as soon as their last packets have arrived, not
// stay paced at C/16 until their activity windows (four packet intervals
// at C/16) run out. Plane-scaling's one-plane bed (250 connections of
// four packets per receiver) lost 20% of its goodput to this: the last
// senders of every receiver stayed at C/250 for 340 us while the link
// idled. The long WRITE is timed against its bound: every byte of all 16
// WRITEs through the receiver's link, plus the handshake-free start's
// round trips.
func TestFinishedSendersFreeShare(t *testing.T) {
	const (
		rate  = 100e9
		n     = 16
		short = 16 << 10
		long  = 512 << 10
	)
	cfg := transporttest.Config{Seed: 5, LinkRate: rate, LinkDelay: sim.Microsecond, ECNThreshold: 64 << 10, QueueBytes: 4 << 20}
	net := transporttest.New(sim.NewLoop(), cfg)
	_, conns := incastStar(t, net, n, Options{})
	t0 := net.Loop.Now()
	for i, c := range conns {
		size := short
		if i == 0 {
			size = long
		}
		if err := c.PostSend(write(1, 0, addrRW, addrRW, size)); err != nil {
			t.Fatal(err)
		}
	}
	var shortDone, longDone sim.Time
	for net.Loop.Now() < t0+10*sim.Millisecond && longDone == 0 {
		net.Loop.RunUntil(net.Loop.Now() + 100*sim.Nanosecond)
		if shortDone == 0 {
			done := true
			for _, c := range conns[1:] {
				done = done && len(c.Completions) == 1
			}
			if done {
				shortDone = net.Loop.Now() - t0
			}
		}
		if len(conns[0].Completions) == 1 {
			longDone = net.Loop.Now() - t0
		}
	}
	for _, c := range conns {
		for _, wc := range c.Completions {
			if wc.Status != transport.StatusOK {
				t.Fatalf("completion %+v", wc)
			}
		}
	}
	if longDone == 0 {
		t.Fatal("the long WRITE did not complete")
	}
	rtt := metaConn(conns[0]).Stats().MinRTT
	// Every byte through the receiver's link at its rate (a data packet
	// adds dataOverhead to its payload).
	pkts := (long + (n-1)*short) / 4096
	wire := sim.Time(float64(pkts*(4096+dataOverhead)) / (rate / 8) * float64(sim.Second))
	t.Logf("short WRITEs done after %v, the long one after %v: %.2f x the receiver link's time for every byte (%v), base RTT %v",
		shortDone, longDone, float64(longDone)/float64(wire), wire, rtt)
	if bound := wire + 4*rtt; longDone > bound {
		t.Errorf("the long WRITE took %v, more than the link's time for every byte plus 4 RTTs (%v): it stayed paced at a share the finished senders held", longDone, bound)
	}
}
