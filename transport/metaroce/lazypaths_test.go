package metaroce

import (
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// Paths are allocated on first use: after a WRITE, its target has no
// sending paths and its source no receiving ones, while both report the
// paths they were built with, with the same figures as if allocated; a
// READ allocates the target's sending paths (it answers with data).
func TestPathsOnFirstUse(t *testing.T) {
	l := newLab(t, transporttest.Config{Seed: 1}, Options{Paths: 16})
	a, b := metaConn(l.ca), metaConn(l.cb)
	if err := l.ca.PostSend(write(7, 0, addrRW, addrRW+0x80000, 65536)); err != nil {
		t.Fatal(err)
	}
	if !l.runUntil(sim.Millisecond, func() bool { return len(l.ca.Completions) == 1 }) {
		t.Fatalf("no completion; stats %+v", a.Stats())
	}
	if a.s.paths == nil || b.s.paths != nil || a.r.paths != nil || b.r.paths == nil {
		t.Errorf("after a WRITE: source paths %d out %d in, target %d out %d in; want 16/0 and 0/16",
			len(a.s.paths), len(a.r.paths), len(b.s.paths), len(b.r.paths))
	}
	if a.Paths() != 16 || b.Paths() != 16 || b.Stats().Paths != 16 {
		t.Errorf("paths reported: source %d, target %d (Stats %d), want 16", a.Paths(), b.Paths(), b.Stats().Paths)
	}
	var lazy, built transport.Stats
	b.ReportStats(&lazy)
	if b.s.paths != nil {
		t.Fatal("reading the figures allocated the paths")
	}
	b.ensurePaths()
	b.ReportStats(&built)
	if diff := cmp.Diff(built, lazy); diff != "" {
		t.Errorf("figures of paths not yet allocated differ from allocated ones (-allocated +lazy):\n%s", diff)
	}

	// Closed, the target forgets the entropies of the paths it never
	// allocated (undo the allocation above).
	b.s.paths = nil
	b.proto.entropy0[b] = make([]uint16, 16)
	l.ca.Close()
	l.run(sim.Millisecond)
	if b.State() != transport.StateClosed || len(b.proto.entropy0) != 0 || b.Paths() != 16 {
		t.Errorf("closed target: state %v, %d connections' entropies kept, %d paths reported", b.State(), len(b.proto.entropy0), b.Paths())
	}

	// A READ of a's memory: a answers with data on its paths.
	l2 := newLab(t, transporttest.Config{Seed: 2}, Options{Paths: 16})
	rd := &transport.WorkRequest{ID: 9, Op: transport.OpRead, RemoteAddr: addrRW, RKey: keyRW, NumSGE: 1}
	rd.SGL[0] = transport.SGE{Addr: addrRcv, Len: 65536, LKey: keyRecv}
	if err := l2.cb.PostSend(rd); err != nil {
		t.Fatal(err)
	}
	if !l2.runUntil(sim.Millisecond, func() bool { return len(l2.cb.Completions) == 1 }) {
		t.Fatal("READ did not complete")
	}
	if wc := l2.cb.Completions[0]; wc.Status != transport.StatusOK {
		t.Errorf("READ: %+v", wc)
	}
	if a2 := metaConn(l2.ca); a2.s.paths == nil || a2.st.dataPackets == 0 {
		t.Errorf("READ responder: %d sending paths, %d data packets sent", len(a2.s.paths), a2.st.dataPackets)
	}
}

// The state an end holds at 128 paths: idle, no paths of either side (one
// sndPath per path each end held before: 69 KB); after a 64 KiB WRITE
// (16 data packets), on average under a fifth of one end's 128 paths had
// each path its whole state: only the paths that carried a packet have
// their cold part at the sender and their state at the receiver (6.1 KB
// per end; 10.6 KB with every receiving path made at the first packet,
// 32.1 KB with every sending path whole from the first send, 71 KB when
// paths came with the connection).
func TestPathStateOnFirstUse(t *testing.T) {
	idle, used := connState(50, Options{Paths: 128})
	whole := float64(128 * (unsafe.Sizeof(sndPath{}) + unsafe.Sizeof(pathCold{})))
	if idle > whole/8 || used > whole/5 {
		t.Errorf("per end at 128 paths: %.0f B idle, %.0f B after a WRITE; want under %.0f and %.0f", idle, used, whole/8, whole/5)
	}
}

// A path gets its cold state with its first packet, not before: after a
// 64 KiB WRITE (16 packets) on 128 paths, between 1 and 16 sending paths
// are used, each carried a packet, and a path not used reads as fresh;
// the target holds state for the paths it heard from, the same ones.
func TestPathColdOnFirstPacket(t *testing.T) {
	l := newLab(t, transporttest.Config{Seed: 1}, Options{Paths: 128})
	a := metaConn(l.ca)
	if err := l.ca.PostSend(write(7, 0, addrRW, addrRW+0x80000, 65536)); err != nil {
		t.Fatal(err)
	}
	if !l.runUntil(sim.Millisecond, func() bool { return len(l.ca.Completions) == 1 }) {
		t.Fatalf("no completion; stats %+v", a.Stats())
	}
	n := 0
	for i := range a.s.paths {
		p := &a.s.paths[i]
		if !p.used() {
			if p.st.packets != 0 || !p.sb.empty() || p.state != PathActive {
				t.Errorf("path %d not used but reads %d packets, state %v", i, p.st.packets, p.state)
			}
			continue
		}
		n++
		if p.st.packets == 0 {
			t.Errorf("path %d has its cold state but carried no packet", i)
		}
	}
	if n < 1 || n > 16 {
		t.Errorf("%d of 128 paths used by 16 data packets, want 1..16", n)
	}
	b, heard := metaConn(l.cb), 0
	for i, rp := range b.r.paths {
		if rp == nil {
			continue
		}
		heard++
		if !a.s.paths[i].used() {
			t.Errorf("target holds path %d, which the source never used", i)
		}
	}
	if heard != n {
		t.Errorf("target holds %d receiving paths, the source used %d", heard, n)
	}
}
