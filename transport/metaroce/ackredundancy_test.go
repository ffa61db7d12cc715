package metaroce

import (
	"testing"

	"github.com/mrlab/mrlab/transport/transporttest"
)

// TestAckRedundancy: how many ACKs carry a path's state after an
// arrival, from the loss rate the receiver measures (the fraction of
// arrivals that are retransmissions): two loss-free and while two lost
// ACKs in a row are rarer than 1e-3, then the chance count, at most
// maxAckRedundancy.
func TestAckRedundancy(t *testing.T) {
	for _, c := range []struct {
		name string
		retx int // retransmissions in every 100 arrivals
		want uint8
	}{
		{"loss-free", 0, 2},
		{"1%", 1, 2},   // 1e-4 < 1e-3
		{"5%", 5, 3},   // 2.5e-3 two, 1.25e-4 three
		{"15%", 15, 4}, // 3.4e-3 three, 5e-4 four
		{"34%", 34, 7}, // 1.5e-3 six, 5e-4 seven
		{"47%", 47, 10},
		{"80%", 80, maxAckRedundancy},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLab(t, transporttest.Config{}, Options{})
			mc := metaConn(l.cb)
			// 10,000 arrivals, the retransmissions spread evenly: the
			// average over about 64 arrivals settles near their fraction.
			for i := 0; i < 10000; i++ {
				mc.noteArrival((i+1)*c.retx/100 > i*c.retx/100)
			}
			q := float64(mc.r.lossQ) / 65536
			if got := mc.ackRedundancy(); got != c.want {
				t.Errorf("measured loss %.3f: %d ACKs, want %d", q, got, c.want)
			}
		})
	}
}
