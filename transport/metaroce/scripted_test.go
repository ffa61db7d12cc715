package metaroce

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// sentPkt is a data packet seen leaving a host.
type sentPkt struct {
	Path  uint8
	Gen   uint8
	PSN   uint32
	DSN   uint32
	Retx  bool
	Last  bool
	Abort bool
	Port  int
}

func dataOf(p *transporttest.Packet) (sentPkt, bool) {
	h := wire.Header(p.Payload)
	if !h.Type().IsData() {
		return sentPkt{}, false
	}
	d := wire.Data(p.Payload)
	f := d.Flags()
	return sentPkt{Path: d.Path(), Gen: d.Gen(), PSN: d.PSN(), DSN: d.DSN(), Retx: f&wire.FlagRetx != 0,
		Last: f&wire.FlagLast != 0, Abort: f&wire.FlagAbort != 0, Port: p.Port}, true
}

// scripted runs one 256 KiB WRITE from a to b with filter installed, and
// returns the data packets a sent.
func scripted(t *testing.T, cfg transporttest.Config, opts Options, filter func(p *transporttest.Packet, d sentPkt, isData bool) transporttest.Verdict) (*lab, []sentPkt) {
	t.Helper()
	return scriptedAfter(t, cfg, opts, nil, filter)
}

// scriptedAfter is scripted with setup run on the connected lab before
// the WRITE is posted.
func scriptedAfter(t *testing.T, cfg transporttest.Config, opts Options, setup func(*lab), filter func(p *transporttest.Packet, d sentPkt, isData bool) transporttest.Verdict) (*lab, []sentPkt) {
	t.Helper()
	l := newLab(t, cfg, opts)
	if setup != nil {
		setup(l)
	}
	var sent []sentPkt
	l.net.Filter = func(p *transporttest.Packet) transporttest.Verdict {
		d, ok := dataOf(p)
		if ok && p.From == l.a {
			sent = append(sent, d)
		}
		return filter(p, d, ok && p.From == l.a)
	}
	const n = 256 << 10
	if err := l.ca.PostSend(write(1, 0, addrRW, addrRW+0x80000, n)); err != nil {
		t.Fatal(err)
	}
	if !l.runUntil(50*sim.Millisecond, func() bool { return len(l.ca.Completions) == 1 }) {
		l.dumpTrace()
		t.Fatalf("WRITE did not complete: %+v", metaConn(l.ca).Stats())
	}
	if wc := l.ca.Completions[0]; wc.Status != transport.StatusOK {
		t.Fatalf("completion %+v", wc)
	}
	if !bytes.Equal(mem(l.a, keyRW, addrRW, n), mem(l.b, keyRW, addrRW+0x80000, n)) {
		t.Fatal("target bytes differ from source")
	}
	l.run(sim.Millisecond) // let the last ACKs land
	return l, sent
}

func retransmissions(sent []sentPkt) []sentPkt {
	var r []sentPkt
	for _, s := range sent {
		if s.Retx {
			r = append(r, s)
		}
	}
	return r
}

// TestDropDataPacket: drop the 2nd data packet on path 3: exactly one
// retransmission, of exactly that packet (same path, generation, PSN, DSN).
func TestDropDataPacket(t *testing.T) {
	for _, k := range []int{1, 2, 3} {
		var dropped sentPkt
		seen := 0
		l, sent := scripted(t, transporttest.Config{Seed: 1}, Options{}, func(p *transporttest.Packet, d sentPkt, isData bool) transporttest.Verdict {
			if isData && d.Path == 3 && !d.Retx {
				seen++
				if seen == k {
					dropped = d
					return transporttest.Drop
				}
			}
			return transporttest.Pass
		})
		want := dropped
		want.Retx = true
		if diff := cmp.Diff([]sentPkt{want}, retransmissions(sent)); diff != "" {
			t.Errorf("k=%d: retransmissions (-want +got):\n%s", k, diff)
		}
		st := metaConn(l.ca).Stats()
		if st.Retransmits != 1 || st.Losses != 1 || st.Timeouts != 0 || st.EntropyChanges != 0 {
			t.Errorf("k=%d: stats %+v", k, st)
		}
		got := append(l.tr.Grep("SACK hole psn"), l.tr.Grep("a later packet arrived: lost")...)
		if len(got) != 1 || !strings.Contains(got[0], "path 3:") {
			t.Errorf("k=%d: trace of the hole: %q", k, got)
		}
	}
}

