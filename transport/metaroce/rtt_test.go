package metaroce

import (
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
)

// TestPathRTT feeds sequences of samples to one path's estimator and
// checks RFC 6298's smoothed RTT and variation after them.
func TestPathRTT(t *testing.T) {
	for _, tc := range []struct {
		name              string
		samples           []sim.Time
		wantSRTT, wantVar sim.Time
	}{
		{"none", nil, 0, 0},
		{"first sample: srtt r, var r/2", []sim.Time{100}, 100, 50},
		{"steady", []sim.Time{100, 100}, 100, 37}, // var (3*50+0)/4
		{"rise", []sim.Time{100, 180}, 110, 57},   // srtt (700+180)/8, var (150+80)/4
		{"fall", []sim.Time{800, 160}, 720, 460},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e pathRTT
			for _, r := range tc.samples {
				e.rttSample(r)
			}
			if e.hasRTT != (len(tc.samples) > 0) || e.srtt != tc.wantSRTT || e.rttvar != tc.wantVar {
				t.Errorf("after %v: has %v srtt %d var %d, want srtt %d var %d", tc.samples, e.hasRTT, e.srtt, e.rttvar, tc.wantSRTT, tc.wantVar)
			}
		})
	}
}

// TestRTTEstimator checks the connection's estimator: the first data
// sample replaces the handshake's, the base RTT is the minimum of
// full-size samples once there is one, and the latest sample is kept.
func TestRTTEstimator(t *testing.T) {
	type in struct {
		hs   sim.Time // a handshake RTT, if > 0 (else a data sample)
		r    sim.Time
		full bool
	}
	for _, tc := range []struct {
		name                         string
		in                           []in
		srtt, rttvar, recent, minRTT sim.Time
		data, full                   bool
	}{
		{"handshake only", []in{{hs: 40}}, 40, 20, 40, 0, false, false},
		{"second handshake ignored", []in{{hs: 40}, {hs: 90}}, 40, 20, 40, 0, false, false},
		{"first data sample replaces the handshake", []in{{hs: 40}, {r: 100, full: true}}, 100, 50, 100, 100, true, true},
		{"handshake after data ignored", []in{{r: 100, full: true}, {hs: 10}}, 100, 50, 100, 100, true, true},
		{"min over full samples", []in{{r: 100, full: true}, {r: 80, full: true}, {r: 120, full: true}},
			// srtt 100 -> 97 (700+80)/8=97 -> (679+120)/8=99; var 50 -> (150+20)/4=42 -> (126+23)/4=37
			99, 37, 120, 80, true, true},
		{"small packets do not lower the base once a full one is measured",
			[]in{{r: 100, full: true}, {r: 60}}, 95, 47, 60, 100, true, true},
		{"a first full sample resets the small packets' base",
			[]in{{r: 60}, {r: 50}, {r: 100, full: true}},
			// srtt 60 -> (420+50)/8=58 -> (406+100)/8=63; var 30 -> (90+10)/4=25 -> (75+42)/4=29
			63, 29, 100, 100, true, true},
		{"small packets lower the base before any full one", []in{{r: 60}, {r: 50}}, 58, 25, 50, 50, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e rttEstimator
			for _, s := range tc.in {
				if s.hs > 0 {
					e.handshake(s.hs)
				} else {
					e.sample(s.r, s.full)
				}
			}
			got := [4]sim.Time{e.srtt, e.rttvar, e.recentRTT, e.minRTT}
			want := [4]sim.Time{tc.srtt, tc.rttvar, tc.recent, tc.minRTT}
			if got != want || e.dataRTT != tc.data || e.fullRTT != tc.full {
				t.Errorf("srtt, var, recent, min = %v data %v full %v; want %v data %v full %v", got, e.dataRTT, e.fullRTT, want, tc.data, tc.full)
			}
		})
	}
}

// TestRTTTimers checks the timer RTT and the PTO's base: the larger of the
// path's and the connection's RTT, at least the latest sample, the
// connection's variation, initialSerializations granules before a data
// sample, and no PTO without any RTT.
func TestRTTTimers(t *testing.T) {
	const g = 10
	for _, tc := range []struct {
		name   string
		conn   rttEstimator
		path   pathRTT
		rtt, v sim.Time
		pto    sim.Time
		ok     bool
	}{
		{"nothing measured", rttEstimator{}, pathRTT{}, initialSerializations * g, 0, initialSerializations*g + g, true},
		{"handshake only", rttEstimator{srtt: 40, rttvar: 20, recentRTT: 40}, pathRTT{},
			40 + initialSerializations*g, 20, 40 + initialSerializations*g + 80, true},
		{"path slower than the connection", rttEstimator{srtt: 100, rttvar: 5, recentRTT: 90, dataRTT: true},
			pathRTT{srtt: 150, rttvar: 60, hasRTT: true}, 150, 5, 150 + 4*5, true},
		{"latest sample above both", rttEstimator{srtt: 100, rttvar: 30, recentRTT: 200, dataRTT: true},
			pathRTT{srtt: 150, hasRTT: true}, 200, 30, 200 + 120, true},
		{"path without samples", rttEstimator{srtt: 100, rttvar: 30, recentRTT: 100, dataRTT: true},
			pathRTT{srtt: 500}, 100, 30, 220, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rtt, v := tc.conn.timerRTT(&tc.path, g)
			if rtt != tc.rtt || v != tc.v {
				t.Errorf("timerRTT = %d, %d; want %d, %d", rtt, v, tc.rtt, tc.v)
			}
			if d, ok := tc.conn.ptoBase(&tc.path, g); d != tc.pto || ok != tc.ok {
				t.Errorf("ptoBase = %d, %v; want %d, %v", d, ok, tc.pto, tc.ok)
			}
		})
	}
	var e rttEstimator
	if _, ok := e.ptoBase(&pathRTT{}, 0); ok {
		t.Error("ptoBase with no RTT and no granularity: ok, want none")
	}
}
