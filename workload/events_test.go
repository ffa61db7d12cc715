package workload

import (
	"testing"

	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// TestEventsPerDataPacket pins the event loop's work per simulated data
// packet on a small permutation (a count, not a timing: the same on any
// machine). The figure is what `mrlab bench` reports as events per
// packet; a change to the fabric, NIC or transports that adds events per
// packet fails here.
func TestEventsPerDataPacket(t *testing.T) {
	const limit = 10.6 // measured 10.1 (4 hops each way, an ACK per data packet)
	cl, _ := lab{hosts: 16, leaves: 4, seed: 1}.build(t)
	fired0 := cl.Loop.Fired()
	res, err := Run(cl, Spec{Name: Permutation, Transport: transport.MetaRoCE, Size: 1 << 20, Iterations: 1, QueueDepth: 1,
		Seed: 1, Payload: softnic.PayloadSynthetic})
	if err != nil || !res.Check.OK {
		t.Fatalf("run: %v, check %+v", err, res.Check)
	}
	var pkts uint64
	for _, nic := range cl.NICs {
		for _, c := range nic.Conns() {
			if st := c.Stats(); st.RxBytes > st.TxBytes {
				pkts += st.RxPackets
			}
		}
	}
	per := float64(cl.Loop.Fired()-fired0) / float64(pkts)
	t.Logf("%.2f events per data packet (%d data packets)", per, pkts)
	if per > limit {
		t.Errorf("%.2f events per data packet, want at most %.1f", per, limit)
	}
}