// TestDropAck: losing an ACK costs no data retransmission under
// measured loss, where every arrival is reported by two ACKs (the chance
// rule, ackRedundancy): the next ACK repeats the path's state. Loss-free
// an arrival is reported once (a lost ACK is rarer than 1e-3 there), so
// a lost ACK may cost the packets only it reported, at most AckEvery,
// sent again once the reordering window has passed, and never a timeout.
func TestDropAck(t *testing.T) {
	for _, measured := range []bool{true, false} {
		for _, which := range []int{1, 5, 40} {
			acks := 0
			setup := func(l *lab) {
				if measured {
					metaConn(l.cb).noteArrival(true) // one retransmission arrived: q = 1/64
				}
			}
			l, sent := scriptedAfter(t, transporttest.Config{Seed: 2}, Options{}, setup, func(p *transporttest.Packet, d sentPkt, isData bool) transporttest.Verdict {
				if p.From.Name == "b" && pktType(p) == wire.TypeAck {
					acks++
					if acks == which {
						return transporttest.Drop
					}
				}
				return transporttest.Pass
			})
			limit := 0
			if !measured {
				limit = metaConn(l.ca).opts.AckEvery
			}
			if r := retransmissions(sent); len(r) > limit {
				t.Errorf("measured loss %v, ACK %d dropped: %d data packets retransmitted, want <= %d: %+v", measured, which, len(r), limit, r)
			}
			if st := metaConn(l.ca).Stats(); st.Timeouts != 0 {
				t.Errorf("measured loss %v, ACK %d dropped: %d timeouts", measured, which, st.Timeouts)
			}
		}
	}
}

// TestDropTail: the message's last packet is lost and nothing follows it
// on its path: a tail-loss probe sends that chunk again (under the path's
// next PSN) one probe timeout later, before any retransmission timeout,
// and nothing else is sent twice.
func TestDropTail(t *testing.T) {
	var dropped sentPkt
	var dropAt, retxAt sim.Time
	l, sent := scripted(t, transporttest.Config{Seed: 3}, Options{}, func(p *transporttest.Packet, d sentPkt, isData bool) transporttest.Verdict {
		if isData && d.Last && !d.Retx {
			dropped, dropAt = d, p.From.Now()
			return transporttest.Drop
		}
		if isData && d.Retx {
			retxAt = p.From.Now()
		}
		return transporttest.Pass
	})
	r := retransmissions(sent)
	if len(r) != 1 || r[0].DSN != dropped.DSN || r[0].Path != dropped.Path || r[0].Gen != dropped.Gen {
		t.Errorf("retransmissions %+v, want dsn %d once on path %d", r, dropped.DSN, dropped.Path)
	}
	st := metaConn(l.ca).Stats()
	if st.TailProbes == 0 || st.Timeouts != 0 {
		t.Errorf("tail probes %d, timeouts %d; want a probe and no timeout", st.TailProbes, st.Timeouts)
	}
	// The timeout would come a second probe timeout after the probe.
	if rec, pto := retxAt-dropAt, metaConn(l.ca).PathStats(int(dropped.Path)).RTO; rec >= 2*pto {
		t.Errorf("tail recovered after %v, not within a probe timeout (%v)", rec, pto)
	}
}

