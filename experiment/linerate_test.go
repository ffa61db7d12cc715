package experiment

import (
	"sort"
	"testing"

	"github.com/mrlab/mrlab/workload"
)

// TestTargetAllToAllLineRate: the collectives claim's small bed (4 hosts,
// 2 planes, 1 us links, 1 MiB all-to-all, 2 operations), MetaRoCE on the
// lossy bed against RoCEv2 on the lossless one, at the bed's 100 Gbit/s
// and with every link at 400 and 800 Gbit/s (the what-if
// links.default.rate, as the issue measured it; #27: MetaRoCE loses
// ground as the line rate rises). Measured (seeds 1-3, algbw over
// lossless RoCEv2): 100G 1.072/1.068/0.860, 400G 0.886/0.886/0.768, 800G
// 0.729/0.718/0.662. The floors are those less ~3%, so a regression at
// the high rates fails here.
//
// Where it goes (logged: of two operations the p50 is the faster, the
// second here, and the max the first; seed 1): from the second operation on MetaRoCE is
// as fast as RoCEv2 or faster at every rate (44.0 / 16.6 / 12.2 us at
// 100/400/800G against RoCEv2's 51.4 / 18.9 / 13.4 per operation); the
// first costs 8.0 / 9.3 / 12.4 us more than the second, about one
// base round trip (8.3 us on 4 hops of 1 us), a constant in time, so its
// share of the figure grows with the line rate. It is the first round
// trip (spec §9, first flight): every acceptor grants its first dialer
// the whole capacity and the later ones nothing, so they send one packet
// and wait for the first ACK, although all three dialed before any data.
// The fabric's byte settings are not it: scaling the queue, the ECN step
// (MetaRoCE) and RED and PFC thresholds (RoCEv2) with the rate changes
// neither side's figure on this bed.
func TestTargetAllToAllLineRate(t *testing.T) {
	allToAllLineRate(t, nil, []lineRateFloor{{"100gbit", 1.03, 0.83}, {"400gbit", 0.86, 0.74}, {"800gbit", 0.69, 0.64}})
}

// TestAllToAllRevisedGrants: TestTargetAllToAllLineRate with revised
// first grants (transports.metaroce.revise_first_grant, spec §9 first
// flight): every acceptor lowers its outstanding grants to the share of
// the dialers so far and tells them, so each dialer of the all-to-all
// sends its share's first flight instead of one packet and a round trip.
// Measured (seeds 1-3, algbw over lossless RoCEv2): 100G
// 1.147/1.146/0.922, 400G 1.056/1.066/0.974, 800G 1.086/1.085/0.973
// (against 1.072/1.068/0.860, 0.886/0.886/0.768, 0.729/0.718/0.662
// without); the first operation takes 45.6/17.9/12.5 us against the
// second's 44.1/17.8/12.2 at 100/400/800G (seed 1). Without the first
// interval's stretch (cc.go, pace) 400G was 1.135/1.136/0.987 here but
// the 64-host bed lost at 100G. The floors are those less ~3%.
func TestAllToAllRevisedGrants(t *testing.T) {
	allToAllLineRate(t, []string{reviseFirstGrant}, []lineRateFloor{{"100gbit", 1.11, 0.89}, {"400gbit", 1.02, 0.94}, {"800gbit", 1.05, 0.94}})
}

const reviseFirstGrant = "transports.metaroce.revise_first_grant=on"

// lineRateFloor is a line rate's median and every-seed floor of
// MetaRoCE's all-to-all algbw over lossless RoCEv2's.
type lineRateFloor struct {
	rate          string
	median, floor float64
}

// allToAllLineRate runs the collectives claim's small bed's all-to-all at
// each rate of floors, MetaRoCE (with the what-if settings set) against
// lossless RoCEv2, and checks the ratios against the floors.
func allToAllLineRate(t *testing.T, set []string, floors []lineRateFloor) {
	p := collectivesParams(Tiny)
	for _, tc := range floors {
		point := func(c collCase, seed uint64) Point {
			pt := p.point(c, seed)
			pt.WhatIf.Set = []string{"links.default.rate=" + tc.rate}
			if c.side == metaroceLossy {
				pt.WhatIf.Set = append(pt.WhatIf.Set, set...)
			}
			return pt
		}
		cases := []collCase{{workload.AllToAll, 0, metaroceLossy}, {workload.AllToAll, 0, rocev2Lossless}}
		rows := claimRows(t, cases, point, collectiveRun)
		n := len(claimSeeds)
		var ratios []float64
		for i := 0; i < n; i++ {
			mr, ro := rows[i], rows[n+i]
			if mr.Error != "" || !mr.DataOK || ro.Error != "" || ro.AlgBWGbps <= 0 {
				t.Fatalf("%s seed %d: MetaRoCE error %q data ok %v, RoCEv2 error %q algbw %.2f", tc.rate, mr.Seed, mr.Error, mr.DataOK, ro.Error, ro.AlgBWGbps)
			}
			r := mr.AlgBWGbps / ro.AlgBWGbps
			ratios = append(ratios, r)
			t.Logf("%s seed %d: MetaRoCE %.2f Gb/s (second/first operation %.2f/%.2f us), RoCEv2 lossless %.2f Gb/s: %.3fx",
				tc.rate, mr.Seed, mr.AlgBWGbps, mr.OpTimeP50.Micros(), mr.OpTimeMax.Micros(), ro.AlgBWGbps, r)
			if r < tc.floor {
				t.Errorf("%s seed %d: %.3fx lossless RoCEv2, want >= %.2fx", tc.rate, mr.Seed, r, tc.floor)
			}
		}
		sort.Float64s(ratios)
		if med := ratios[len(ratios)/2]; med < tc.median {
			t.Errorf("%s: median %.3fx lossless RoCEv2, want >= %.2fx", tc.rate, med, tc.median)
		}
	}
}
