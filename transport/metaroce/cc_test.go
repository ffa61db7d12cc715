package metaroce

import (
	"math"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
)

// TestDCTCP runs the controller over sequences of ACK records and checks
// m, alpha and the cuts it reported: additive increase per srtt of time,
// a cut by (1 - alpha/2) at most once per latest RTT, none while the peer
// is busy, the floor minMult, and alpha's update once per round.
func TestDCTCP(t *testing.T) {
	const g = 1.0 / 16
	const rtt = 100
	type step struct {
		now sim.Time
		a   ccSample
	}
	ack := func(now sim.Time, acked, rx, ce int) step {
		return step{now, ccSample{acked: acked, rx: rx, ce: ce, srtt: rtt, latest: rtt}}
	}
	for _, tc := range []struct {
		name  string
		start dctcp
		steps []step
		mult  float64
		alpha float64
		cuts  int
	}{
		{"fresh, unmarked ACK at m = 1: no growth past 1", newDCTCP(), []step{ack(10, 1, 1, 0)}, 1, alpha0, 0},
		{"additive increase: 1/16 per srtt of time", dctcp{mult: 0.5, alpha: alpha0, roundStart: 1000},
			[]step{ack(rtt, 1, 1, 0), ack(3*rtt, 1, 1, 0)}, 0.5 + 3.0/16, alpha0, 0},
		{"increase stops at 1", dctcp{mult: 0.9, alpha: alpha0, roundStart: 1 << 30},
			[]step{ack(16*rtt, 1, 1, 0)}, 1, alpha0, 0},
		{"ACK of nothing new does not grow m", dctcp{mult: 0.5, alpha: alpha0, roundStart: 1000},
			[]step{ack(5*rtt, 0, 0, 0)}, 0.5, alpha0, 0},
		{"a mark cuts by (1 - alpha/2)", dctcp{mult: 1, alpha: 0.5, roundStart: 1000},
			[]step{ack(10, 1, 1, 1)}, 0.75, 0.5, 1},
		{"a second mark within the latest RTT does not cut again", dctcp{mult: 1, alpha: 0.5, roundStart: 1000},
			[]step{ack(10, 1, 1, 1), ack(10+rtt-1, 1, 1, 1)}, 0.75, 0.5, 1},
		{"a mark a latest RTT later cuts again", dctcp{mult: 1, alpha: 0.5, roundStart: 1000},
			[]step{ack(10, 1, 1, 1), ack(10+rtt, 1, 1, 1)}, 0.75 * 0.75, 0.5, 2},
		{"no cut while the peer is busy", dctcp{mult: 1, alpha: 0.5, roundStart: 1000},
			[]step{{10, ccSample{acked: 1, rx: 1, ce: 1, srtt: rtt, latest: rtt, peerBusy: true}}}, 1, 0.5, 0},
		{"m never below minMult", dctcp{mult: minMult, alpha: 1, roundStart: 1000},
			[]step{ack(10, 1, 1, 1)}, minMult, 1, 1},
		{"a round folds its marked fraction into alpha", dctcp{mult: 1, alpha: 0.25},
			// round 0..rtt: 4 received, 2 marked (the first record cuts m
			// to 7/8); the record at rtt grows m by (rtt-1)/rtt/16 and ends
			// the round: alpha (1-g)0.25 + g 0.5.
			[]step{ack(1, 2, 2, 2), ack(rtt, 2, 2, 0)}, 0.875 + (rtt-1.0)/rtt/16, (1-g)*0.25 + g*0.5, 1},
		{"an unmarked round lowers alpha", dctcp{mult: 1, alpha: 0.5},
			[]step{ack(1, 2, 2, 0), ack(rtt, 2, 2, 0)}, 1, (1 - g) * 0.5, 0},
		{"a round without packets leaves alpha", dctcp{mult: 1, alpha: 0.5},
			[]step{ack(rtt, 0, 0, 0)}, 1, 0.5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.start
			cuts := 0
			for _, s := range tc.steps {
				before := d
				k, cut := d.onAck(s.now, s.a, g)
				if cut {
					cuts++
					if k.from != before.mult || k.to != d.mult || k.alpha != before.alpha {
						t.Errorf("cut at %d reported %+v; m %v -> %v at alpha %v", s.now, k, before.mult, d.mult, before.alpha)
					}
				}
			}
			if math.Abs(d.mult-tc.mult) > 1e-12 || math.Abs(d.alpha-tc.alpha) > 1e-12 || cuts != tc.cuts {
				t.Errorf("m %v alpha %v cuts %d; want m %v alpha %v cuts %d", d.mult, d.alpha, cuts, tc.mult, tc.alpha, tc.cuts)
			}
		})
	}
}

// TestDCTCPLimits checks R and W: R is the reference rate times m, so at
// most the reference (the line rate or the hint) and at least minMult of
// it; W is 5/4 R x base RTT / (1 - loss), loss capped at 0.5, plus 2 MSS.
func TestDCTCPLimits(t *testing.T) {
	const ref = 12.5e9 // 100 Gb/s in bytes/s
	for _, tc := range []struct {
		name   string
		mult   float64
		base   sim.Time
		loss   float64
		rate   float64
		window int
	}{
		{"full rate", 1, 10 * sim.Microsecond, 0, ref, 156250 + 2*4096},
		{"half rate", 0.5, 10 * sim.Microsecond, 0, ref / 2, 78125 + 2*4096},
		{"floor", minMult, 10 * sim.Microsecond, 0, ref * minMult, 152 + 2*4096},
		{"loss widens the window", 1, 10 * sim.Microsecond, 0.2, ref, 195312 + 2*4096},
		{"loss counts at most 0.5", 1, 10 * sim.Microsecond, 0.9, ref, 312500 + 2*4096},
		{"no base RTT: two packets", 1, 0, 0, ref, 2 * 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := dctcp{mult: tc.mult}
			r := d.rate(ref)
			if r != tc.rate || r > ref || r < ref*minMult {
				t.Errorf("rate %v, want %v within [ref x minMult, ref]", r, tc.rate)
			}
			if w := d.window(r, tc.base, tc.loss, 4096); w != tc.window {
				t.Errorf("window %d, want %d", w, tc.window)
			}
		})
	}
}
