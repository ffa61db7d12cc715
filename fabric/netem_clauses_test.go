package fabric_test

import (
	"math"
	"testing"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/sim"
)

// Each test here holds one netem clause to what tc-netem(8) and the
// kernel's sch_netem.c say it does.

// TestNetemRateOverhead: "rate RATE PACKETOVERHEAD CELLSIZE CELLOVERHEAD"
// serializes a packet of n bytes as n+PACKETOVERHEAD bytes, rounded up to
// whole cells of CELLSIZE+CELLOVERHEAD bytes (netem's packet_time_ns).
func TestNetemRateOverhead(t *testing.T) {
	for _, c := range []struct {
		spec       string
		size, wire int // packet size; bytes it takes on the wire
	}{
		{"rate 1gbit", 1000, 1000},
		{"rate 1gbit 20", 1000, 1020},            // 20 bytes of link-layer overhead
		{"rate 1gbit -14", 1000, 986},            // Ethernet header stripped
		{"rate 1mbit 20 100 5", 64, 105},         // 84 bytes: 1 cell of 105
		{"rate 1mbit 20 100 5", 200, 315},        // 220 bytes: 3 cells of 105
		{"rate 10mbit 0 48 5", 1000, 21 * 53},    // ATM: 48-byte payload in 53-byte cells
		{"rate 1gbit 20 0 -5", 1000, 1020},       // a cell overhead needs a cell size
		{"rate 25gbit 20", 4096 + 28, 4096 + 48}, // the example
	} {
		imp, err := fabric.ParseImpairment(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		l, port, s1 := b2b(t, fabric.LinkParams{Rate: 100e9, Impair: imp, QueueBytes: 1 << 20}, fabric.BuildOptions{})
		const n = 50
		for i := 0; i < n; i++ {
			port.Send(0, udp(l.pool, addr0, addr1, 1, 2, c.size, 0))
		}
		l.loop.Run()
		if len(s1.got) != n {
			t.Fatalf("%s: %d of %d delivered", c.spec, len(s1.got), n)
		}
		for k, a := range s1.got {
			if want := sim.Time((endPs(k+1, c.wire, imp.Rate) + 999) / 1000); a.at != want {
				t.Fatalf("%s, %d B: packet %d arrived at %v, want %v (%d wire bytes each)", c.spec, c.size, k, a.at, want, c.wire)
			}
		}
	}
}

// TestNetemLossECN: with "ecn", what the loss model picks is marked CE
// instead of dropped if the packet is ECN-capable; a Not-ECT packet is
// still dropped, one already CE passes (INET_ECN_set_ce).
func TestNetemLossECN(t *testing.T) {
	imp, err := fabric.ParseImpairment("loss random 40% ecn")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		ecn       uint8
		delivered bool // every packet delivered
		marked    bool // the lost share arrives CE
	}{
		{"ECT(0)", header.ECNECT0, true, true},
		{"ECT(1)", header.ECNECT1, true, true},
		{"CE", header.ECNCE, true, false},
		{"Not-ECT", 0, false, false},
	} {
		l, port, s1 := b2b(t, fabric.LinkParams{Rate: 100e9, Impair: imp}, fabric.BuildOptions{Seed: 5})
		const n = 5000
		for i := 0; i < n; i++ {
			at := sim.Time(i) * sim.Microsecond
			l.loop.RunUntil(at)
			port.Send(at, udp(l.pool, addr0, addr1, 1, 2, 500, c.ecn))
		}
		l.loop.Run()
		lc, _ := l.net.Counters().Link("p0-h0-h1", fabric.AtoB)
		ce := 0
		for _, a := range s1.got {
			if a.ecn == header.ECNCE {
				ce++
			}
		}
		switch {
		case c.delivered && c.marked:
			if len(s1.got) != n || math.Abs(float64(ce)/n-0.4) > 0.03 || uint64(ce) != lc.ECNMarks || lc.Drops.Total() != 0 {
				t.Errorf("%s: %d of %d delivered, %d CE, %d marks counted, %d drops; want all, 40%% CE", c.name, len(s1.got), n, ce, lc.ECNMarks, lc.Drops.Total())
			}
		case c.delivered:
			if len(s1.got) != n || ce != n || lc.ECNMarks != 0 {
				t.Errorf("%s: %d of %d delivered, %d CE, %d marks", c.name, len(s1.got), n, ce, lc.ECNMarks)
			}
		default:
			if lost := n - len(s1.got); math.Abs(float64(lost)/n-0.4) > 0.03 || ce != 0 || uint64(lost) != lc.Drops.Total() {
				t.Errorf("%s: %d of %d lost, %d CE; want 40%% lost, none marked", c.name, lost, n, ce)
			}
		}
	}
}

