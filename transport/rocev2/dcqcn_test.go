package rocev2

import (
	"math"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

func TestDCQCNRules(t *testing.T) {
	p := DefaultDCQCN()
	p.IncreaseInterval = 200 * sim.Microsecond
	p.FastRecovery = 2
	const line = 100e9
	var r rateControl
	r.init(line, &p, true)
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > want*1e-9 {
			t.Fatalf("%s = %.6g, want %.6g", what, got, want)
		}
	}
	// First CNP, alpha starts at 1: the rate halves at once; without
	// ClampTarget the target stays at the rate before the episode.
	if old := r.cnp(0); old != line {
		t.Fatalf("cnp returned %g", old)
	}
	near("Rc after the first CNP", r.rc, line/2)
	near("Rt after the first CNP", r.rt, line)
	if !r.limited || r.deadline() != p.DecreaseInterval && r.deadline() != p.AlphaInterval {
		t.Fatalf("limited %v deadline %v", r.limited, r.deadline())
	}
	// A second CNP within DecreaseInterval cuts only when it is over.
	r.cnp(sim.Microsecond)
	near("Rc before the decrease interval ends", r.rc, line/2)
	if r.deadline() != p.DecreaseInterval {
		t.Fatalf("deadline %v, want the deferred cut at %v", r.deadline(), p.DecreaseInterval)
	}
	r.timer(p.DecreaseInterval)
	near("Rc after the deferred cut", r.rc, line/4)
	near("Rt after consecutive cuts", r.rt, line)
	// The alpha timer: a CNP came in the first interval (alpha stays 1),
	// none in the second (alpha decays by 1-g).
	r.timer(p.AlphaInterval)
	near("alpha after an interval with CNPs", r.alpha, 1)
	r.timer(2 * p.AlphaInterval)
	near("alpha after a quiet interval", r.alpha, 1-p.G)
	// Increase events: F fast-recovery steps halve the distance to Rt,
	// then one additive step, then hyper-additive ones.
	rc, rt := line/4, line
	at := p.DecreaseInterval
	for i := 0; i < p.FastRecovery; i++ {
		at += p.IncreaseInterval
		r.timer(at)
		rc = (rt + rc) / 2
		near("Rc in fast recovery", r.rc, rc)
		near("Rt in fast recovery", r.rt, rt)
	}
	// Rt is already at line rate: additive and hyper steps cannot raise
	// it, Rc keeps halving the distance.
	at += p.IncreaseInterval
	r.timer(at)
	rc = (rt + rc) / 2
	near("Rc in additive increase", r.rc, rc)
	// A cut after an increase moves the target down to the current rate.
	r.cnp(at + 1)
	rt = rc
	rc *= 1 - r.alpha/2
	near("Rt after a cut that follows an increase", r.rt, rt)
	near("Rc after a cut that follows an increase", r.rc, rc)
	// The floor.
	for i := 0; i < 200; i++ {
		r.cnp(at + sim.Time(i)*p.DecreaseInterval + 2)
	}
	near("Rc after many CNPs", r.rc, p.MinRate)
}

// TestDCQCNIncreaseStages: with the byte counter off the stages follow the
// timer: F fast-recovery events, one additive, then hyper-additive; with
// ClampTarget every cut sets the target to the current rate.
func TestDCQCNIncreaseStages(t *testing.T) {
	p := DefaultDCQCN()
	p.AI, p.HAI, p.FastRecovery, p.ClampTarget, p.ByteCounter = 1e9, 10e9, 1, true, 0
	const line = 100e9
	var r rateControl
	r.init(line, &p, true)
	r.cnp(0)
	r.cnp(p.DecreaseInterval)
	if r.rt != line/2 || r.rc != line/4 {
		t.Fatalf("ClampTarget: after two cuts Rt %g Rc %g, want %g and %g", r.rt, r.rc, line/2, line/4)
	}
	rt, rc := line/2, line/4
	at := p.DecreaseInterval
	for i, step := range []float64{0, p.AI, p.HAI, p.HAI} {
		at += p.IncreaseInterval
		r.timer(at)
		rt += step
		rc = (rt + rc) / 2
		if math.Abs(r.rt-rt) > 1 || math.Abs(r.rc-rc) > 1 {
			t.Fatalf("event %d: Rt %g Rc %g, want %g and %g", i, r.rt, r.rc, rt, rc)
		}
	}
	// Near line rate the QP snaps to it and its timers stop.
	for i := 0; i < 100 && r.limited; i++ {
		at += p.IncreaseInterval
		r.timer(at)
	}
	if r.limited || r.rc != line || r.deadline() != sim.Never {
		t.Fatalf("limited %v rate %g deadline %v: want line rate and no timers", r.limited, r.rc, r.deadline())
	}
	// A byte counter adds increase events.
	p.ByteCounter = 1000
	r.init(line, &p, true)
	r.cnp(0)
	before := r.rc
	if !r.sent(1, 999) && r.sent(1, 1) && r.rc > before {
		return
	}
	t.Fatalf("byte counter: no increase after %d bytes (rate %g)", p.ByteCounter, r.rc)
}

// TestDCQCNCutsAndRecovers marks CE on a's data for 300us: b's
// notification point sends CNPs (at most one per CNPInterval), a's
// reaction point cuts its rate (at most once per DecreaseInterval) and
// paces; after marking stops the rate climbs back to line rate and the
// timers stop.
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
	np := DefaultDCQCN().CNPInterval
	if cnps == 0 || cnps > uint64(markFor/np)+1 {
		t.Fatalf("%d CNPs in %v, want 1..%d (one per %v at most)", cnps, markFor, markFor/np+1, np)
	}
	if s.CNPsReceived != cnps || s.RateCuts == 0 || s.RateCuts > uint64(markFor/DefaultDCQCN().DecreaseInterval)+1 || s.Rate >= 25e9/2 {
		t.Fatalf("CNPs received %d (sent %d), cuts %d, rate %.3g: want every CNP received, at most one cut per %v, below half line rate",
			s.CNPsReceived, cnps, s.RateCuts, s.Rate, DefaultDCQCN().DecreaseInterval)
	}
	// Pacing: the late window of the marked period carried far fewer packets
	// than the first 100us at line rate.
	if sentDuring*2 > sentBefore {
		t.Fatalf("sent %d packets in 100us while cut, %d at line rate: pacing did not slow down", sentDuring, sentBefore)
	}
	if cuts := h.trace.count("DCQCN CNP: rate") + h.trace.count("DCQCN timer: rate"); cuts < int(s.RateCuts) {
		t.Fatalf("trace has %d rate changes, want at least the %d cuts", cuts, s.RateCuts)
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
