package rocev2

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

func TestConnectAndWrite(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.dial()
	if h.a.conn.PeerQPN() != h.b.conn.QPN() || h.b.conn.PeerQPN() != h.a.conn.QPN() {
		t.Fatalf("QPNs not exchanged: a=%#x->%#x b=%#x->%#x", h.a.conn.QPN(), h.a.conn.PeerQPN(), h.b.conn.QPN(), h.b.conn.PeerQPN())
	}
	const n = 1 << 20
	lkey, src := h.a.mem.add(0x1000, n, allAccess)
	rkey, dst := h.b.mem.add(0x9000_0000, n, allAccess)
	fill(src, 1)
	h.a.postSend(writeWR(42, lkey, 0x1000, n, rkey, 0x9000_0000))
	h.runUntil(func() bool { return len(h.a.comps) == 1 }, sim.Second)
	want := []transport.Completion{{ID: 42, Op: transport.OpWrite, Status: transport.StatusOK, Bytes: n}}
	if d := cmp.Diff(want, h.a.comps); d != "" {
		t.Fatalf("completions (-want +got):\n%s", d)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("written data differs")
	}
	s := h.a.conn.Stats()
	if s.DataPackets != n/4096 || s.Retransmitted != 0 || s.Rewinds != 0 {
		t.Fatalf("stats %+v, want %d data packets and no retransmission", s, n/4096)
	}
	if h.icrcBad != 0 {
		t.Fatalf("%d packets failed the ICRC check", h.icrcBad)
	}
}
