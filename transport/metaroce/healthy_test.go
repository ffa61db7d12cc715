package metaroce

import (
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// TestPickHealthy: a chunk moved off a path that stopped answering goes to
// a path that was still delivering when the connection last heard from
// its peer, whatever port asks first. When the moved chunks are all the
// connection has outstanding no path has anything to deliver, so none has
// delivered within its PTO of now; judged against now, every port took
// them for its own paths, the dead plane's idle port first and most, and
// they went from one dead path to the next, a probe timeout and a probe
// interval per hop (plane-failure tiny-lossy with first flights over the
// base RTT, seed 1: h3->h1 had nothing acknowledged for 450 us).
func TestPickHealthy(t *testing.T) {
	const ports, dead = 4, 1
	l := newLab(t, transporttest.Config{Seed: 1, Ports: ports, LinkRate: 100e9, LinkDelay: sim.Microsecond}, Options{})
	if err := l.ca.PostSend(write(1, 0, addrRW, addrRW+0x80000, 256<<10)); err != nil {
		t.Fatal(err)
	}
	if !l.runUntil(sim.Millisecond, func() bool { return len(l.ca.Completions) == 1 }) {
		t.Fatal("the WRITE did not complete")
	}
	mc := metaConn(l.ca)
	pto := mc.pto(&mc.s.paths[0])
	last := l.net.Loop.Now() // the connection's last ACK progress
	for _, tc := range []struct {
		name string
		// silent: how long before the connection's last progress the dead
		// plane's paths last delivered; quiet: how long after it now is.
		silent, quiet sim.Time
		never         bool // no path has ever delivered
		// want: whether a path is picked on the dead plane's port and on
		// a live one.
		wantDead, wantLive bool
	}{
		{"busy, every plane answering", 0, 0, false, true, true},
		{"busy, a plane silent for 3 PTOs", 3 * pto, 0, false, false, true},
		{"quiet for 5 PTOs, a plane silent 3 PTOs before", 3 * pto, 5 * pto, false, false, true},
		{"quiet for 5 PTOs, every plane answering then", 0, 5 * pto, false, true, true},
		{"nothing ever delivered", 0, 0, true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mc.s.lastProgress = last
			for i := range mc.s.paths {
				p := &mc.s.paths[i]
				p.lastProgress = last
				if p.plane(ports) == dead {
					p.lastProgress = last - tc.silent
				}
				if tc.never {
					p.lastProgress = 0
				}
			}
			if tc.never {
				mc.s.lastProgress = 0
			}
			mc.now = last + tc.quiet
			for port, want := range map[int]bool{dead: tc.wantDead, 0: tc.wantLive} {
				p := mc.pickHealthy(port, mc.mss)
				if (p != nil) != want {
					t.Errorf("port %d: picked %v, want a path %v", port, p != nil, want)
				}
				if p != nil && p.plane(ports) != port {
					t.Errorf("port %d: picked path %d of plane %d", port, p.id, p.plane(ports))
				}
			}
		})
	}
}
