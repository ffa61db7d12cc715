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

// Totals are the sums a Snapshot gives (drops of every cause, marks,
// corruptions, duplicates, PFC pauses), mid-run and at the end, and cost
// no allocation: a workload reads them at its heap's peak.
func TestTotalsMatchSnapshot(t *testing.T) {
	for _, pfc := range []bool{false, true} {
		topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Planes: 2, Leaves: 3, Spines: 2, HostsPerLeaf: 4,
			HostLink: fabric.LinkParams{Delay: 500, QueueBytes: 8 << 10},
			FabricLink: fabric.LinkParams{Delay: 800, QueueBytes: 8 << 10, ECN: fabric.ECNConfig{Mode: fabric.ECNStep, K: 4000},
				Impair: fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossRandom, P: 0.02}, Duplicate: 0.02, Corrupt: 0.02}},
		})
		topo = mustTopo(t, topo, err)
		if pfc {
			for i := range topo.Links {
				topo.Links[i].Params.PFC = fabric.PFCConfig{XOff: 4 << 10, XOn: 2 << 10}
			}
		}
		l := newLab(t, topo, fabric.BuildOptions{Seed: 5})
		hs, err := udpgen.AttachAll(l.net, l.pool, l.loop)
		if err != nil {
			t.Fatal(err)
		}
		for i, src := range hs {
			for f := 0; f < 3; f++ {
				src.AddFlow(udpgen.FlowSpec{Dst: hs[(i+1+f)%len(hs)].Addr(), SrcPort: uint16(100 + f), DstPort: 4791, Size: 1024,
					Plane: f % 2, Rate: 60e9, Count: 80, ECN: 2})
			}
			src.Start(0)
		}
		check := func(when string) fabric.Totals {
			s, got := l.net.Counters(), l.net.Totals()
			want := fabric.Totals{Drops: s.Drops(), Pauses: s.PFCPauses()}
			for _, lc := range s.Links {
				want.ECNMarks += lc.ECNMarks
				want.Corrupted += lc.Corrupted
				want.Duplicated += lc.Duplicated
			}
			if got != want {
				t.Errorf("pfc %v, %s: Totals %+v, the snapshot's sums %+v", pfc, when, got, want)
			}
			return got
		}
		l.loop.RunUntil(3 * sim.Microsecond)
		check("at 3 us")
		// A link down before routing learns of it: the leaf's drops
		// (black hole) are the node's, not the link's.
		if err := l.net.SetLinkUp(l.loop.Now(), topo.Links[len(topo.Links)-1].Name, false); err != nil {
			t.Fatal(err)
		}
		l.loop.Run()
		end := check("at the end")
		if end.Drops[fabric.DropBlackHole] == 0 || end.Drops.Total() == 0 || end.ECNMarks == 0 || end.Corrupted == 0 || end.Duplicated == 0 || pfc != (end.Pauses > 0) {
			t.Errorf("pfc %v: totals %+v: want drops, marks, corruptions, duplicates, and pauses only with PFC", pfc, end)
		}
		if n := testing.AllocsPerRun(5, func() { l.net.Totals() }); n != 0 {
			t.Errorf("Totals takes %.0f allocations, want none", n)
		}
	}
}
