package metaroce

import (
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// TestTailProbeMovesPacer: a tail-loss probe goes out at once (the pacer
// does not hold it), but one that carries a chunk loads the receiver like
// any data packet, so it moves the pacer: the next data packet waits the
// probe's gap at R. (A probe with data that left the pacer alone let a
// connection paced at its share send a chunk more per probe interval than
// the receiver gave it.) A payload-free probe does not move it.
func TestTailProbeMovesPacer(t *testing.T) {
	for _, c := range []struct {
		name     string
		size     int                        // the WRITE: 512 KiB leaves chunks to cut, 32 KiB none
		prepare  func(mc *Conn, p *sndPath) // what the path's probe will be
		wantData bool
	}{
		{"new chunk", 512 << 10, func(mc *Conn, p *sndPath) {}, true},
		{"newest chunk again", 32 << 10, func(mc *Conn, p *sndPath) {}, true},
		{"lost psn resent", 512 << 10, func(mc *Conn, p *sndPath) {
			mc.s.inflight -= p.sb.markLost(p.sb.una)
			mc.flagPath(p)
		}, true},
		{"bare probe (a second one)", 32 << 10, func(mc *Conn, p *sndPath) { p.tlps = 2 }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLab(t, transporttest.Config{Seed: 1}, Options{})
			if err := l.ca.PostSend(write(1, 0, addrRW, addrRW+0x80000, c.size)); err != nil {
				t.Fatal(err)
			}
			mc := metaConn(l.ca)
			// Run until the connection has measured a data RTT and a path
			// holds data: its probe then carries a chunk.
			var p *sndPath
			if !l.runUntil(10*sim.Millisecond, func() bool {
				if !mc.s.dataRTT {
					return false
				}
				if _, _, _, left := mc.nextChunkSize(); left != (c.size > 64<<10) {
					return false
				}
				for i := range mc.s.paths {
					if q := &mc.s.paths[i]; q.state == PathActive && q.sb.inflight > 0 {
						p = q
						return true
					}
				}
				return false
			}) {
				t.Fatal("no path with data in flight after a data RTT")
			}
			mc.now = l.net.Loop.Now()
			mc.s.hint = mc.lineBytes / 10 // paced at a tenth of the line
			if r := mc.paceRate(); r >= mc.lineBytes {
				t.Fatalf("pace rate %.3g not below the line's %.3g", r, mc.lineBytes)
			}
			mc.s.pacer.next = mc.now
			c.prepare(mc, p)
			p.probeWant = true
			mc.flagPath(p)
			b := make([]byte, mc.mss+wire.MaxOverhead)
			n, _ := mc.transmitProbe(p.plane(mc.cfg.Ports), b)
			if n == 0 {
				t.Fatal("no probe sent")
			}
			if data := n > wire.DataSize+wire.TrailerSize; data != c.wantData {
				t.Fatalf("probe of %d bytes: carries data %v, want %v", n, data, c.wantData)
			}
			until, wait := mc.s.pacer.wait(mc.now)
			if wait != c.wantData {
				t.Errorf("after a %d-byte probe the next data packet waits %v (until %v), want a wait %v", n, wait, until-mc.now, c.wantData)
			}
			if c.wantData {
				if gap := sim.Time(float64(n+ipUDPOverhead) / mc.paceRate() * float64(sim.Second)); until-mc.now != gap {
					t.Errorf("wait %v, want the probe's gap at R %v", until-mc.now, gap)
				}
			}
		})
	}
}
