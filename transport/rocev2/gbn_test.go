package rocev2

import (
	"bytes"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

// gbnSetup connects a pair, registers a 64-packet source on a and a
// destination on b, and records every request PSN a sends (relative to
// the WRITE's first PSN) and every NAK b sends.
type gbnSetup struct {
	h         *harness
	src, dst  []byte
	wr        transport.WorkRequest
	firstPSN  ib.PSN
	sentPSN   map[int]int // relative PSN -> times sent
	naks      int
	acksFromB int
}

const gbnPackets = 64

// The link's one-way delay (300us) exceeds the 64 packets' serialization
// time (~215us at 10 Gb/s), so the whole message is in flight before a NAK
// can return: a loss at k then costs exactly k..63 once more.
func newGBN(t *testing.T, o Options) *gbnSetup {
	if o.Window == 0 {
		o.Window = 256
	}
	h := newHarness(t, harnessConfig{opts: o, delay: 300 * sim.Microsecond})
	h.dial()
	g := &gbnSetup{h: h, sentPSN: map[int]int{}}
	n := gbnPackets * 4096
	lkey, src := h.a.mem.add(0x1000, n, allAccess)
	rkey, dst := h.b.mem.add(0x8000_0000, n, allAccess)
	fill(src, 3)
	g.src, g.dst = src, dst
	g.wr = writeWR(1, lkey, 0x1000, n, rkey, 0x8000_0000)
	g.firstPSN = h.a.conn.req.postPSN
	h.onSend = func(from *endpoint, pk *ib.Packet) {
		switch {
		case from == h.a && pk.BTH.Opcode().Class() == ib.ClassWrite:
			g.sentPSN[pk.BTH.PSN().Diff(g.firstPSN)]++
		case from == h.b && pk.BTH.Opcode() == ib.OpAcknowledge:
			if pk.AETH.Syndrome() == ib.SyndromeNAKSequence {
				g.naks++
			} else {
				g.acksFromB++
			}
		}
	}
	return g
}

func (g *gbnSetup) run(t *testing.T, limit sim.Time) {
	t.Helper()
	g.h.a.postSend(g.wr)
	g.h.runUntil(func() bool { return len(g.h.a.comps) == 1 }, limit)
	if c := g.h.a.comps[0]; c.Status != transport.StatusOK {
		t.Fatalf("completion %+v", c)
	}
	if !bytes.Equal(g.src, g.dst) {
		t.Fatal("data differs after recovery")
	}
}

// dropOnce drops the first transmission of a's request with relative PSN k.
func (g *gbnSetup) dropOnce(k int) {
	done := false
	g.h.filter = func(from *endpoint, pk *ib.Packet) verdict {
		if !done && from == g.h.a && pk.BTH.Opcode().Class() == ib.ClassWrite && pk.BTH.PSN().Diff(g.firstPSN) == k {
			done = true
			return drop
		}
		return pass
	}
}

func TestGoBackNOneLoss(t *testing.T) {
	for _, k := range []int{0, 1, 17, 40, 62} {
		g := newGBN(t, Options{})
		g.dropOnce(k)
		g.run(t, sim.Second)
		for psn := 0; psn < gbnPackets; psn++ {
			want := 1
			if psn >= k {
				want = 2
			}
			if g.sentPSN[psn] != want {
				t.Errorf("drop %d: psn +%d sent %d times, want %d", k, psn, g.sentPSN[psn], want)
			}
		}
		s, r := g.h.a.conn.Stats(), g.h.b.conn.Stats()
		if g.naks != 1 || r.NAKsSent != 1 || s.NAKsReceived != 1 {
			t.Errorf("drop %d: NAKs on the wire %d, sent %d, received %d; want 1 each", k, g.naks, r.NAKsSent, s.NAKsReceived)
		}
		if s.Rewinds != 1 || s.Timeouts != 0 || s.Retransmitted != uint64(gbnPackets-k) {
			t.Errorf("drop %d: rewinds %d timeouts %d retransmitted %d, want 1, 0, %d", k, s.Rewinds, s.Timeouts, s.Retransmitted, gbnPackets-k)
		}
		if got := g.h.trace.count("rewind from psn"); got != 1 {
			t.Errorf("drop %d: %d rewind trace lines, want 1", k, got)
		}
		if k < gbnPackets-1 && r.OutOfSequence != uint64(gbnPackets-1-k) {
			t.Errorf("drop %d: responder dropped %d out-of-sequence packets, want %d", k, r.OutOfSequence, gbnPackets-1-k)
		}
	}
}

func TestNAKLostRecoversByTimeout(t *testing.T) {
	g := newGBN(t, Options{Timeout: 8})
	const k = 20
	dropped := false
	nakDropped := false
	g.h.filter = func(from *endpoint, pk *ib.Packet) verdict {
		if !dropped && from == g.h.a && pk.BTH.Opcode().Class() == ib.ClassWrite && pk.BTH.PSN().Diff(g.firstPSN) == k {
			dropped = true
			return drop
		}
		if !nakDropped && from == g.h.b && pk.BTH.Opcode() == ib.OpAcknowledge && pk.AETH.Syndrome() == ib.SyndromeNAKSequence {
			nakDropped = true
			return drop
		}
		return pass
	}
	start := g.h.loop.Now()
	g.run(t, sim.Second)
	s := g.h.a.conn.Stats()
	if !nakDropped || s.Timeouts != 1 || s.NAKsReceived != 0 {
		t.Fatalf("timeouts %d NAKs received %d (NAK dropped %v), want 1 timeout and no NAK", s.Timeouts, s.NAKsReceived, nakDropped)
	}
	to := g.h.a.proto.opts.AckTimeout
	if el := g.h.loop.Now() - start; el < to {
		t.Fatalf("finished in %v, before the %v ACK timeout could fire", el, to)
	}
	// The timeout rewinds to the oldest unacknowledged PSN, which is at or
	// before k (ACKs come every AckEvery packets).
	for psn := k; psn < gbnPackets; psn++ {
		if g.sentPSN[psn] != 2 {
			t.Errorf("psn +%d sent %d times, want 2", psn, g.sentPSN[psn])
		}
	}
}

func TestLastPacketLostRecoversByTimeout(t *testing.T) {
	g := newGBN(t, Options{AckTimeout: 2 * sim.Millisecond})
	g.dropOnce(gbnPackets - 1)
	g.run(t, sim.Second)
	s, r := g.h.a.conn.Stats(), g.h.b.conn.Stats()
	if s.Timeouts != 1 || r.NAKsSent != 0 {
		t.Fatalf("timeouts %d, NAKs sent %d; want 1 timeout, no NAK", s.Timeouts, r.NAKsSent)
	}
	if g.sentPSN[gbnPackets-1] != 2 {
		t.Fatalf("last psn sent %d times, want 2", g.sentPSN[gbnPackets-1])
	}
	if g.h.trace.count("local ACK timeout, psn") != 1 {
		t.Fatalf("trace lacks the timeout:\n%v", g.h.trace.lines)
	}
}

func TestDuplicatesAreReACKed(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.dial()
	lkey, src := h.a.mem.add(0x1000, 8*4096, allAccess)
	rkey, dst := h.b.mem.add(0x2000, 8*4096, allAccess)
	fill(src, 9)
	// Every SEND packet is delivered twice; each message must still be
	// received exactly once and in order.
	h.filter = func(from *endpoint, pk *ib.Packet) verdict {
		if from == h.a && pk.BTH.Opcode().Class() == ib.ClassSend {
			return duplicate
		}
		return pass
	}
	for i := 0; i < 4; i++ {
		h.b.postRecv(transport.WorkRequest{ID: uint64(100 + i), SGL: [4]transport.SGE{{Addr: 0x2000 + uint64(i)*2*4096, Len: 2 * 4096, LKey: rkey}}, NumSGE: 1})
	}
	for i := 0; i < 4; i++ {
		s, k := sgl(lkey, 0x1000+uint64(i)*2*4096, 2*4096-i)
		h.a.postSend(transport.WorkRequest{ID: uint64(i + 1), Op: transport.OpSend, SGL: s, NumSGE: k})
	}
	h.runUntil(func() bool { return len(h.a.comps) == 4 && len(h.b.comps) == 4 }, sim.Second)
	h.loop.RunUntil(h.loop.Now() + sim.Millisecond)
	if len(h.b.comps) != 4 {
		t.Fatalf("%d receive completions, want 4 (exactly once)", len(h.b.comps))
	}
	for i, c := range h.b.comps {
		if c.ID != uint64(100+i) || c.Status != transport.StatusOK || c.Bytes != uint32(2*4096-i) {
			t.Errorf("receive %d: %+v", i, c)
		}
		off := i * 2 * 4096
		if n := 2*4096 - i; !bytes.Equal(src[off:off+n], dst[off:off+n]) {
			t.Errorf("message %d differs", i)
		}
	}
	r := h.b.conn.Stats()
	if r.Duplicates != 8 || r.AcksSent < 8 {
		t.Fatalf("duplicates %d acks sent %d; want 8 duplicates, each re-ACKed", r.Duplicates, r.AcksSent)
	}
	if s := h.a.conn.Stats(); s.Rewinds != 0 || s.Retransmitted != 0 {
		t.Fatalf("duplicates caused retransmission: %+v", s)
	}
}
