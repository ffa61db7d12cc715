package metaroce

import (
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/transporttest"
)

var _ transport.RNRPolicy = (*Conn)(nil)

// TestSetRNRRetry: a QP's rnr_retry (SetRNRRetry, as ibv_modify_qp sets
// it) overrides Options.RNRRetries: 7 retries forever, so a receive
// posted 300 ms later (far past 7 doublings of RNRDelay) still gets the
// SEND; a count fails after that many retries.
func TestSetRNRRetry(t *testing.T) {
	for _, tc := range []struct {
		name    string
		retry   int
		postAt  sim.Time // when the receive is posted; 0: never
		status  transport.Status
		minNaks uint64 // RNR NAKs the sender saw, at least
	}{
		{"forever, receive posted late", 7, 300 * sim.Millisecond, transport.StatusOK, 20},
		{"one retry", 1, 0, transport.StatusRNRRetryExceeded, 2},
		{"no retry", 0, 0, transport.StatusRNRRetryExceeded, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t, transporttest.Config{Seed: 21}, Options{RNRRetries: 2})
			metaConn(l.ca).SetRNRRetry(tc.retry)
			if err := l.ca.PostSend(send(1, 0, addrRW, 1000)); err != nil {
				t.Fatal(err)
			}
			if tc.postAt > 0 {
				l.run(tc.postAt)
				if len(l.ca.Completions) != 0 {
					t.Fatalf("SEND completed before its receive: %+v", l.ca.Completions)
				}
				if err := l.cb.PostRecv(recvWR(50, addrRcv, 65536)); err != nil {
					t.Fatal(err)
				}
			}
			if !l.runUntil(2*sim.Second, func() bool { return len(l.ca.Completions) == 1 }) {
				t.Fatal("no completion")
			}
			if got := l.ca.Completions[0].Status; got != tc.status {
				t.Errorf("status %v, want %v", got, tc.status)
			}
			if n := metaConn(l.ca).Stats().RNRNaksReceived; n < tc.minNaks || tc.status != transport.StatusOK && n != uint64(tc.retry)+1 {
				t.Errorf("%d RNR NAKs, want %d", n, tc.minNaks)
			}
		})
	}
}
