package experiment

import (
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

// regimesTiny runs the regimes experiment once at tiny scale (two beds,
// two link rates, loss-free, 1% and 10% random loss, write_bw) with two
// seeds, for the tests below.
var regimesTiny = sync.OnceValues(func() (*Report, error) {
	e, err := Lookup("regimes")
	if err != nil {
		return nil, err
	}
	return e.Run(Config{Scale: Tiny, Seeds: 2})
})

// regimeCheck returns the tiny report's check whose name starts with what.
func regimeCheck(t *testing.T, what string) Check {
	t.Helper()
	r, err := regimesTiny()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range r.Checks {
		if strings.HasPrefix(c.What, what) {
			return c
		}
	}
	t.Fatalf("no check %q", what)
	return Check{}
}

// TestRegimesTiny: MetaRoCE's regime targets hold in every cell of the
// tiny matrix, every seed: loss-free >= 97% of the wire limit with no
// timeout, >= 90% of loss-free at 1% loss; no MetaRoCE run fails or
// corrupts data. The 10% target is TestClaimRegimesTenPercentLoss.
func TestRegimesTiny(t *testing.T) {
	for _, what := range []string{"MetaRoCE loss-free write_bw, every cell: goodput", "MetaRoCE loss-free write_bw, every cell: timeouts",
		"MetaRoCE write_bw at 1% loss"} {
		if c := regimeCheck(t, what); !c.Met {
			t.Errorf("%s: %s, want %s (%s)", c.What, c.Measured, c.Target, c.Note)
		}
	}
	r, _ := regimesTiny()
	for _, x := range r.Rows.([]RegimeRow) {
		if x.Transport == transport.MetaRoCE.String() && (x.Error != "" || !x.DataOK) {
			t.Errorf("%s: error %q, data ok %v", x.Command, x.Error, x.DataOK)
		}
		// No transport fills more than the loss ceiling: the wire limit
		// times the frames the run's wire delivered (wireSurvival).
		if x.LossP > 0 && float64(x.OfCeiling) > ceilingSlack {
			t.Errorf("%s: %.4f of the loss ceiling, above 1", x.Command, float64(x.OfCeiling))
		}
	}
}

// TestClaimRegimesTenPercentLoss: at 10% random and bursty loss MetaRoCE
// fills >= 85% of the loss ceiling in every cell, every seed.
func TestClaimRegimesTenPercentLoss(t *testing.T) {
	cl := newClaim(t)
	c := regimeCheck(t, "MetaRoCE write_bw at 10% loss")
	t.Logf("%s: %s (target %s)", c.What, c.Measured, c.Target)
	if !c.Met {
		cl.Errorf("%s: %s, want %s (%s)", c.What, c.Measured, c.Target, c.Note)
	}
}

// TestClaimRegimesAtLeastRoCEv2: loss-free, MetaRoCE fills at least the
// fraction of its wire limit that RoCEv2 fills of its own with the same
// capacity (median), no seed below 0.99 of it.
//
// At full scale the median misses by 3.4e-6, and packet captures of both
// ends account for it (seed 1; loss-free cells do not depend on the
// seed). Both transports keep the wire busy from their first data packet
// on; a run's fraction is its busy time over busy time plus a fixed tail:
// the last data packet's one-way trip (propagation and a store-and-forward
// serialization at every switch) and the last ACK's return. MetaRoCE's
// tail is longer by its header bytes: 52 B more in the last data packet
// at each of hops-1 switches and a 112-144 B last ACK against RoCEv2's
// 48 B at each of hops links. At 1 and 10 Gbit/s that is 0.5-6 us of
// 13-135 ms (b2b 1 Gbit/s: 2.896 against 2.384 us, all of it the ACK's
// 64 B; fattree 1 Gbit/s: 186.6 against 180.5 us), 0.99996-0.999997 in
// the 8 cells; at 100 and 400 Gbit/s the same bytes cost nanoseconds and
// MetaRoCE's longer drain (more header bytes per message in flight)
// dilutes them, 1.000002-1.000007. Those bytes are the wire format's.
// The one cell that was not header bytes (fattree 100 Gbit/s, 0.9998):
// its first flight ran short, TestRegimesFirstFlightSixHops.
func TestClaimRegimesAtLeastRoCEv2(t *testing.T) {
	cl := newClaim(t)
	c := regimeCheck(t, "MetaRoCE loss-free write_bw, every cell: fraction of the wire limit over RoCEv2's")
	t.Logf("%s: %s (target %s)", c.What, c.Measured, c.Target)
	if !c.Met {
		cl.Errorf("%s: %s, want %s (%s)", c.What, c.Measured, c.Target, c.Note)
	}
}

// TestRegimePoint pins a regimes point's command: the rate and loss are
// what-if flags on the bed's built-in lab, quoted for a shell.
func TestRegimePoint(t *testing.T) {
	p := regimeParamsFor(Full)
	c := regimeCase{bed: regimeBeds[2], rate: 1e9, loss: regimeLosses[1], wl: workload.WriteBW, kind: transport.RoCEv2}
	got := p.point(c, 3).Command()
	for _, want := range []string{"mrlab sim regimes/leafspine ", "--from h0 --to h7", "--set links.default.rate=1gbit",
		"--set transports.rocev2.ack_timeout=13.1ms", "--impair 'all=loss random 1%'"} {
		if !strings.Contains(got, want) {
			t.Errorf("command %s\nlacks %s", got, want)
		}
	}
	for _, q := range []struct {
		bed  int
		rate float64
		want int
	}{{3, 1e9, 128}, {3, 100e9, 256}, {2, 100e9, 128}, {0, 400e9, 128}, {1, 400e9, 256}, {2, 400e9, 512}, {3, 400e9, 1024}} {
		if got := p.queueDepth(regimeCase{bed: regimeBeds[q.bed], rate: q.rate}); got != q.want {
			t.Errorf("%s at %g Gbit/s: queue depth %d, want %d", regimeBeds[q.bed].name, q.rate/1e9, got, q.want)
		}
	}
	// 1 Gbit/s, 4 hops: 3000 packets (100 ms) outlast 200 round trips.
	if d := p.duration(c); d < 100*sim.Millisecond || d > 101*sim.Millisecond {
		t.Errorf("duration %v, want ~100ms", d)
	}
}

// ceilingSlack is how far above 1 the fraction of the loss ceiling may
// read: the links count the connection's handshake frames, sent before
// the run's first post (two or three in thousands), not the draw's noise.
const ceilingSlack = 1.001

// TestLossCeilingImpossible: goodput over the loss ceiling cannot exceed
// 1 on the cell where the page read 100.3% (b2b, 1 Gbit/s, 10% random
// loss, the wire fully busy): the ceiling is the frames the run's wire
// delivered, not the nominal (1-p)^hops, which a lucky draw beats. The
// nominal figure is logged beside it; at seed 1 of the full-scale run it
// was 1.0027 with 9.35% of the data frames lost.
func TestLossCeilingImpossible(t *testing.T) {
	p := regimeParamsFor(Full) // the page's run length: 3000 packets, 0.5 s for four seeds
	c := regimeCase{regimeBeds[0], 1e9, regimeLosses[2], workload.WriteBW, transport.MetaRoCE}
	over := 0
	for seed := uint64(1); seed <= 4; seed++ {
		row, err := regimeRun(c, p.point(c, seed))
		if err != nil || row.Error != "" {
			t.Fatalf("seed %d: %v %s", seed, err, row.Error)
		}
		nominal := row.OfWire / (1 - c.loss.p)
		t.Logf("seed %d: %.4f of the measured ceiling (%.2f%% of frames lost on the wire), %.4f of the nominal (1-p)", seed,
			float64(row.OfCeiling), 100*(1-float64(row.WireSurvival)), nominal)
		if float64(row.OfCeiling) > ceilingSlack {
			t.Errorf("seed %d: %s: %.4f of the loss ceiling, above 1", seed, row.Command, float64(row.OfCeiling))
		}
		if float64(row.OfCeiling) < 0.5 || math.IsNaN(float64(row.OfCeiling)) {
			t.Errorf("seed %d: %.4f of the loss ceiling: the ceiling or the run is broken", seed, float64(row.OfCeiling))
		}
		if nominal > 1 {
			over++
		}
	}
	t.Logf("%d of 4 seeds above 1 against the nominal ceiling", over)
}

// TestWireSurvival: the fraction of a sender's frames that no wire lost,
// from the links' counts.
func TestWireSurvival(t *testing.T) {
	for _, c := range []struct {
		tx, rx, q uint64
		want      float64
	}{
		{1000, 1000, 0, 1},
		{1000, 900, 0, 0.9},
		{1000, 900, 50, 0.95}, // a queue drop is the transport's, not the wire's
		{1000, 1001, 0, 1},    // a frame counted in flight both ways: never above 1
		{10, 0, 0, 0},
	} {
		if got := wireSurvival(c.tx, c.rx, c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("wireSurvival(%d, %d, %d) = %v, want %v", c.tx, c.rx, c.q, got, c.want)
		}
	}
	if got := wireSurvival(0, 0, 0); !math.IsNaN(got) {
		t.Errorf("wireSurvival of nothing sent = %v, want NaN", got)
	}
}

// TestRegimesSilentTailPaths: the full-scale regimes cell where two paths
// hold a connection's last chunks and both go silent under bursty loss
// (fattree, 100 Gbit/s, 1% bursty, seed 1). Each path's tail-loss probe
// went unanswered and each waited for the other, which still "had data",
// until its probes backed off (300 us of tail): 85.1% of loss-free where
// every other seed gives 92-94%. A silent path does not count as one that
// answers (othersIdle), and the cell keeps >= 90% of loss-free, the
// page's every-seed target.
func TestRegimesSilentTailPaths(t *testing.T) {
	if testing.Short() {
		t.Skip("full-scale regimes cell")
	}
	p := regimeParamsFor(Full)
	run := func(loss regimeLoss) RegimeRow {
		c := regimeCase{bed: regimeBeds[3], rate: 100e9, loss: loss, wl: workload.WriteBW, kind: transport.MetaRoCE}
		row, err := regimeRun(c, p.point(c, 1))
		if err != nil || row.Error != "" || !row.DataOK {
			t.Fatalf("%s: %v %q data ok %v", row.Command, err, row.Error, row.DataOK)
		}
		return row
	}
	free, bursty := run(regimeLosses[0]), run(regimeLosses[3])
	frac := bursty.GoodputGbps / free.GoodputGbps
	t.Logf("%s: %.2f of %.2f Gb/s loss-free = %.3f", bursty.Command, bursty.GoodputGbps, free.GoodputGbps, frac)
	if frac < 0.90 {
		t.Errorf("fattree 100G 1%% bursty seed 1: %.3f of loss-free, want >= 0.90", frac)
	}
}

// TestRegimeBedsPerPlaneQPs: every regimes bed opens regimeQPs RoCEv2
// queue pairs per host pair (connDepth splits the pair's queue depth
// among them), and the points ask for it: the same messages in flight per
// host pair for both transports.
func TestRegimeBedsPerPlaneQPs(t *testing.T) {
	p := regimeParamsFor(Full)
	for _, b := range regimeBeds {
		lab, err := labs.Builtin("regimes/" + b.name)
		if err != nil {
			t.Fatal(err)
		}
		if got := lab.Transports.ConnsPerPeer(transport.RoCEv2, lab.Summary().Planes); got != regimeQPs {
			t.Errorf("%s: RoCEv2 opens %d queue pairs per host pair, connDepth assumes %d", b.name, got, regimeQPs)
		}
		for _, rate := range []float64{1e9, 100e9, 400e9} {
			mr := regimeCase{bed: b, rate: rate, wl: workload.WriteBW, kind: transport.MetaRoCE}
			ro := mr
			ro.kind = transport.RoCEv2
			if m, r := p.point(mr, 1).Spec.QueueDepth, p.point(ro, 1).Spec.QueueDepth; m != r*regimeQPs {
				t.Errorf("%s at %g Gbit/s: MetaRoCE's depth %d, RoCEv2's %d per queue pair x %d", b.name, rate/1e9, m, r, regimeQPs)
			}
		}
	}
}

// TestRegimesFirstFlightSixHops: the regimes cell where MetaRoCE's first
// flight ran out before the first ACK (fattree, 100 Gbit/s, 6 hops,
// loss-free, seed 1). Each of the 16 paths held its share of the flight
// rounded down to whole packets, 80 of its 90 packets went, and both ports
// idled 0.65 us: 0.9998 of RoCEv2's fraction of its wire limit, the
// matrix's worst cell. With the flight's 90 packets apportioned to the
// paths by largest remainders (6 on 10 paths, 5 on 6; spec §9 Paths) the
// flight covers the first ACK and the cell reads 0.99999; what is left is the last data packet's and the last
// ACK's header bytes at each hop (96 B per data packet against 44-60, a
// 144 B ACK against 48).
func TestRegimesFirstFlightSixHops(t *testing.T) {
	if testing.Short() {
		t.Skip("full-scale regimes cell")
	}
	p := regimeParamsFor(Full)
	of := map[transport.Kind]float64{}
	for _, k := range []transport.Kind{transport.MetaRoCE, transport.RoCEv2} {
		c := regimeCase{bed: regimeBeds[3], rate: 100e9, loss: regimeLosses[0], wl: workload.WriteBW, kind: k}
		row, err := regimeRun(c, p.point(c, 1))
		if err != nil || row.Error != "" || !row.DataOK {
			t.Fatalf("%s: %v %q data ok %v", row.Command, err, row.Error, row.DataOK)
		}
		of[k] = row.OfWire
	}
	ratio := of[transport.MetaRoCE] / of[transport.RoCEv2]
	t.Logf("fattree 100 Gbit/s loss-free: MetaRoCE %.7f of its wire limit, RoCEv2 %.7f: %.7f", of[transport.MetaRoCE], of[transport.RoCEv2], ratio)
	if ratio < 0.99995 {
		t.Errorf("MetaRoCE's fraction of its wire limit is %.7f of RoCEv2's, want >= 0.99995 (0.9998 with the first flight short)", ratio)
	}
}
