package experiment

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/workload"
)

// The claims the results page publishes, one test each, on small beds
// with a few seeds, so that a regression fails `go test`: each asserts the
// seeds' own figure (or the issue's target for the baseline) for every
// seed, not whatever today's transports happen to reach. docs/results.md
// reports the same figures at full scale with more seeds.

// claimSeeds are the seeds every claim holds for.
var claimSeeds = []uint64{1, 2, 3}

// knownMisses are the claims today's MetaRoCE misses on these beds, with
// the issue that is fixing it. Such a test still runs and still asserts
// the seeds' figure; it reports the miss as a skip (with the figures) so
// the suite stays green while the fix lands. Once the claim holds the
// test passes and says its entry is stale: delete it then.
var knownMisses = map[string]string{
	// Loss-free all-reduce is bandwidth-bound: MetaRoCE's 96 bytes of
	// headers and trailer per 4 KiB packet against RoCEv2's 44 (and a
	// RETH per message) make 0.988x on the same wire, and its ACKs
	// (one copy of each record loss-free, against RoCEv2's two ACKs of
	// 48 bytes per 256 KiB step) share the links the
	// ring's next step uses: 0.986x here (seeds 1-3), the first
	// operation as fast as the second now that the first flight covers
	// the first ACK (0.976x before, TestAllReduceFirstFlight). Alltoall
	// misses on seed 3 only, where RoCEv2 reaches 202 Gb/s (163 on seeds
	// 1-2; MetaRoCE 170 on all). On the results page's bed (64 hosts, 8
	// planes, 8 MiB: 252 ring steps of 128 KiB, 4 packets per plane) the
	// ring is latency-bound, a step 3.69 us with 1.35 on the wire, and
	// MetaRoCE's step is 26 ns longer than lossless RoCEv2's (3.689 vs
	// 3.663 us, seed 1, packet captures at h1 and h2): 15.0 ns for the
	// critical plane's 188 more header bytes (4 x 96 B against 4 x 44 B
	// plus a RETH and an ImmDt), 3.8 ns for the last packet's
	// store-and-forward at the leaf, 7.7 ns for the previous step's ACK
	// that leaves just ahead of the step's data on that uplink (144 B
	// against 48). 252 steps x 26.5 ns = 6.7 us of 972.5: 0.993x. The
	// workload treats both alike (one 128 KiB WRITE_IMM per step against
	// 8 channels of 16 KiB: the same packets per plane, posted on the same
	// receive completion); a ring pipelined in slices, as NCCL's, would be
	// bandwidth-bound, where the header bytes alone make 0.989x. Since the
	// all-to-all posts to its peers staggered, as NCCL does (before, every
	// rank's first packets went to one receiver, which cost lossless
	// RoCEv2 a quarter of its bandwidth), MetaRoCE's lead there is 1.10x
	// at full scale and gone below it: 0.89x (0.88-0.90) at --scale quick
	// on the results page, seed 3 here. There (32 KiB, 8 packets, to each
	// peer; about 21 us of data per operation, two base RTTs) lossless
	// RoCEv2 sends at line rate from the first post and its operations
	// take 33.8 us; MetaRoCE's first takes 40.2 and its second 36.2
	// (seed 1). The first loses its first round trip: the acceptors'
	// first grants went to whichever of their 63 dialers came first
	// (the whole capacity) and none to the other 62, which send one
	// packet each until their first ACK, so the senders' lines idle for
	// 5.6 us of the first 10. The second starts on the hints the senders
	// heard at the end of the first, each what one more sender would get
	// when it finished (at h1 they add up to 6.8 times its line), and
	// its first ACKs carry the shares of the few senders seen so far
	// (620, 520, 340 Gb/s ... then 12.7): the early ones finish at once
	// and the rest stay paced at C/63 until the hints that rise reach
	// them after their last packet (99% of the bytes sent at 25.4 us
	// against RoCEv2's 21.0). The sender's budget (a NIC's connections
	// pace at most at its capacity together, max-min over their hints)
	// takes the second to 34.7, 35.5, 35.7 us (seeds 1-3; the first
	// 39.6-39.8): 0.91, 0.92, 0.90x. What is left of the first is its
	// first round trip: the first 15 dialers' grants lapse (their
	// SYN_ACKs came 9 us, more than two handshake RTTs, before the
	// operation starts) and the later dialers were granted nothing (the
	// first dialer's grant of the whole capacity still outstanding), so
	// every connection sends one packet and waits; the 4,032 first
	// packets queue on the planes and the first ACKs come 4.7-9 us after
	// them. The tail is not where the rest goes (seed 1, link telemetry
	// at 1 us, packet captures at h15 and h52): in the second operation
	// the senders' links run at 0.96-1.0 for 22 us from its start (lossless
	// RoCEv2: 21.7 at 1.0) and the operation ends 12.9 us after their last
	// byte (RoCEv2: 12.3; a cross-leaf round trip is 9.4 idle, and
	// RoCEv2's receiver ports still hold ~30 KB then, MetaRoCE's ~15), so
	// the second is 0.9 us behind and the first 6.0, 5.5 of it in its
	// first round trip (the links at 0.1-0.5 from 2.5 to 9.5 us into it).
	// The tail-loss probes are spurious (157, the chunk
	// already there for 117; an ACK queued 5.4 us behind data on its way
	// back, 9.35 us one way against 3.92 idle) but
	// set no operation's end: with every probe timer three times as long
	// the mean operation goes from 37.25 to 37.22 us. Other rules tried
	// (hacks, seed 1): W at 2, 9/8 or 1 x R x base instead of 5/4: 40.57,
	// 37.55, 37.60; a pacer that lets a packet its port delayed give the
	// delay back (at most one gap): 37.88; four unscheduled packets per
	// connection before the first ACK instead of one (incast-unsafe):
	// 36.84 (the first 39.47), the links then idle at 0.15-0.5 for 5 us
	// on the first ACKs' hints, computed by receivers that have seen few
	// of their 63 senders; a connection's last hint x base RTT of bytes
	// sent unpaced: 39.30. With rate hints off the senders' links run at
	// 1.0 from the first post, half of h52's connections have sent their
	// last packet by mid-operation (paced at their hints, all within the
	// last 9 us of sending) and the operations take 32.95 and 33.13 us
	// mean (seeds 1, 3): the rate hints, not the tail-loss probe, cost
	// the all-to-all its lead. With rate hints off MetaRoCE takes 32.3
	// and 33.4 us (1.03x); with the second's restart hints held to 25
	// Gb/s and every connection keeping its planes even it takes 33.7-
	// 34.1 (the first unchanged); with every first grant C/63 as well,
	// 36.4-36.9 and 34.1-34.5 (0.95x): measured with hacks, none a rule
	// yet. A first round trip at the line rate needs a receiver that
	// knows its senders before its first ACKs (grants it can revise), not
	// a later probe or a larger flight. On the tiny bed here (seed 3) the
	// all-to-all's operations take 52.6 and 43.8 us against RoCEv2's
	// 41.5: the first round trip again, and a second whose links run at
	// 0.92 (same-leaf connections hold their window, 12 packets over 6
	// paths, the parts rounded down); all-reduce is 0.985x against the
	// header bytes' 0.988x.
	"TestClaimCollectivesFasterThanRoCEv2": "#27 (MetaRoCE's header and ACK bytes; all-to-all below full scale)",
	// 63-to-1 at 1% loss per link: 20 packets per sender per window make
	// ±10% two packets, and two losses of one sender unrepaired at once
	// (a repair cannot arrive within two RTTs of the first send at 0.42
	// packets per RTT) already miss it; the test measures the floor.
	"TestClaimIncast63SettlesAtLoss": "#27 (63:1 at 1% loss: two packets of tolerance)",
}

