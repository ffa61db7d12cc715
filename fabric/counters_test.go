package fabric_test

import (
	"cmp"
	"reflect"
	"slices"
	"testing"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/natural"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/workload/udpgen"
)

// A snapshot taken once the order is known (entries written to their
// sorted places) equals the first one (entries sorted after), and costs
// only its two slices.
func TestCountersOrderKnown(t *testing.T) {
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Planes: 2, Leaves: 3, Spines: 2, HostsPerLeaf: 4,
		HostLink:   fabric.LinkParams{Delay: 500, QueueBytes: 16 << 10},
		FabricLink: fabric.LinkParams{Delay: 800, QueueBytes: 16 << 10, ECN: fabric.ECNConfig{Mode: fabric.ECNStep, K: 8000}},
	})
	l := newLab(t, mustTopo(t, topo, err), fabric.BuildOptions{Seed: 3})
	hs, err := udpgen.AttachAll(l.net, l.pool, l.loop)
	if err != nil {
		t.Fatal(err)
	}
	for i, src := range hs {
		for f := 0; f < 2; f++ {
			src.AddFlow(udpgen.FlowSpec{Dst: hs[(i+1+f)%len(hs)].Addr(), SrcPort: uint16(100 + f), DstPort: 4791, Size: 1024,
				Plane: f % 2, Rate: 40e9, Count: 60, ECN: 2})
		}
		src.Start(0)
	}
	l.loop.RunUntil(5 * sim.Microsecond)
	first := l.net.Counters() // sorts, mid-run: queues are not empty
	again := l.net.Counters()
	if !reflect.DeepEqual(first, again) {
		t.Fatalf("the second snapshot differs from the first")
	}
	l.loop.Run()
	end := l.net.Counters()
	if !slices.IsSortedFunc(end.Links, func(a, b fabric.LinkCounters) int {
		return cmp.Or(natural.Compare(a.Link, b.Link), cmp.Compare(a.Dir, b.Dir))
	}) || !slices.IsSortedFunc(end.Ports, func(a, b fabric.PortCounters) int {
		return cmp.Or(natural.Compare(a.Node, b.Node), cmp.Compare(a.Port, b.Port))
	}) {
		t.Errorf("snapshot not sorted")
	}
	var tx uint64
	for _, lc := range end.Links {
		tx += lc.TxPackets
	}
	if tx == 0 || tx == sum(first) {
		t.Errorf("links sent %d packets by the end, %d at 5 us: the snapshot did not follow the run", tx, sum(first))
	}
	if n := testing.AllocsPerRun(5, func() { l.net.Counters() }); n > 2 {
		t.Errorf("a snapshot takes %.0f allocations, want 2 (its Links and Ports)", n)
	}
}

func sum(s fabric.Snapshot) (n uint64) {
	for _, lc := range s.Links {
		n += lc.TxPackets
	}
	return n
}
