package fabric_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/workload/udpgen"
)

// leafSpine builds a one-plane leaf/spine with sinks on every host and
// returns the lab, the hosts' ports and sinks.
func leafSpine(t testing.TB, p fabric.LeafSpineParams, opts fabric.BuildOptions) (*lab, [][]*fabric.Port, []*sink) {
	t.Helper()
	topo, err := fabric.LeafSpine(p)
	l := newLab(t, mustTopo(t, topo, err), opts)
	var ports [][]*fabric.Port
	var sinks []*sink
	for _, h := range topo.Hosts {
		s := &sink{}
		ps, err := l.net.Attach(h.Name, s)
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, ps)
		sinks = append(sinks, s)
	}
	return l, ports, sinks
}

func TestSwitchTTLAndChecksum(t *testing.T) {
	l, ports, sinks := leafSpine(t, fabric.LeafSpineParams{Leaves: 2, Spines: 1, HostsPerLeaf: 1}, fabric.BuildOptions{})
	h1 := l.net.Topology().Hosts[1].Addr
	// Each of the three switches drops a packet whose TTL would reach 0
	// and decrements the others: 64 arrives as 61 and 4 as 1 (valid
	// checksums); 3 dies at the last switch, 1 and 0 at the first.
	for _, ttl := range []uint8{64, 4, 3, 1, 0} {
		b := udp(l.pool, addr0, h1, 1, 2, 100, 0)
		ip := header.IPv4(b.Data())
		ip.Encode(&header.IPv4Fields{TotalLength: 100, Protocol: header.IPv4ProtoUDP, Src: addr0, Dst: h1, TTL: 1})
		for ip.TTL() != ttl { // set the TTL with a valid checksum
			if ip.TTL() < ttl {
				ip.Encode(&header.IPv4Fields{TotalLength: 100, Protocol: header.IPv4ProtoUDP, Src: addr0, Dst: h1, TTL: ttl})
			} else {
				ip.DecTTL()
			}
		}
		ports[0][0].Send(l.loop.Now(), b)
		l.loop.Run()
	}
	var ttls []uint8
	for _, a := range sinks[1].got {
		if !a.ok {
			t.Fatal("arrived with a bad header")
		}
		ttls = append(ttls, a.ttl)
	}
	if diff := cmp.Diff([]uint8{61, 1}, ttls); diff != "" {
		t.Errorf("TTLs on arrival (-want +got):\n%s", diff)
	}
	drops := l.net.Counters().Drops()
	if drops[fabric.DropTTL] != 3 {
		t.Errorf("TTL drops %d, want 3 (TTL 3 at the last switch, 1 and 0 at the first)", drops[fabric.DropTTL])
	}
	c := l.net.Counters()
	if pc, _ := c.Port("p0-leaf0", 0); pc.NodeDrops[fabric.DropTTL] != 2 {
		t.Errorf("leaf0 port 0 TTL drops %d, want 2", pc.NodeDrops[fabric.DropTTL])
	}
}

func TestSwitchDropsMalformedAndUnroutable(t *testing.T) {
	l, ports, sinks := leafSpine(t, fabric.LeafSpineParams{Leaves: 2, Spines: 1, HostsPerLeaf: 1}, fabric.BuildOptions{})
	h1 := l.net.Topology().Hosts[1].Addr
	send := func(mod func(d []byte)) {
		b := udp(l.pool, addr0, h1, 1, 2, 100, 0)
		mod(b.Data())
		ports[0][0].Send(l.loop.Now(), b)
		l.loop.Run()
	}
	send(func(d []byte) { d[10] ^= 1 })                         // checksum
	send(func(d []byte) { d[0] = 0x65 })                        // IPv6 version
	send(func(d []byte) { d[2], d[3] = 0xff, 0xff })            // total length beyond the packet
	send(func(d []byte) { copy(d[16:20], []byte{8, 8, 8, 8}) }) // unknown destination (checksum now wrong too)
	b := udp(l.pool, addr0, netip.MustParseAddr("198.18.1.200"), 1, 2, 100, 0)
	ports[0][0].Send(l.loop.Now(), b) // valid, but no host has it
	tiny := l.pool.Get(10)
	tiny.SetLen(10)
	ports[0][0].Send(l.loop.Now(), tiny)
	l.loop.Run()
	if len(sinks[1].got) != 0 {
		t.Fatalf("delivered %d bad packets", len(sinks[1].got))
	}
	c := l.net.Counters()
	pc, _ := c.Port("p0-leaf0", 0)
	var want fabric.DropCounts
	want[fabric.DropMalformed] = 5
	want[fabric.DropNoRoute] = 1
	if diff := cmp.Diff(want, pc.NodeDrops); diff != "" {
		t.Errorf("leaf0 drops (-want +got):\n%s", diff)
	}
	if l.pool.Outstanding() != 0 {
		t.Errorf("%d buffers leaked", l.pool.Outstanding())
	}
}