// claim collects a claim test's failures and reports them at the end:
// as errors, or as a skip for a known miss.
type claim struct {
	t    *testing.T
	miss []string
}

func newClaim(t *testing.T) *claim {
	c := &claim{t: t}
	t.Cleanup(c.done)
	return c
}

// Errorf records a miss.
func (c *claim) Errorf(format string, args ...any) {
	c.miss = append(c.miss, fmt.Sprintf(format, args...))
}

func (c *claim) done() {
	t := c.t
	if t.Failed() || t.Skipped() {
		return
	}
	issue, known := knownMisses[t.Name()]
	switch {
	case len(c.miss) == 0 && known:
		t.Logf("the claim holds: delete its knownMisses entry (%s)", issue)
	case len(c.miss) == 0:
	case known:
		testenv.KnownMiss(t, "experiment", issue, "%s", strings.Join(c.miss, "\n"))
	default:
		t.Error(strings.Join(c.miss, "\n"))
	}
}

// claimRows runs cases with every claim seed, in parallel.
func claimRows[C, R any](t *testing.T, cases []C, point func(C, uint64) Point, measure func(C, Point) (R, error)) []R {
	t.Helper()
	cfg := Config{Seed: claimSeeds[0], Seeds: len(claimSeeds)}.withDefaults()
	cfg.drive = localDriver{cfg: cfg, name: t.Name()}
	rows, err := runCases(cfg, t.Name(), cases, point, measure)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// localDriver runs every point in the test's process, cfg.Jobs at a time
// (the claims run cases no experiment plans on their own).
type localDriver struct {
	cfg  Config
	name string
}

func (d localDriver) rows(pts []Point, run func(i int) ([]byte, error)) ([][]byte, error) {
	jobs := make([]job[[]byte], len(pts))
	for i, p := range pts {
		jobs[i] = job[[]byte]{exp: d.name, name: p.Command(), run: func() ([]byte, error) { return run(i) }}
	}
	return runJobs(d.cfg, jobs)
}

// lossFractions runs a side at 0% and at loss% on the loss-sweep beds and
// returns goodput(loss)/goodput(0) per seed.
func lossFractions(t *testing.T, sd side, loss float64) []float64 {
	t.Helper()
	// The run length of the published figures (loss-sweep, full scale).
	p := lossParams{duration: lossSweepParams(Full).duration}
	rows := claimRows(t, []lossCase{{0, sd}, {loss, sd}}, p.point, lossRun)
	n := len(claimSeeds)
	var out []float64
	for i := 0; i < n; i++ {
		base, lossy := rows[i], rows[n+i]
		if lossy.Error != "" || !lossy.DataOK {
			t.Errorf("%v at %g%%, seed %d: data ok %v, %s", sd, loss, lossy.Seed, lossy.DataOK, lossy.Error)
		}
		out = append(out, lossy.GoodputGbps/base.GoodputGbps)
	}
	return out
}

func TestClaimMetaRoCEGoodputAt1PctLoss(t *testing.T) {
	ck := newClaim(t)
	for i, f := range lossFractions(t, metaroceLossy, 1) {
		if f < 0.86 {
			ck.Errorf("seed %d: MetaRoCE keeps %.1f%% of its loss-free goodput at 1%% loss; the seeds claim ~86%%", claimSeeds[i], 100*f)
		}
	}
}

func TestClaimMetaRoCEUsefulAt10PctLoss(t *testing.T) {
	ck := newClaim(t)
	for i, f := range lossFractions(t, metaroceLossy, 10) {
		if f < 0.5 {
			ck.Errorf("seed %d: MetaRoCE keeps %.1f%% of its loss-free goodput at 10%% loss; want useful bandwidth (more than half)", claimSeeds[i], 100*f)
		}
	}
}

func TestClaimRoCEv2CollapsesAt1PctLoss(t *testing.T) {
	ck := newClaim(t)
	for _, sd := range []side{rocev2Lossy, rocev2Lossless} {
		for i, f := range lossFractions(t, sd, 1) {
			if f >= 0.5 {
				ck.Errorf("seed %d: RoCEv2 (%s) keeps %.1f%% of its loss-free goodput at 1%% loss; go-back-N should collapse below half", claimSeeds[i], sd.fabric(), 100*f)
			}
		}
	}
}

// TestClaimModernRoCEv2DoesNotCollapse says plainly where the seeds'
// "RoCEv2 collapses at 1% loss" stops: RoCEv2 with the loss recovery of
// current NICs (selective repeat, adaptive retransmission, slow restart;
// beds loss-sweep/modern-P) keeps more than half of its loss-free goodput
// on the same bed, every seed (measured 0.67, 0.81, 0.74 at seeds 1-3;
// go-back-N 0.33, 0.42, 0.32).
// If this fails, the modern baseline collapsed too and the page's claim
// holds against it: change the page, not the threshold.
func TestClaimModernRoCEv2DoesNotCollapse(t *testing.T) {
	ck := newClaim(t)
	for i, f := range lossFractions(t, rocev2Modern, 1) {
		if f < 0.5 {
			ck.Errorf("seed %d: RoCEv2 modern keeps %.1f%% of its loss-free goodput at 1%% loss: it collapses too", claimSeeds[i], 100*f)
		}
	}
}

func TestClaimPlaneScalingLinear(t *testing.T) {
	ck := newClaim(t)
	p := planeScalingParams(Tiny)
	var cases []planeCase
	for _, pl := range []int{1, 4, 8} {
		cases = append(cases, planeCase{pl, 1})
	}
	rows := claimRows(t, cases, p.point, func(c planeCase, pt Point) (PlaneRow, error) { return planeRun(p, c, pt) })
	n := len(claimSeeds)
	for i := 0; i < n; i++ {
		one := rows[i].SteadyGbps
		for _, row := range []PlaneRow{rows[n+i], rows[2*n+i]} {
			ratio := row.SteadyGbps / (float64(row.Planes) * one)
			if ratio < 0.95 || !row.DataOK || row.Errors > 0 {
				ck.Errorf("seed %d, %d planes: %.3f of linear (%.0f vs %.0f Gb/s on one plane), data ok %v, %d errors; want within 5%% of linear",
					row.Seed, row.Planes, ratio, row.SteadyGbps, one, row.DataOK, row.Errors)
			}
		}
	}
}

func TestClaimPlaneFailureNoApplicationErrors(t *testing.T) {
	ck := newClaim(t)
	p := planeFailureParams(Tiny)
	rows := claimRows(t, []side{metaroceLossy}, p.point, func(sd side, pt Point) (FailureRow, error) { return failureRun(p, sd, pt) })
	for _, row := range rows {
		if row.Errors != 0 || row.Error != "" || !row.DataOK {
			ck.Errorf("seed %d: %d application errors (%s), data ok %v; want none when a plane fails", row.Seed, row.Errors, row.Error, row.DataOK)
		}
		if row.AfterFraction < 0.9 {
			ck.Errorf("seed %d: goodput after the failure %.1f%% of the surviving planes' capacity, want >= 90%%", row.Seed, 100*row.AfterFraction)
		}
	}
}

func TestClaimIncastSettlesInTwoRTTs(t *testing.T) {
	ck := newClaim(t)
	p := incastParams{duration: 500 * sim.Microsecond, size: 64 << 10, qd: 16}
	c := incastCase{lab: "incast/long-lossy", leaves: 2, perLeaf: 8, n: 8, side: metaroceLossy}
	rows := claimRows(t, []incastCase{c}, p.point, func(c incastCase, pt Point) (IncastRow, error) { return incastRun(p, c, pt) })
	for _, row := range rows {
		if row.ShareRTTPackets < 10 {
			t.Fatalf("the bed gives each sender %.1f packets per RTT: too few to judge ±10%%", row.ShareRTTPackets)
		}
		if row.SettleRTTs < 0 || row.SettleRTTs > 2 {
			ck.Errorf("seed %d: every sender within 10%% of fair share over one-RTT windows from %s on; the seeds claim one or two round trips",
				row.Seed, settleText(row.SettleRTTs))
		}
	}
}

// TestClaimIncast63Settles: the loss-free 63-to-1 MetaRoCE incast on its
// bed (0.4 packets per RTT of fair share each) has every sender within
// ±10% of its fair share of the receiver's link over windows of 20
// packets per sender (48 RTTs) from at most 10 base RTTs on (issue 27's
// target; 13.2 RTTs on every seed when the receiver held its cut for the
// first flight's queue after that queue had drained).
func TestClaimIncast63Settles(t *testing.T) {
	ck := newClaim(t)
	p := incastParams{duration: sim.Millisecond, size: 64 << 10, qd: 16}
	c := incastCase{lab: "incast/lossy", leaves: 4, perLeaf: 16, n: 63, side: metaroceLossy}
	rows := claimRows(t, []incastCase{c}, p.point, func(c incastCase, pt Point) (IncastRow, error) { return incastRun(p, c, pt) })
	for _, row := range rows {
		if row.WideSettleRTTs < 0 || row.WideSettleRTTs > 10 {
			ck.Errorf("seed %d: every sender within 10%% of fair share over %.2f-RTT windows from %s on, want <= 10 RTTs",
				row.Seed, row.WideWindowRTTs, settleText(row.WideSettleRTTs))
		}
	}
}

func settleText(rtts float64) string {
	if rtts < 0 {
		return "never"
	}
	return fmt.Sprintf("%.2f RTTs", rtts)
}

func TestClaimCollectivesFasterThanRoCEv2(t *testing.T) {
	ck := newClaim(t)
	p := collectivesParams(Tiny)
	var cases []collCase
	for _, n := range []workload.Name{workload.AllReduce, workload.AllToAll} {
		cases = append(cases, collCase{n, 0, metaroceLossy}, collCase{n, 0, rocev2Lossless},
			collCase{n, 1, metaroceLossy}, collCase{n, 1, rocev2Lossy}, collCase{n, 1, rocev2Lossless})
	}
	rows := claimRows(t, cases, p.point, collectiveRun)
	algbw := map[string]float64{}
	for _, r := range rows {
		algbw[fmt.Sprint(r.Collective, r.LossPct, r.Transport, r.Fabric, r.Seed)] = r.AlgBWGbps
		if r.Transport == "metaroce" && (r.Error != "" || !r.DataOK) {
			ck.Errorf("MetaRoCE %s at %g%%, seed %d: data ok %v, %s", r.Collective, r.LossPct, r.Seed, r.DataOK, r.Error)
		}
	}
	for _, n := range []workload.Name{workload.AllReduce, workload.AllToAll} {
		for _, c := range []struct {
			loss float64
			fab  string
		}{{0, FabricLossless}, {1, FabricLossy}, {1, FabricLossless}} {
			for _, seed := range claimSeeds {
				mr := algbw[fmt.Sprint(n, c.loss, "metaroce", FabricLossy, seed)]
				ro := algbw[fmt.Sprint(n, c.loss, "rocev2", c.fab, seed)]
				if !(mr > ro) {
					ck.Errorf("%s at %g%% loss, seed %d: MetaRoCE %.2f Gb/s, RoCEv2 (%s) %.2f Gb/s; the seeds claim MetaRoCE is faster",
						n, c.loss, seed, mr, c.fab, ro)
				}
			}
		}
	}
}

// TestClaimAllToAllManyPeers: loss-free all-to-all where every host has
// many peers on 8 planes, as on the results page's 64-host bed: each
// connection's window is a few packets spread over its paths, and the
// queues differ between planes. The tiny bed above (4 hosts, 2 planes)
// cannot show this: loss detection that takes such queueing for loss
// (#27: 0.59x on the page, 4,364 retransmissions at 0% loss) passed it.
// 32 hosts x 8 planes, 4 MiB: MetaRoCE 433.96 Gb/s against lossless
// RoCEv2's 441.37 (seed 1) before the measured lateness, 467.48 after;
// 522.01, 522.91, 526.99 (seeds 1-3, 1.18-1.21x) with the active paths
// capped by the window (each connection's few packets on a few of its
// 64 paths, AckEvery packets each).
func TestClaimAllToAllManyPeers(t *testing.T) {
	ck := newClaim(t)
	p := collectivesParams(Tiny)
	p.alltoall = 4 << 20
	point := func(c collCase, seed uint64) Point {
		pt := p.point(c, seed)
		pt.WhatIf.Set = []string{"topology.leafspine.planes=8", "topology.leafspine.leaves=4", "topology.leafspine.hosts_per_leaf=8"}
		return pt
	}
	cases := []collCase{{workload.AllToAll, 0, metaroceLossy}, {workload.AllToAll, 0, rocev2Lossless}}
	rows := claimRows(t, cases, point, collectiveRun)
	n := len(claimSeeds)
	for i := 0; i < n; i++ {
		mr, ro := rows[i], rows[n+i]
		t.Logf("seed %d: MetaRoCE %.2f Gb/s (%d retransmissions, %d timeouts), RoCEv2 lossless %.2f Gb/s: %.3fx",
			mr.Seed, mr.AlgBWGbps, mr.Retransmits, mr.Timeouts, ro.AlgBWGbps, mr.AlgBWGbps/ro.AlgBWGbps)
		if mr.Error != "" || !mr.DataOK || !(mr.AlgBWGbps > ro.AlgBWGbps) {
			ck.Errorf("seed %d: MetaRoCE %.2f Gb/s (data ok %v, %s), lossless RoCEv2 %.2f Gb/s; the seeds claim MetaRoCE is faster",
				mr.Seed, mr.AlgBWGbps, mr.DataOK, mr.Error, ro.AlgBWGbps)
		}
	}
}

// TestClaimRoCEv2HoldsCongestedLinksWithPFC: the baseline as deployed —
// PFC and DCQCN — keeps a 2:1 oversubscribed uplink and an 8:1 incast's
// receiver link busy without a drop, as ns-3's DCQCN model does.
func TestClaimRoCEv2HoldsCongestedLinksWithPFC(t *testing.T) {
	ck := newClaim(t)
	p := congestionParamsFor(Tiny)
	var cases []congestionCase
	for _, c := range p.cases {
		if c.side == rocev2Lossless {
			cases = append(cases, c)
		}
	}
	rows := claimRows(t, cases, p.point, func(c congestionCase, pt Point) (CongestionRow, error) { return congestionRun(p, c, pt) })
	for _, row := range rows {
		if row.Utilization < 0.9 || row.QueueDrops != 0 || row.Error != "" {
			ck.Errorf("%s, seed %d: %.1f%% of the bottleneck, %d drops, %d pauses, %s; want >= 90%% and no drops",
				row.Pattern, row.Seed, 100*row.Utilization, row.QueueDrops, row.PFCPauses, row.Error)
		}
	}
}

// TestClaimPFCIncastIsLossless: a loss-free 63-to-1 RoCEv2 incast on the
// PFC bed runs to completion with no drop, and PFC says how often it
// paused.
func TestClaimPFCIncastIsLossless(t *testing.T) {
	ck := newClaim(t)
	p := incastParams{duration: 300 * sim.Microsecond, size: 64 << 10, qd: 16}
	c := incastCase{lab: "incast/pfc", leaves: 4, perLeaf: 16, n: 63, side: rocev2Lossless}
	rows := claimRows(t, []incastCase{c}, p.point, func(c incastCase, pt Point) (IncastRow, error) { return incastRun(p, c, pt) })
	for _, row := range rows {
		if row.QueueDrops != 0 || row.PFCPauses == 0 || row.Error != "" || !row.DataOK || math.IsNaN(row.Utilization) {
			ck.Errorf("seed %d: %d drops, %d pauses, data ok %v, %s; want no drops, some pauses, the run complete",
				row.Seed, row.QueueDrops, row.PFCPauses, row.DataOK, row.Error)
		}
	}
}