// TestKillPath: every packet on path 5's first route is lost (a dead
// link). The path times out, moves to a new entropy, its outstanding
// chunks go out on other paths, and the WRITE completes.
func TestKillPath(t *testing.T) {
	var deadPort uint16
	l, sent := scripted(t, transporttest.Config{Seed: 4}, Options{}, func(p *transporttest.Packet, d sentPkt, isData bool) transporttest.Verdict {
		if isData && d.Path == 5 && deadPort == 0 {
			deadPort = p.Meta.SrcPort
		}
		if p.Meta.SrcPort == deadPort && deadPort != 0 {
			return transporttest.Drop
		}
		return transporttest.Pass
	})
	ps := metaConn(l.ca).PathStats(5)
	if ps.Timeouts == 0 || ps.EntropyChanges == 0 || ps.Entropy == deadPort {
		t.Errorf("path 5: %+v; want a timeout and a new entropy (dead one %d)", ps, deadPort)
	}
	moved := 0
	for _, s := range retransmissions(sent) {
		if s.Path != 5 {
			moved++
		}
	}
	if moved == 0 {
		t.Errorf("no chunk of the dead path was re-sent on another path: %+v", retransmissions(sent))
	}
	if len(l.tr.Grep("path 5 entropy")) == 0 {
		t.Error("no entropy change in the trace")
	}
}

