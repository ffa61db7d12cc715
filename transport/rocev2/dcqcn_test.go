package rocev2

import (
	"math"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

func TestDCQCNRules(t *testing.T) {
	p := DefaultDCQCN
	const line = 100e9
	var r rateControl
	r.init(line, &p, true)
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > want*1e-9 {
			t.Fatalf("%s = %.6g, want %.6g", what, got, want)
		}
	}
	// First CNP, alpha starts at 1: the rate halves, the target keeps the
	// old rate, alpha stays 1 ((1-g)*1 + g).
	if old := r.cnp(0); old != line {
		t.Fatalf("cnp returned %g", old)
	}
	near("Rc after CNP", r.rc, line/2)
	near("Rt after CNP", r.rt, line)
	near("alpha after CNP", r.alpha, 1)
	if !r.limited || r.deadline() != p.AlphaInterval {
		t.Fatalf("limited %v deadline %v, want alpha timer at %v", r.limited, r.deadline(), p.AlphaInterval)
	}
	// 55us without a CNP: alpha decays by (1-g).
	r.timer(p.AlphaInterval)
	near("alpha after one quiet interval", r.alpha, 1-p.G)
	// Second CNP: cut by the decayed alpha.
	r.cnp(p.AlphaInterval + 1)
	near("Rc after second CNP", r.rc, line/2*(1-(1-p.G)/2))
	rt := line / 2
	near("Rt after second CNP", r.rt, rt)
	rc := r.rc
	// Fast recovery: each increase event halves the distance to Rt.
	for i := 1; i < p.FastRecovery; i++ {
		r.bytes = p.ByteCounter - 1
		if !r.sent(0, 1) {
			t.Fatalf("byte counter event %d did not fire", i)
		}
		rc = (rt + rc) / 2
		near("Rc in fast recovery", r.rc, rc)
		near("Rt in fast recovery", r.rt, rt)
	}
	// Then additive increase: Rt grows by AI per event.
	r.bytes = p.ByteCounter
	r.byteEvents = p.FastRecovery
	r.sent(0, 0)
	rt += p.AI
	rc = (rt + rc) / 2
	near("Rt in additive increase", r.rt, rt)
	near("Rc in additive increase", r.rc, rc)
	// Hyper increase once both counters pass F.
	r.timerEvents, r.byteEvents = p.FastRecovery+1, p.FastRecovery+1
	r.bytes = p.ByteCounter
	r.sent(0, 0)
	rt += p.HAI
	near("Rt in hyper increase", r.rt, rt)
	// The floor.
	for i := 0; i < 100; i++ {
		r.cnp(sim.Time(i))
	}
	near("Rc after many CNPs", r.rc, p.MinRate)
}

// TestDCQCNCutsAndRecovers marks CE on a's data for 300us: b's
// notification point sends CNPs (at most one per 50us), a's reaction point
// cuts its rate and paces; after marking stops the rate climbs back to
// line rate and the timers stop.
func TestDCQCNCutsAndRecovers(t *testing.T) {
	h := newHarness(t, harnessConfig{rate: 25e9})
	h.dial()
	const n = 64 << 20
	lkey, _ := h.a.mem.add(0x1000, n, allAccess)
	rkey, _ := h.b.mem.add(0x1000, n, allAccess)
	start := h.loop.Now()
	const markFor = 300 * sim.Microsecond
	h.filter = func(from *endpoint, pk *ib.Packet) verdict {
		if from == h.a && h.loop.Now() < start+markFor {
			return markCE
		}
		return pass
	}
	var sentDuring, sentBefore int
	h.onSend = func(from *endpoint, pk *ib.Packet) {
		if from != h.a || pk.BTH.Opcode().Class() != ib.ClassWrite {
			return
		}
		switch now := h.loop.Now(); {
		case now < start+100*sim.Microsecond:
			sentBefore++
		case now >= start+200*sim.Microsecond && now < start+300*sim.Microsecond:
			sentDuring++
		}
	}
	h.a.postSend(writeWR(1, lkey, 0x1000, n, rkey, 0x1000))
	h.loop.RunUntil(start + markFor)
	s := h.a.conn.Stats()
	cnps := h.b.conn.Stats().CNPsSent
	if cnps == 0 || cnps > uint64(markFor/(50*sim.Microsecond))+1 {
		t.Fatalf("%d CNPs in %v, want 1..%d (one per 50us at most)", cnps, markFor, markFor/(50*sim.Microsecond)+1)
	}
	if s.CNPsReceived != cnps || s.RateCuts != cnps || s.Rate >= 25e9/2 {
		t.Fatalf("CNPs received %d cuts %d rate %.3g, want every CNP to cut below half line rate", s.CNPsReceived, s.RateCuts, s.Rate)
	}
	// Pacing: the late window of the marked period carried far fewer packets
	// than the first 100us at line rate.
	if sentDuring*2 > sentBefore {
		t.Fatalf("sent %d packets in 100us while cut, %d at line rate: pacing did not slow down", sentDuring, sentBefore)
	}
	if h.trace.count("DCQCN CNP: rate") != int(cnps) {
		t.Fatalf("trace has %d rate cuts, want %d", h.trace.count("DCQCN CNP: rate"), cnps)
	}
	h.runUntil(func() bool { return h.a.conn.Stats().Rate == 25e9 }, 100*sim.Millisecond)
	t.Logf("%d CNPs cut the rate to %.3g Gb/s; back at line rate %v after marking stopped",
		cnps, s.Rate/1e9, h.loop.Now()-start-markFor)
	if h.a.conn.rp.limited || h.a.conn.rp.deadline() != sim.Never {
		t.Fatal("DCQCN timers still running at line rate")
	}
	h.runUntil(func() bool { return len(h.a.comps) == 1 }, sim.Second)
	if h.a.comps[0].Status != transport.StatusOK {
		t.Fatalf("completion %+v", h.a.comps[0])
	}
}

func TestNoDCQCNIgnoresCNPs(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: Options{NoDCQCN: true}})
	h.dial()
	lkey, _ := h.a.mem.add(0x1000, 1<<20, allAccess)
	rkey, _ := h.b.mem.add(0x1000, 1<<20, allAccess)
	h.filter = func(from *endpoint, pk *ib.Packet) verdict { return markCE }
	h.a.postSend(writeWR(1, lkey, 0x1000, 1<<20, rkey, 0x1000))
	h.runUntil(func() bool { return len(h.a.comps) == 1 }, sim.Second)
	s := h.a.conn.Stats()
	if s.CNPsReceived == 0 || s.RateCuts != 0 || s.Rate != 10e9 {
		t.Fatalf("CNPs %d cuts %d rate %g: with NoDCQCN CNPs arrive but never cut", s.CNPsReceived, s.RateCuts, s.Rate)
	}
}
