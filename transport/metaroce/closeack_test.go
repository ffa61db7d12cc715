package metaroce

import (
	"testing"

	"github.com/mrlab/mrlab/transport"
)

// TestCloseSendsOwedACK: a receiver that closes right after its last
// message arrived (the program saw the RECV completion and destroyed its
// QP at once, or while its port was still busy) first sends the ACK it
// owes, as a NIC's hardware acknowledges what it received before the QP
// is destroyed: the sender's message completes successfully, not flushed.
func TestCloseSendsOwedACK(t *testing.T) {
	for _, size := range []int{1, 4096, 65536} {
		p := newPair(Options{}, 2, 100e9, 4096)
		a, b := p.ends[0], p.ends[1]
		if err := b.conn.PostRecv(p.now, recvWR(7, addrRcv, size)); err != nil {
			t.Fatal(err)
		}
		if err := a.conn.PostSend(p.now, send(9, 0, addrRW, size)); err != nil {
			t.Fatal(err)
		}
		for i := 0; b.done == 0; i++ {
			if i > 1e6 || !p.step() {
				t.Fatalf("%d bytes: the RECV never completed", size)
			}
		}
		b.conn.Close(p.now) // in the instant its RECV completed
		for i := 0; a.done == 0; i++ {
			if i > 1e6 || !p.step() {
				t.Fatalf("%d bytes: the SEND never completed", size)
			}
		}
		if b.last.Status != transport.StatusOK || a.last.Status != transport.StatusOK {
			t.Errorf("%d bytes: receiver %v, sender %v; want both OK", size, b.last.Status, a.last.Status)
		}
	}
}
