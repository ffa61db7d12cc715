package live

import (
	"testing"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
)

// TestHostQueueHoldsKernelBurst: a burst that a host's kernel lets through
// to the lab — as many MTU datagrams as mr0's ring holds
// (kernelQueueLen at the NIC's rate, the sum of its ports'), all of one
// flow — is not dropped at the NIC's host queue, on a NIC of two ports
// (the loss-free default lab at 1 Gbit/s a port). mr0's shaper paces the
// host at the NIC's rate, 2 Gbit/s, and one flow hashes to one port of
// 1 Gbit/s, so the port's queue must hold what arrives at the NIC's
// rate: sized by one port's rate it held half the ring (1,666 of 3,333
// datagrams dropped: the issue-26 UDP run's drops_host-queue-full).
// The engine runs on a simulated clock: no wall clock, no namespaces.
func TestHostQueueHoldsKernelBurst(t *testing.T) {
	eng, err := NewLabEngine(lossFreeDefault(t), EngineConfig{MaxRate: DefaultMaxRate})
	if err != nil {
		t.Fatal(err)
	}
	hosts := eng.Hosts()
	const src, dst = 0, 4 // h0 -> h4, across the spines
	delivered := map[int]int{}
	loop := sim.NewLoop()
	pool := packet.NewPool()
	if err := eng.Start(loop, pool, func(h int, _ sim.Time, _ []byte) { delivered[h]++ }); err != nil {
		t.Fatal(err)
	}
	nic := eng.(*labEngine).NIC(src)
	if ports := nic.Ports(); ports < 2 {
		t.Fatalf("h0's NIC has %d ports, want a lab of at least 2 planes", ports)
	}
	n := kernelQueueLen(hosts[src].Rate, DefaultMTU)
	p := udp4(hosts[src].Addr, hosts[dst].Addr, DefaultMTU)
	for range n {
		b := pool.Get(len(p))
		b.SetLen(copy(b.Tail()[:len(p)], p))
		eng.FromKernel(src, loop.Now(), b)
	}
	// The burst leaves at one port's line: n MTU packets at 1 Gbit/s are
	// 40 ms; a second is ample.
	loop.RunUntil(loop.Now() + sim.Second)
	st := nic.Stats()
	if d := st.Drops[softnic.DropHostQueue]; d != 0 || delivered[dst] != n {
		t.Errorf("a burst of %d datagrams of one flow (mr0's ring at h0's %v bit/s): %d dropped at h0's host queue, %d of %d delivered to %s",
			n, hosts[src].Rate, d, delivered[dst], n, hosts[dst].Name)
	}
}
