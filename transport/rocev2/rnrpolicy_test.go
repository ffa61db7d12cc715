package rocev2

import (
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

var _ transport.RNRPolicy = (*Conn)(nil)

// TestSetRNR: a QP's rnr_retry and its peer's min_rnr_timer, set per QP
// as ibv_modify_qp sets them, override the protocol's options: rnr_retry
// 7 waits for a receive posted 50 ms later although the options allow 2
// retries; rnr_retry 1 fails after the first retry, and the requester
// waits the responder's timer (code 1, 10 us; the options' 12 is 640 us).
func TestSetRNR(t *testing.T) {
	t.Run("forever", func(t *testing.T) {
		h := newHarness(t, harnessConfig{opts: Options{MinRNRTimer: 1, RNRRetry: 2}})
		h.dial()
		h.a.conn.SetRNRRetry(7)
		lkey, _ := h.a.mem.add(0x1000, 4096, allAccess)
		rkey, _ := h.b.mem.add(0x1000, 4096, allAccess)
		h.a.postSend(sendWR(1, lkey, 0x1000, 100))
		h.loop.RunUntil(h.loop.Now() + 50*sim.Millisecond)
		if len(h.a.comps) != 0 {
			t.Fatalf("completed without a receive: %+v", h.a.comps)
		}
		h.b.postRecv(recvWR(7, rkey, 0x1000, 4096))
		h.runUntil(func() bool { return len(h.a.comps) == 1 }, sim.Second)
		if h.a.comps[0].Status != transport.StatusOK {
			t.Fatalf("status %v, want OK", h.a.comps[0].Status)
		}
		if n := h.a.conn.Stats().RNRNAKsReceived; n < 100 {
			t.Fatalf("%d RNR NAKs, want hundreds (50 ms of 10 us waits)", n)
		}
	})
	t.Run("one retry, short timer", func(t *testing.T) {
		h := newHarness(t, harnessConfig{opts: Options{}}) // RNRRetry forever, timer 640 us
		h.dial()
		h.a.conn.SetRNRRetry(1)
		h.b.conn.SetMinRNRTimer(1)
		lkey, _ := h.a.mem.add(0x1000, 4096, allAccess)
		start := h.loop.Now()
		h.a.postSend(sendWR(1, lkey, 0x1000, 100))
		h.runUntil(func() bool { return len(h.a.comps) == 1 }, sim.Second)
		if h.a.comps[0].Status != transport.StatusRNRRetryExceeded {
			t.Fatalf("status %v, want RNR retry exceeded", h.a.comps[0].Status)
		}
		if n := h.a.conn.Stats().RNRNAKsReceived; n != 2 {
			t.Fatalf("%d RNR NAKs, want 2 (the first and 1 retry)", n)
		}
		if d := h.loop.Now() - start; d > 500*sim.Microsecond {
			t.Fatalf("failed after %v: the requester did not wait the peer's 10 us timer", d)
		}
	})
}
