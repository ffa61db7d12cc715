package metaroce

import (
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// TestRepathBaseFollowsBurst: the losses of a first flight (130 packets
// on each of 16 paths, 2% lost on every path alike) are all found within
// one round trip, one path after another. The typical path's rate must
// follow the connection's loss rate as it climbs, so no path moves; a gray
// path among them (20 of its 130 lost) still does. With the base held for
// a smoothed RTT from the first loss (q = 1/2080) every path moved at its
// third loss.
func TestRepathBaseFollowsBurst(t *testing.T) {
	for _, c := range []struct {
		name      string
		gray      int // extra losses on path 0
		wantMoves int
	}{{"even", 0, 0}, {"gray path 0", 17, 1}} {
		t.Run(c.name, func(t *testing.T) {
			l := newLab(t, transporttest.Config{}, Options{})
			mc := metaConn(l.ca)
			mc.ensurePaths()
			s := &mc.s
			if len(s.paths) < 16 {
				t.Fatalf("%d paths", len(s.paths))
			}
			s.srtt = sim.Millisecond
			s.lossSent, s.lossLost = 130*float64(len(s.paths)), 0
			for i := range s.paths {
				mc.use(&s.paths[i])
				s.paths[i].genSent = 130
			}
			gen := func(i int) uint8 { return s.paths[i].gen }
			gens := make([]uint8, len(s.paths))
			for i := range gens {
				gens[i] = gen(i)
			}
			loss := func(i int) {
				s.lossLost++
				mc.noteLosses(&s.paths[i], 1)
			}
			for round := 0; round < 3; round++ {
				for i := range s.paths {
					loss(i)
				}
			}
			for k := 0; k < c.gray && gen(0) == gens[0]; k++ {
				loss(0)
			}
			moved := 0
			for i := range gens {
				if gen(i) != gens[i] {
					moved++
				}
			}
			if moved != c.wantMoves {
				t.Errorf("%d paths moved, want %d (base %.4f, connection loss rate %.4f)",
					moved, c.wantMoves, s.lossBase, mc.lossRate())
			}
		})
	}
}

// TestFirstCreditLeavesWithFlight: the first-flight credit over W is the
// flight's bytes still in flight: bytes acknowledged, declared lost or
// presumed gone all take it down, so once the flight has left, the
// window is W again (a credit that only ACKs reduced outlived a lossy
// flight and left the window unbounded).
func TestFirstCreditLeavesWithFlight(t *testing.T) {
	l := newLab(t, transporttest.Config{}, Options{})
	mc := metaConn(l.ca)
	mc.ensurePaths()
	mc.use(&mc.s.paths[0])
	const flight = 64 * 4096
	for _, c := range []struct {
		name string
		gone func(p *sndPath)
	}{
		{"acknowledged", func(*sndPath) { mc.flightLeft(flight) }},
		{"declared lost", func(p *sndPath) { mc.lossesFound(p, 64, 64, flight) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			mc.s.inflight, mc.ctl.firstCredit = flight, flight
			mc.s.heard = true
			c.gone(&mc.s.paths[0])
			if mc.ctl.firstCredit != 0 {
				t.Errorf("credit %d after the flight left, want 0", mc.ctl.firstCredit)
			}
			mc.s.inflight = 3 * 4096 // resent and new packets
			if got, want := mc.window(), mc.s.window(mc.paceRate(), mc.baseRTT(), mc.lossRate(), mc.mss); got != want {
				t.Errorf("window %d with the flight gone, want W = %d", got, want)
			}
		})
	}
}

// TestFirstFlightCoversFirstACK: a dialer's first flight lasts until its
// first ACK can arrive: the data packets' round trip plus the receiver's
// wait for AckEvery packets. The handshake's small packets cross each
// store-and-forward hop without a data packet's serialization, so a
// flight sized over the handshake's RTT alone (as it was) ran out one
// serialization per hop before the first ACK (2 hops here; 4 on the
// collectives claim bed, 1.3 us at 100 Gbit/s), and the sender idled.
func TestFirstFlightCoversFirstACK(t *testing.T) {
	for _, rate := range []float64{10e9, 100e9, 400e9} {
		l := newLab(t, transporttest.Config{Seed: 1, LinkRate: rate, LinkDelay: 500 * sim.Nanosecond}, Options{})
		c := metaConn(l.ca)
		hs := c.s.srtt
		if hs <= 0 || c.s.hint <= 0 {
			t.Fatalf("%g Gbit/s: handshake RTT %v, first share %v B/s", rate/1e9, hs, c.s.hint)
		}
		// The time the flight lasts at its share (it is paced at it).
		flight := sim.Time(float64(c.firstFlight()) / c.s.hint * float64(sim.Second))
		if err := l.ca.PostSend(write(1, 0, addrRW, addrRW+0x80000, 64<<10)); err != nil {
			t.Fatal(err)
		}
		if !l.runUntil(10*sim.Millisecond, func() bool { return len(l.ca.Completions) > 0 }) {
			t.Fatalf("%g Gbit/s: the write did not complete", rate/1e9)
		}
		gran := c.granularity()
		firstACK := c.s.minRTT + sim.Time(c.opts.AckEvery-1)*gran
		t.Logf("%g Gbit/s: handshake RTT %v, data packets' least RTT %v (a serialization %v); the first ACK %v after the first packet, the flight covers %v",
			rate/1e9, hs, c.s.minRTT, gran, firstACK, flight)
		if flight < firstACK {
			t.Errorf("%g Gbit/s: the first flight covers %v, less than the first ACK's %v", rate/1e9, flight, firstACK)
		}
	}
}
