package metaroce

import (
	"math"
	"testing"

	"github.com/mrlab/mrlab/transport/transporttest"
)

// TestAckRedundancy: how many ACKs carry a path's state after an
// arrival, from the loss rate the receiver measures (the fraction of
// arrivals that are retransmissions): one loss-free (a lost ACK rarer
// than 1e-3), two while two lost ACKs in a row are rarer than that, then
// the chance count, at most maxAckRedundancy.
func TestAckRedundancy(t *testing.T) {
	for _, c := range []struct {
		name string
		retx int // retransmissions in every 100 arrivals
		want uint8
	}{
		{"loss-free", 0, 1},
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
			// The operator sees both: the peer sets the RETX flag.
			if st := mc.Stats(); st.AckCopies != int(c.want) || math.Abs(st.RetxShare-float64(c.retx)/100) > 0.03 {
				t.Errorf("Stats: RetxShare %.3f, AckCopies %d; want about %.2f and %d", st.RetxShare, st.AckCopies, float64(c.retx)/100, c.want)
			}
		})
	}
}

// TestAckRedundancyAfterLoss: one retransmission among loss-free arrivals
// raises the count to two until the measured loss (an average over about
// 64 arrivals) falls below 1e-3 again, about 210 arrivals later.
func TestAckRedundancyAfterLoss(t *testing.T) {
	for _, c := range []struct {
		after int // loss-free arrivals since the retransmission
		want  uint8
	}{{0, 2}, {100, 2}, {200, 2}, {250, 1}, {1000, 1}} {
		l := newLab(t, transporttest.Config{}, Options{})
		mc := metaConn(l.cb)
		mc.noteArrival(true)
		for i := 0; i < c.after; i++ {
			mc.noteArrival(false)
		}
		if got := mc.ackRedundancy(); got != c.want {
			t.Errorf("%d arrivals after a retransmission (measured loss %.5f): %d ACKs, want %d", c.after, float64(mc.r.lossQ)/65536, got, c.want)
		}
	}
}