// ecmpSpread sends one packet of each of nflows flows (source ports
// 1..nflows) from h0 to h1 and returns how many crossed each spine.
func ecmpSpread(t *testing.T, spines, nflows int, seed uint64) []uint64 {
	l, ports, sinks := leafSpine(t, fabric.LeafSpineParams{Leaves: 2, Spines: spines, HostsPerLeaf: 1}, fabric.BuildOptions{Seed: seed})
	h1 := l.net.Topology().Hosts[1].Addr
	for f := 1; f <= nflows; f++ {
		ports[0][0].Send(l.loop.Now(), udp(l.pool, addr0, h1, uint16(f), 4791, 64, 0))
		l.loop.Run()
	}
	if len(sinks[1].got) != nflows {
		t.Fatalf("delivered %d of %d", len(sinks[1].got), nflows)
	}
	c := l.net.Counters()
	counts := make([]uint64, spines)
	for s := range counts {
		lc, _ := c.Link(fmt.Sprintf("p0-leaf0-spine%d", s), fabric.AtoB)
		counts[s] = lc.TxPackets
	}
	return counts
}

// ECMP spreads 10,000 flows over 8 spines evenly: Pearson's chi-square
// with 7 degrees of freedom stays below 24.32 (p = 0.001).
func TestECMPSpreadChiSquare(t *testing.T) {
	const spines, flows = 8, 10000
	for _, seed := range []uint64{1, 2, 3} {
		counts := ecmpSpread(t, spines, flows, seed)
		exp := float64(flows) / spines
		var chi2 float64
		for _, c := range counts {
			d := float64(c) - exp
			chi2 += d * d / exp
		}
		t.Logf("seed %d: %v chi2 %.2f", seed, counts, chi2)
		if chi2 > 24.32 {
			t.Errorf("seed %d: chi-square %.2f > 24.32: %v", seed, chi2, counts)
		}
	}
	if cmp.Equal(ecmpSpread(t, spines, 1000, 1), ecmpSpread(t, spines, 1000, 2)) {
		t.Error("the switch seed does not change the spread")
	}
}

// A flow (5-tuple) keeps one path; different switches hash independently.
func TestECMPFlowStaysOnOnePath(t *testing.T) {
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 2, Spines: 4, HostsPerLeaf: 2})
	l := newLab(t, mustTopo(t, topo, err), fabric.BuildOptions{Seed: 11})
	hs, err := udpgen.AttachAll(l.net, l.pool, l.loop)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorderWithNet{net: l.net}
	l.net.SetObserver(rec)
	for f := 0; f < 32; f++ {
		hs[0].AddFlow(udpgen.FlowSpec{Dst: hs[2].Addr(), SrcPort: uint16(1000 + f), DstPort: 4791, Size: 1000, Count: 50, Rate: 5e9})
	}
	hs[0].Start(0)
	l.loop.Run()
	path := map[uint16]int{}
	for _, e := range rec.evs {
		if e.ev != fabric.EvTransmit {
			continue
		}
		p := l.net.PortAt(e.pt.Link)
		if p.Local().Node != "p0-leaf0" || p.Remote().Node == "h0" {
			continue
		}
		if prev, ok := path[e.sport]; ok && prev != e.pt.Link {
			t.Fatalf("flow %d changed path: %s then %s", e.sport, l.net.PortAt(prev).Name(), p.Name())
		}
		path[e.sport] = e.pt.Link
	}
	if len(path) != 32 {
		t.Fatalf("saw %d flows", len(path))
	}
	rx := hs[2].Received()
	for _, r := range rx {
		if r.Packets != 50 || r.OutOfOrder != 0 {
			t.Errorf("flow %d: %d packets, %d out of order", r.SrcPort, r.Packets, r.OutOfOrder)
		}
	}
}

func FuzzSwitchReceive(f *testing.F) {
	ok := udp(packet.NewPool(), addr0, netip.MustParseAddr("198.18.1.1"), 1, 2, 60, header.ECNECT0)
	f.Add(append([]byte(nil), ok.Data()...))
	f.Add([]byte{0x45, 0, 0, 20})
	f.Add([]byte{0x4f, 0, 0, 60, 0, 0, 0, 0, 64, 17})
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 2, Spines: 2, HostsPerLeaf: 1,
		HostLink:   fabric.LinkParams{ECN: fabric.ECNConfig{Mode: fabric.ECNStep, K: 0}},
		FabricLink: fabric.LinkParams{Impair: fabric.Impairment{Corrupt: 0.5}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > packet.MaxSize {
			return
		}
		l := newLab(t, topo, fabric.BuildOptions{Seed: 1})
		sinks := []*sink{{}, {}}
		ports, _ := l.net.Attach("h0", sinks[0])
		l.net.Attach("h1", sinks[1])
		for i := 0; i < 3; i++ {
			b := l.pool.Get(len(data))
			b.SetLen(len(data))
			copy(b.Data(), data)
			ports[0].Send(l.loop.Now(), b)
		}
		l.loop.RunUntil(sim.Millisecond)
		c := l.net.Counters()
		delivered := uint64(len(sinks[0].got) + len(sinks[1].got))
		if d := c.Drops().Total(); d+delivered != 3 {
			t.Fatalf("3 packets in, %d delivered + %d dropped", delivered, d)
		}
		if l.pool.Outstanding() != 0 {
			t.Fatalf("%d buffers leaked", l.pool.Outstanding())
		}
	})
}
