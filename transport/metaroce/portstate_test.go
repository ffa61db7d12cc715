package metaroce

import (
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// TestLocalPortDown: when the NIC says one of its ports went down, the
// paths on it give up what they hold at once (it moves to paths that
// deliver), take no new data and time nothing out; the WRITE completes
// on the other planes with no timeout. Without the port state the dead
// plane's paths kept their chunks and took new data until their probes
// went unanswered, and then timed out (spec §10).
func TestLocalPortDown(t *testing.T) {
	const ports, dead = 4, 1
	l := newLab(t, transporttest.Config{Seed: 1, Ports: ports, LinkRate: 100e9, LinkDelay: sim.Microsecond}, Options{})
	if err := l.ca.PostSend(write(1, 0, addrRW, addrRW+0x80000, 256<<10)); err != nil {
		t.Fatal(err)
	}
	mc := metaConn(l.ca)
	onDead := func() (held int, sent uint64) {
		for i := range mc.s.paths {
			if p := &mc.s.paths[i]; p.plane(ports) == dead {
				sent += p.st.packets
			}
		}
		for dsn := mc.s.dsnBase; dsn != mc.s.dsnNext; dsn++ {
			if ch := mc.chunk(dsn); ch.where == chunkOnPath && mc.s.paths[ch.path].plane(ports) == dead {
				held++
			}
		}
		return held, sent
	}
	if !l.runUntil(sim.Millisecond, func() bool { h, _ := onDead(); return h >= 2 }) {
		t.Fatal("the dead plane's paths never held two chunks")
	}
	l.a.SetLinkUp(dead, false) // the harness tells the connection, as a NIC does
	held, sent := onDead()
	if held != 0 {
		t.Errorf("%d chunks still on the dead port's paths after it went down, want 0 (moved at once)", held)
	}
	if !l.runUntil(10*sim.Millisecond, func() bool { return len(l.ca.Completions) == 1 }) {
		t.Fatal("the WRITE did not complete")
	}
	if wc := l.ca.Completions[0]; wc.Status != transport.StatusOK {
		t.Fatalf("WRITE completed with %v", wc.Status)
	}
	if _, after := onDead(); after != sent {
		t.Errorf("%d packets sent on the dead port's paths after it went down, want none", after-sent)
	}
	if mc.st.timeouts != 0 {
		t.Errorf("%d path timeouts, want none: the port state moved the chunks", mc.st.timeouts)
	}
	// The port comes back: its paths probe, and carry data again once a
	// probe is answered.
	l.a.SetLinkUp(dead, true)
	if err := l.ca.PostSend(write(2, 0, addrRW, addrRW+0x80000, 256<<10)); err != nil {
		t.Fatal(err)
	}
	if !l.runUntil(10*sim.Millisecond, func() bool { return len(l.ca.Completions) == 2 }) {
		t.Fatal("the second WRITE did not complete")
	}
	if _, again := onDead(); again == sent {
		t.Error("nothing sent on the port's paths after it came back")
	}
}