// lossRuns sends n packets through spec and returns the loss rate and the
// mean length of runs of consecutive losses.
func lossRuns(t *testing.T, spec string, n int) (rate, meanRun float64) {
	t.Helper()
	imp, err := fabric.ParseImpairment(spec)
	if err != nil {
		t.Fatal(err)
	}
	l, port, s1 := b2b(t, fabric.LinkParams{Rate: 100e9, Impair: imp}, fabric.BuildOptions{Seed: 11})
	for i := 0; i < n; i++ {
		at := sim.Time(i) * sim.Microsecond
		l.loop.RunUntil(at)
		b := udp(l.pool, addr0, addr1, uint16(i), 2, 100, 0) // sport numbers the packet
		port.Send(at, b)
	}
	l.loop.Run()
	// Rebuild which packets arrived from the arrival times (one per us).
	arrived := make([]bool, n)
	for _, a := range s1.got {
		arrived[int(a.at/sim.Microsecond)] = true
	}
	lost, runs := 0, 0
	for i := 0; i < n; i++ {
		if !arrived[i] {
			lost++
			if i == 0 || arrived[i-1] {
				runs++
			}
		}
	}
	if runs == 0 {
		return 0, 0
	}
	return float64(lost) / float64(n), float64(lost) / float64(runs)
}

// TestNetemLossCorrelation: "loss random P CORRELATION" draws from netem's
// correlated generator, so losses come in runs. As tc-netem(8) warns, it
// is "an approximation": it also pulls draws toward the middle, so the
// loss rate falls below P; mrlab reproduces that rather than correct it.
func TestNetemLossCorrelation(t *testing.T) {
	const n = 60000
	r0, run0 := lossRuns(t, "loss random 10%", n)
	r1, run1 := lossRuns(t, "loss random 10% 0%", n)
	rc, runc := lossRuns(t, "loss random 30% 50%", n)
	if math.Abs(r0-0.1) > 0.005 || math.Abs(run0-1/0.9) > 0.03 {
		t.Errorf("uncorrelated: rate %.4f, mean run %.3f; want 0.1 and 1.11", r0, run0)
	}
	if r1 != r0 || run1 != run0 {
		t.Errorf("0%% correlation differs from none: %.4f/%.3f vs %.4f/%.3f", r1, run1, r0, run0)
	}
	// With rho 0.5 the draw is 0.5*fresh + 0.5*last: it stays near the
	// middle (fewer draws fall below 30%), and a loss makes the next
	// more likely, so runs are longer than independent losses at the
	// same rate would make (1/(1-rate)).
	if rc >= 0.25 || rc < 0.05 || runc < 1.3/(1-rc) {
		t.Errorf("50%% correlation: rate %.4f, mean run %.2f; want a rate below 30%% and runs longer than %.2f", rc, runc, 1/(1-rc))
	}
	t.Logf("loss random 30%% 50%%: rate %.4f, mean run %.2f (independent: %.2f)", rc, runc, 1/(1-rc))
}

