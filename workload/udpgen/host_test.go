package udpgen_test

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/workload/udpgen"
)

func setup(t *testing.T, planes int) (*sim.Loop, *packet.Pool, *fabric.Network, []*udpgen.Host) {
	t.Helper()
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Planes: planes, Leaves: 2, Spines: 2, HostsPerLeaf: 1,
		HostLink: fabric.LinkParams{Delay: 1000}, FabricLink: fabric.LinkParams{Delay: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	loop, pool := sim.NewLoop(), packet.NewPool()
	n, err := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := udpgen.AttachAll(n, pool, loop)
	if err != nil {
		t.Fatal(err)
	}
	return loop, pool, n, hs
}

func TestPacedFlow(t *testing.T) {
	loop, pool, _, hs := setup(t, 2)
	// 10 Gbit/s of 1000-byte packets: one every 800 ns, from 5 us.
	if _, err := hs[0].AddFlow(udpgen.FlowSpec{Name: "a", Dst: hs[1].Addr(), SrcPort: 5, DstPort: 6, Plane: 1,
		Size: 1000, Rate: 10e9, Count: 100, Start: 5 * sim.Microsecond, ECN: header.ECNECT0}); err != nil {
		t.Fatal(err)
	}
	hs[0].Start(0)
	loop.Run()
	want := []udpgen.FlowStats{{Name: "a", Sent: 100, SentBytes: 100000, Done: true}}
	if diff := cmp.Diff(want, hs[0].Stats()); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
	// First packet: sent at 5 us, 4 hops of 80 ns and 1 us. Last: 99 x 800 ns later.
	first := 5*sim.Microsecond + 4*(80+1000)
	wantRx := []udpgen.RecvStats{{Src: hs[0].Addr(), SrcPort: 5, DstPort: 6, Packets: 100, Bytes: 100000,
		First: first, Last: first + 99*800}}
	if diff := cmp.Diff(wantRx, hs[1].Received(), cmpopts.IgnoreUnexported(udpgen.RecvStats{}), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("Received (-want +got):\n%s", diff)
	}
	if pool.Outstanding() != 0 {
		t.Errorf("%d buffers leaked", pool.Outstanding())
	}
}

// Pull flows sharing a port take turns and fill the line.
func TestPullFlowsShareThePort(t *testing.T) {
	loop, _, _, hs := setup(t, 1)
	for i := 0; i < 3; i++ {
		hs[0].AddFlow(udpgen.FlowSpec{Dst: hs[1].Addr(), SrcPort: uint16(10 + i), DstPort: 1, Size: 1250})
	}
	hs[0].Start(0)
	loop.RunUntil(100 * sim.Microsecond)
	hs[0].Stop()
	loop.Run()
	st := hs[0].Stats()
	// 100 us at 100 Gbit/s = 1000 packets of 1250 bytes (100 ns each).
	total := st[0].Sent + st[1].Sent + st[2].Sent
	if total < 999 || total > 1001 {
		t.Errorf("sent %d packets in 100 us, want 1000", total)
	}
	for _, s := range st {
		if d := int(s.Sent) - int(total/3); d < -1 || d > 1 {
			t.Errorf("unfair share: %+v", st)
		}
	}
	if n, _ := hs[1].ReceivedTotal(); n != total {
		t.Errorf("received %d of %d", n, total)
	}
}

func TestAddFlowErrors(t *testing.T) {
	_, _, _, hs := setup(t, 1)
	dst := hs[1].Addr()
	for _, f := range []udpgen.FlowSpec{
		{Dst: netip.Addr{}, Size: 100},
		{Dst: dst, Size: 10},
		{Dst: dst, Size: 100000},
		{Dst: dst, Size: 100, Plane: 1},
		{Dst: dst, Size: 100, Rate: -1},
	} {
		if _, err := hs[0].AddFlow(f); err == nil {
			t.Errorf("AddFlow(%+v) accepted", f)
		}
	}
}