// TestPlaneFailure: one of four planes dies under steady traffic. Every
// request completes OK, the dead plane's paths fail, no data goes to the
// dead plane afterwards, and goodput recovers on the other planes.
func TestPlaneFailure(t *testing.T) {
	cfg := transporttest.Config{Seed: 5, Ports: 4, LinkRate: 25e9}
	l := newLab(t, cfg, Options{})
	var lastDataOnDead sim.Time
	const dead = 2
	failAt := l.net.Loop.Now() + 300*sim.Microsecond
	l.net.Filter = func(p *transporttest.Packet) transporttest.Verdict {
		if d, ok := dataOf(p); ok && p.From == l.a && p.Port == dead && !d.Abort {
			lastDataOnDead = p.From.Now()
		}
		return transporttest.Pass
	}
	l.net.Loop.At(failAt, func(sim.Time) { l.net.SetPlaneUp(dead, false) })
	// Keep 16 x 64 KiB WRITEs outstanding for 3 ms.
	const size = 64 << 10
	var posted, bytesBefore, bytesAfter uint64
	l.ca.OnComplete = func(c *transporttest.Conn, wc transport.Completion) {
		if wc.Status != transport.StatusOK {
			t.Errorf("completion %+v", wc)
		}
		now := c.Host.Now()
		switch {
		case now < failAt:
			bytesBefore += uint64(wc.Bytes)
		case now > failAt+500*sim.Microsecond:
			bytesAfter += uint64(wc.Bytes)
		}
	}
	end := failAt + 2500*sim.Microsecond
	for l.net.Loop.Now() < end {
		for int(posted)-len(l.ca.Completions) < 16 {
			off := uint64(posted%8) * size
			if err := l.ca.PostSend(write(posted+1, uint16(posted%4), addrRW+off, addrRW+0x80000+off, size)); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		l.run(10 * sim.Microsecond)
	}
	if !l.runUntil(20*sim.Millisecond, func() bool { return len(l.ca.Completions) == int(posted) }) {
		t.Fatalf("%d of %d completed", len(l.ca.Completions), posted)
	}
	for i := 0; i < metaConn(l.ca).Paths(); i++ {
		ps := metaConn(l.ca).PathStats(i)
		if ps.Plane == dead && ps.State == PathActive {
			t.Errorf("path %d on the dead plane is %v", i, ps.State)
		}
	}
	// Data stops going to the dead plane within a few RTOs.
	if d := lastDataOnDead - failAt; d > 500*sim.Microsecond {
		t.Errorf("data still sent on the dead plane %v after it failed", d)
	}
	rateBefore := float64(bytesBefore) / (failAt - 0).Seconds()
	rateAfter := float64(bytesAfter) / (end - failAt - 500*sim.Microsecond).Seconds()
	t.Logf("goodput before %.1f Gb/s, after %.1f Gb/s (3 of 4 planes)", rateBefore*8/1e9, rateAfter*8/1e9)
	if rateAfter < 0.6*0.75*rateBefore {
		t.Errorf("goodput after the failure %.1f Gb/s, want at least 60%% of 3/4 of %.1f Gb/s", rateAfter*8/1e9, rateBefore*8/1e9)
	}
}

// TestLossyRouteRepath: path 4's first route drops every other packet (a
// bad link, not a dead one). Losses — not timeouts — move the path to a
// new entropy; the other paths, which lose nothing, stay where they are.
func TestLossyRouteRepath(t *testing.T) {
	var badPort uint16
	n := 0
	l, _ := scripted(t, transporttest.Config{Seed: 6}, Options{}, func(p *transporttest.Packet, d sentPkt, isData bool) transporttest.Verdict {
		if isData && d.Path == 4 && badPort == 0 {
			badPort = p.Meta.SrcPort
		}
		if p.Meta.SrcPort == badPort && badPort != 0 && p.From.Name == "a" {
			if n++; n%2 == 0 {
				return transporttest.Drop
			}
		}
		return transporttest.Pass
	})
	mc := metaConn(l.ca)
	ps := mc.PathStats(4)
	if ps.EntropyChanges == 0 || ps.Entropy == badPort {
		t.Fatalf("path 4 stayed on its lossy route: %+v", ps)
	}
	if got := l.tr.Grep("path 4 entropy"); len(got) == 0 || !strings.Contains(got[0], "after losses") {
		t.Errorf("path 4's move is not traced as loss-driven: %q", got)
	}
	for i := 0; i < mc.Paths(); i++ {
		if i != 4 && mc.PathStats(i).EntropyChanges != 0 {
			t.Errorf("path %d moved too: %+v", i, mc.PathStats(i))
		}
	}
}

// TestMarkedRouteRepath: every packet on path 3's first route is CE-marked
// (a hot link) while the other routes are clean. After RepathMarkRounds
// heavily marked rounds the path drains and moves to a new entropy; no
// data is lost or retransmitted for it.
func TestMarkedRouteRepath(t *testing.T) {
	l := newLab(t, transporttest.Config{Seed: 7}, Options{})
	var hot uint16
	l.net.Filter = func(p *transporttest.Packet) transporttest.Verdict {
		if d, ok := dataOf(p); ok && p.From == l.a && d.Path == 3 && hot == 0 {
			hot = p.Meta.SrcPort
		}
		if p.Meta.SrcPort == hot && hot != 0 && p.From == l.a {
			return transporttest.MarkCE
		}
		return transporttest.Pass
	}
	for i := 0; i < 40; i++ {
		if err := l.ca.PostSend(write(uint64(i+1), 0, addrRW, addrRW+0x80000, 256<<10)); err != nil {
			t.Fatal(err)
		}
	}
	if !l.runUntil(100*sim.Millisecond, func() bool { return len(l.ca.Completions) == 40 }) {
		t.Fatal("WRITEs did not complete")
	}
	mc := metaConn(l.ca)
	ps := mc.PathStats(3)
	if ps.EntropyChanges == 0 || ps.Entropy == hot {
		t.Fatalf("path 3 stayed on its marked route: %+v", ps)
	}
	if got := l.tr.Grep("path 3 entropy"); len(got) == 0 || !strings.Contains(got[0], "after ECN marks") {
		t.Errorf("path 3's move is not traced as mark-driven: %q", got)
	}
	if st := mc.Stats(); st.Retransmits != 0 || st.Losses != 0 {
		t.Errorf("marking caused retransmissions: %+v", st)
	}
	for i := 0; i < mc.Paths(); i++ {
		if i != 3 && mc.PathStats(i).EntropyChanges != 0 {
			t.Errorf("clean path %d moved: %+v", i, mc.PathStats(i))
		}
	}
}