// TestNetemDelayCorrelation: "delay TIME JITTER CORRELATION" makes each
// added delay lean on the last: with uniform jitter, successive delays are
// correlated by the given fraction (the generator is an AR(1) process).
func TestNetemDelayCorrelation(t *testing.T) {
	for _, c := range []struct {
		spec string
		rho  float64
	}{
		{"delay 100us 50us", 0},
		{"delay 100us 50us 50%", 0.5},
		{"delay 100us 50us 90%", 0.9},
	} {
		imp, err := fabric.ParseImpairment(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		l, port, s1 := b2b(t, fabric.LinkParams{Rate: 100e9, Impair: imp}, fabric.BuildOptions{Seed: 3})
		const n = 20000
		rec := &recorderWithNet{net: l.net}
		l.net.SetObserver(rec)
		sent := map[uint64]sim.Time{}
		var order []uint64
		for i := 0; i < n; i++ {
			at := sim.Time(i) * sim.Millisecond // far apart: no reordering
			l.loop.RunUntil(at)
			b := udp(l.pool, addr0, addr1, 1, 2, 100, 0)
			sent[b.ID] = at
			order = append(order, b.ID)
			port.Send(at, b)
		}
		l.loop.Run()
		if len(s1.got) != n {
			t.Fatalf("%s: %d delivered", c.spec, len(s1.got))
		}
		delay := map[uint64]float64{}
		for _, e := range rec.evs {
			if e.ev == fabric.EvDeliver {
				delay[e.id] = float64(e.at - sent[e.id])
			}
		}
		var xs []float64
		for _, id := range order {
			xs = append(xs, delay[id])
		}
		var mean float64
		for _, x := range xs {
			mean += x
		}
		mean /= n
		var num, den float64
		for i := range xs {
			den += (xs[i] - mean) * (xs[i] - mean)
			if i > 0 {
				num += (xs[i] - mean) * (xs[i-1] - mean)
			}
		}
		if ac := num / den; math.Abs(ac-c.rho) > 0.03 {
			t.Errorf("%s: lag-1 autocorrelation of delays %.3f, want %.2f", c.spec, ac, c.rho)
		}
		if math.Abs(mean-100e3) > 2e3 {
			t.Errorf("%s: mean delay %.0f ns, want 100us", c.spec, mean)
		}
	}
}

// TestNetemDuplicateCorruptCorrelation: duplicate and corrupt take a
// correlation too; correlated events come in runs (the chance of one right
// after another is well above the marginal rate).
func TestNetemDuplicateCorruptCorrelation(t *testing.T) {
	for _, spec := range []string{"duplicate 40% 50%", "corrupt 40% 50%"} {
		imp, err := fabric.ParseImpairment(spec)
		if err != nil {
			t.Fatal(err)
		}
		l, port, _ := b2b(t, fabric.LinkParams{Rate: 100e9, Impair: imp}, fabric.BuildOptions{Seed: 8})
		rec := &recorderWithNet{net: l.net}
		l.net.SetObserver(rec)
		const n = 50000
		var order []uint64
		for i := 0; i < n; i++ {
			at := sim.Time(i) * sim.Microsecond
			l.loop.RunUntil(at)
			b := udp(l.pool, addr0, addr1, 1, 2, 100, 0)
			order = append(order, b.ID)
			port.Send(at, b)
		}
		l.loop.Run()
		hit := map[uint64]bool{}
		for _, e := range rec.evs {
			if e.ev == fabric.EvCorrupt || e.ev == fabric.EvDuplicate {
				hit[e.id] = true
			}
		}
		// A duplicate is a new buffer observed right after its original
		// leaves the wire; mark the packet whose transmission came last.
		var seq []bool
		if spec[0] == 'd' {
			for _, e := range rec.evs {
				switch e.ev {
				case fabric.EvTransmit:
					seq = append(seq, false)
				case fabric.EvDuplicate:
					seq[len(seq)-1] = true
				}
			}
		} else {
			for _, id := range order {
				seq = append(seq, hit[id])
			}
		}
		var k, both, prev int
		for i, h := range seq {
			if h {
				k++
			}
			if i > 0 && seq[i-1] {
				prev++
				if h {
					both++
				}
			}
		}
		marginal := float64(k) / float64(len(seq))
		cond := float64(both) / float64(prev)
		if marginal <= 0.05 || cond < 1.5*marginal {
			t.Errorf("%s: rate %.3f, right after an event %.3f: want events in runs", spec, marginal, cond)
		}
		t.Logf("%s: rate %.3f, right after an event %.3f", spec, marginal, cond)
	}
}

// TestNetemSlot: "slot MIN [MAX] packets N bytes B" holds delivery to
// slots: packets leave in bursts of at most N packets (B bytes), one slot
// MIN..MAX after the last.
func TestNetemSlot(t *testing.T) {
	for _, c := range []struct {
		spec         string
		burst        int      // packets per slot
		gapLo, gapHi sim.Time // between slots
	}{
		{"slot 100us packets 4", 4, 100 * sim.Microsecond, 100 * sim.Microsecond},
		{"slot 100us bytes 3000", 3, 100 * sim.Microsecond, 100 * sim.Microsecond},
		{"slot 50us 150us packets 5", 5, 50 * sim.Microsecond, 150 * sim.Microsecond},
	} {
		imp, err := fabric.ParseImpairment(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		l, port, s1 := b2b(t, fabric.LinkParams{Rate: 100e9, Impair: imp, QueueBytes: 1 << 20}, fabric.BuildOptions{Seed: 2})
		const n = 60
		for i := 0; i < n; i++ {
			port.Send(0, udp(l.pool, addr0, addr1, 1, 2, 1000, 0))
		}
		l.loop.Run()
		if len(s1.got) != n {
			t.Fatalf("%s: %d of %d delivered", c.spec, len(s1.got), n)
		}
		// Group arrivals by time.
		var groups []int
		var starts []sim.Time
		for i, a := range s1.got {
			if i == 0 || a.at != s1.got[i-1].at {
				groups = append(groups, 0)
				starts = append(starts, a.at)
			}
			groups[len(groups)-1]++
		}
		for i, g := range groups {
			if g != c.burst && i != len(groups)-1 {
				t.Errorf("%s: slot %d took %d packets, want %d (%v)", c.spec, i, g, c.burst, groups)
				break
			}
		}
		for i := 2; i < len(starts); i++ { // the first slot opens after the first packet
			if gap := starts[i] - starts[i-1]; gap < c.gapLo || gap > c.gapHi+1 {
				t.Errorf("%s: slots %d and %d %v apart, want %v..%v", c.spec, i-1, i, gap, c.gapLo, c.gapHi)
			}
		}
	}
}
