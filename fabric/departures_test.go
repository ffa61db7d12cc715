package fabric_test

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/workload/udpgen"
)

// TestObserverDoesNotChangeRun: the one-event-per-hop model reports
// EvTransmit from a timer of its own; attaching an observer must leave
// the run itself (arrivals, drops, marks, queue figures) unchanged.
func TestObserverDoesNotChangeRun(t *testing.T) {
	run := func(observe bool) (fabric.Snapshot, []udpgen.RecvStats, uint64) {
		lp := fabric.LinkParams{QueueBytes: 64 << 10, ECN: fabric.ECNConfig{Mode: fabric.ECNStep, K: 16 << 10},
			Impair: fabric.Impairment{Jitter: 300, Delay: 500, Duplicate: 0.01, Corrupt: 0.01}}
		topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 2, Spines: 2, HostsPerLeaf: 2, HostLink: lp, FabricLink: lp})
		l := newLab(t, mustTopo(t, topo, err), fabric.BuildOptions{Seed: 7})
		th := fabric.NewTraceHash()
		if observe {
			l.net.SetObserver(th)
		}
		hs, err := udpgen.AttachAll(l.net, l.pool, l.loop)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ { // incast into h3: queues, marks, drops
			for f := 0; f < 8; f++ {
				hs[i].AddFlow(udpgen.FlowSpec{Dst: hs[3].Addr(), SrcPort: uint16(100 + f), DstPort: 4791, Size: 4096, Count: 60})
			}
			hs[i].Start(0)
		}
		l.loop.Run()
		return l.net.Counters(), hs[3].Received(), th.Events()
	}
	s0, r0, _ := run(false)
	s1, r1, ev := run(true)
	if ev == 0 {
		t.Fatal("observer saw nothing")
	}
	if d := s0.Drops(); d[fabric.DropQueueFull] == 0 {
		t.Fatalf("scenario too gentle: drops %v", d)
	}
	if diff := cmp.Diff(s0, s1, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("counters differ with an observer (-without +with):\n%s", diff)
	}
	if diff := cmp.Diff(r0, r1, cmpopts.EquateComparable(netip.Addr{}), cmpopts.IgnoreUnexported(udpgen.RecvStats{})); diff != "" {
		t.Errorf("arrivals differ with an observer (-without +with):\n%s", diff)
	}
}
