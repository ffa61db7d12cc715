package metaroce

import (
	"fmt"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// TestRNRWaitSendsNoProbe: a SEND the receiver refuses with RNR NAKs for
// 300 ms (no receive posted) is not lost and not a tail: while it waits
// for its RNR retry the connection sends no tail-loss probe (before the
// rule, tens of thousands: one per PTO), nor after a retry (before the
// NAK took an RTT sample, 364 on seed 21: the NAK of a 1000-byte SEND
// returned in 4.2 us, after the 4.08 us PTO its probes' small packets had
// set), and the SEND completes once the receive is posted.
func TestRNRWaitSendsNoProbe(t *testing.T) {
	for _, seed := range []uint64{21, 1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { rnrWaitNoProbe(t, seed) })
	}
}

func rnrWaitNoProbe(t *testing.T, seed uint64) {
	l := newLab(t, transporttest.Config{Seed: seed}, Options{})
	c := metaConn(l.ca)
	c.SetRNRRetry(7) // forever
	if err := l.ca.PostSend(send(1, 0, addrRW, 1000)); err != nil {
		t.Fatal(err)
	}
	l.run(300 * sim.Millisecond)
	if testing.Verbose() {
		l.dumpTrace()
	}
	if len(l.ca.Completions) != 0 {
		t.Fatalf("SEND completed before its receive: %+v", l.ca.Completions)
	}
	var probes uint64
	for i := range len(c.s.paths) {
		probes += c.PathStats(i).Probes
	}
	naks := c.Stats().RNRNaksReceived
	// Probes follow neither the wait (one per PTO before the rule: 38,616
	// here) nor a retry: its NAK is the answer, and took an RTT sample.
	t.Logf("%d probes, %d RNR NAKs", probes, naks)
	if probes > 0 || c.Stats().Timeouts > 0 {
		t.Errorf("RNR wait of 300 ms: %d probes, %d tail-loss probes, %d timeouts (%d RNR NAKs); want none",
			probes, c.Stats().TailProbes, c.Stats().Timeouts, naks)
	}
	if naks < 10 {
		t.Errorf("%d RNR NAKs in 300 ms, want the back-off to keep retrying", naks)
	}
	if err := l.cb.PostRecv(recvWR(50, addrRcv, 65536)); err != nil {
		t.Fatal(err)
	}
	if !l.runUntil(2*sim.Second, func() bool { return len(l.ca.Completions) == 1 }) {
		t.Fatal("no completion after the receive was posted")
	}
	if got := l.ca.Completions[0].Status; got != transport.StatusOK {
		t.Errorf("status %v, want ok", got)
	}
}
