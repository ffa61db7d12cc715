package metaroce_test

import (
	"testing"

	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/workload"
)

// TestSpuriousLossFreeAllToAll: on a loss-free fabric every loss the
// sender declares is spurious, and an all-to-all's synchronized rounds
// make queues that differ between planes. 16 hosts on 4 planes at 25
// Gbit/s, 2 MiB, two operations (about 15,000 data packets): the sender
// declared 23 losses (22 proven arrived) when the rule across paths
// waited only the reference's round trip plus a window capped at the
// smoothed RTT; 11 (10) with its floor at srtt + 4 rttvar + ack_delay
// (lossdetect.go). It also checks that the counters agree: a proven
// spurious loss is a declared one, and the run's result (the report's
// "spurious" row) sums the connections'.
func TestSpuriousLossFreeAllToAll(t *testing.T) {
	b := bed{topo: "leafspine", rate: 25e9, planes: 4, leaves: 4, hpl: 4, spines: 4}
	spec := workload.Spec{Name: workload.AllToAll, Transport: transport.MetaRoCE, Size: 2 << 20, Iterations: 2}
	o := b.run(t, job{spec: spec, seed: 1})
	var losses, spurious, data uint64
	for _, nic := range o.cl.NICs {
		for _, c := range nic.Conns() {
			if mc, ok := c.Transport().(*metaroce.Conn); ok {
				st := mc.Stats()
				losses += st.Losses
				spurious += st.SpuriousLosses
				data += st.DataPacketsSent
			}
		}
	}
	t.Logf("%d data packets, %d declared lost, %d of them proven arrived", data, losses, spurious)
	if data < 10000 {
		t.Fatalf("only %d data packets: the all-to-all did not run", data)
	}
	if spurious > losses {
		t.Errorf("%d spurious losses out of %d declared", spurious, losses)
	}
	if o.res.SpuriousLosses != spurious {
		t.Errorf("the run's result reports %d spurious losses, the connections %d", o.res.SpuriousLosses, spurious)
	}
	if losses > 18 {
		t.Errorf("%d losses declared loss-free (want at most 18; 23 without the floor)", losses)
	}
}
