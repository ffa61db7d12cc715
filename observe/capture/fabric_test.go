package capture

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/workload"
	"github.com/mrlab/mrlab/workload/udpgen"
)

// incastLab: h0 and h1 (leaf0) send to h2 (leaf1) across a lossy spine
// link; the leaf1->h2 link is the 2:1 bottleneck with ECN marking and a
// small queue, so it both marks and overflows.
func incastLab(t testing.TB, seed uint64) (*sim.Loop, *packet.Pool, *fabric.Network, []*udpgen.Host) {
	t.Helper()
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 2, Spines: 1, HostsPerLeaf: 2,
		HostLink: fabric.LinkParams{Rate: 10e9, Delay: 500, QueueBytes: 20000,
			ECN: fabric.ECNConfig{Mode: fabric.ECNStep, K: 6000}},
		FabricLink: fabric.LinkParams{Rate: 40e9, Delay: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	loop := sim.NewLoop()
	pool := packet.NewPool()
	n, err := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	imp, _ := fabric.ParseImpairment("loss random 10%")
	if err := n.SetImpairment("p0-leaf0-spine0", fabric.AtoB, imp); err != nil {
		t.Fatal(err)
	}
	hosts, err := udpgen.AttachAll(n, pool, loop)
	if err != nil {
		t.Fatal(err)
	}
	dst := hosts[2].Addr()
	for i, h := range hosts[:2] {
		if _, err := h.AddFlow(udpgen.FlowSpec{Dst: dst, SrcPort: uint16(49152 + i), DstPort: 53791,
			Size: 1500, Count: 200, ECN: header.ECNECT0}); err != nil {
			t.Fatal(err)
		}
		h.Start(0)
	}
	return loop, pool, n, hosts
}

// seqOf reads fabrictest's sequence number from a captured packet.
func seqOf(p Packet) uint64 {
	return binary.BigEndian.Uint64(p.Data[header.IPv4MinSize+header.UDPSize:])
}

func TestCaptureRealFabric(t *testing.T) {
	loop, pool, n, hosts := incastLab(t, 1)
	c := newCapture(NetworkLayout(n))
	outs := map[string]*closeBuffer{}
	for _, s := range []string{"h0", "h2-p0:BtoA", "p0-leaf0-spine0", "p0-leaf1"} {
		sp, err := ParseSpec(s)
		if err != nil {
			t.Fatal(err)
		}
		outs[s] = &closeBuffer{}
		if _, err := c.add(sp, outs[s], nil); err != nil {
			t.Fatal(err)
		}
	}
	n.SetObserver(c)
	loop.Run()
	if err := c.Close(loop.Now()); err != nil {
		t.Fatal(err)
	}
	if pool.Outstanding() != 0 {
		t.Errorf("%d packets leaked", pool.Outstanding())
	}
	snap := n.Counters()
	read := func(name string) (*Reader, []Packet) {
		r, pk, err := ReadAll(bytes.NewReader(outs[name].Bytes()))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r, pk
	}

	// h0's capture holds exactly what h0 sent, in order, on "h0:0 tx"
	// (h0 receives nothing).
	r, pk := read("h0")
	sent := hosts[0].Stats()[0].Sent
	if uint64(len(pk)) != sent || sent != 200 {
		t.Fatalf("h0 capture has %d packets, h0 sent %d", len(pk), sent)
	}
	for i, p := range pk {
		if seqOf(p) != uint64(i) || r.Interfaces()[p.Iface].Name != "h0:0 tx" || p.Comment != "" {
			t.Fatalf("h0 packet %d: seq %d on %s, comment %q", i, seqOf(p), r.Interfaces()[p.Iface].Name, p.Comment)
		}
		if i > 0 && p.Time < pk[i-1].Time {
			t.Fatalf("h0 packet %d goes back in time", i)
		}
	}

	// The bottleneck: every packet either arrived (marked or not) or was
	// dropped for a full queue, and the annotations agree with the
	// fabric's own counters and with what h2 received.
	_, pk = read("h2-p0:BtoA")
	lc, _ := snap.Link("h2-p0", fabric.BtoA)
	var marked, dropped, plain uint64
	for _, p := range pk {
		switch {
		case p.Comment == "CE marked at h2-p0 (b->a)":
			marked++
			if header.IPv4(p.Data).ECN() != header.ECNCE {
				t.Errorf("packet annotated CE is not CE in the capture")
			}
		case p.Comment == "dropped: queue full at h2-p0 (b->a)":
			dropped++
		case p.Comment == "":
			plain++
			if header.IPv4(p.Data).ECN() == header.ECNCE {
				t.Errorf("CE packet without annotation")
			}
		case strings.HasPrefix(p.Comment, "CE marked at h2-p0 (b->a); dropped"):
			t.Errorf("packet marked and dropped: %q (drops happen before marking)", p.Comment)
		default:
			t.Errorf("unexpected annotation %q", p.Comment)
		}
	}
	rx, _ := hosts[2].ReceivedTotal()
	var ce uint64
	for _, rs := range hosts[2].Received() {
		ce += rs.CE
	}
	if marked == 0 || dropped == 0 {
		t.Errorf("scenario too gentle: %d marked, %d dropped", marked, dropped)
	}
	if marked != lc.ECNMarks || dropped != lc.Drops[fabric.DropQueueFull] || marked+plain != rx || marked != ce {
		t.Errorf("capture: %d marked, %d dropped, %d plain; fabric: %d marks, %d queue drops; h2 got %d (%d CE)",
			marked, dropped, plain, lc.ECNMarks, lc.Drops[fabric.DropQueueFull], rx, ce)
	}

	t.Logf("bottleneck: %d marked, %d dropped, %d plain", marked, dropped, plain)

	// The lossy spine link: loss annotations match the impairment drops.
	_, pk = read("p0-leaf0-spine0")
	lossy, _ := snap.Link("p0-leaf0-spine0", fabric.AtoB)
	var lost, through uint64
	for _, p := range pk {
		switch p.Comment {
		case "dropped: FCS error (lost on the wire) at p0-leaf0-spine0 (a->b)":
			lost++
		case "":
			through++
		default:
			t.Errorf("spine link annotation %q", p.Comment)
		}
	}
	if lost == 0 || lost != lossy.Drops[fabric.DropFCS] || through != lossy.RxPackets {
		t.Errorf("spine link: %d lost, %d through; fabric: %d lost, %d delivered", lost, through,
			lossy.Drops[fabric.DropFCS], lossy.RxPackets)
	}

	t.Logf("spine: %d lost, %d through", lost, through)

	// The same packet (by id) is seen leaving leaf1 towards h2 in order of
	// its sequence numbers per flow.
	r, pk = read("p0-leaf1")
	last := map[uint16]uint64{}
	for _, p := range pk {
		if r.Interfaces()[p.Iface].Name != "p0-leaf1:0 tx" || p.Comment != "" {
			continue
		}
		sport := header.UDP(p.Data[header.IPv4MinSize:]).SrcPort()
		if s, ok := last[sport]; ok && seqOf(p) <= s {
			t.Errorf("flow %d: seq %d after %d", sport, seqOf(p), s)
		}
		last[sport] = seqOf(p)
	}
}

// TestCaptureDeterministic: the same seed gives byte-identical captures.
func TestCaptureDeterministic(t *testing.T) {
	run := func() []byte {
		loop, _, n, _ := incastLab(t, 7)
		c := newCapture(NetworkLayout(n))
		var out closeBuffer
		sp, _ := ParseSpec("p0-leaf1")
		c.add(sp, &out, nil)
		n.SetObserver(c)
		loop.Run()
		c.Close(loop.Now())
		return out.Bytes()
	}
	a, b := run(), run()
	if !bytes.Equal(a, b) || len(a) < 10000 {
		t.Errorf("captures differ (%d, %d bytes)", len(a), len(b))
	}
}

// steadyLab is a lab in steady state: h0 sends an endless pull-style flow
// to h2 across the spine (5 link directions, 3 switch hops per packet).
func steadyLab(t testing.TB) (*sim.Loop, *fabric.Network) {
	t.Helper()
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 2, Spines: 1, HostsPerLeaf: 2,
		HostLink: fabric.LinkParams{Rate: 100e9, Delay: 500, ECN: fabric.ECNConfig{Mode: fabric.ECNStep, K: 60000}}})
	if err != nil {
		t.Fatal(err)
	}
	loop := sim.NewLoop()
	pool := packet.NewPool()
	n, err := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := udpgen.AttachAll(n, pool, loop)
	if err != nil {
		t.Fatal(err)
	}
	hosts[0].AddFlow(udpgen.FlowSpec{Dst: hosts[2].Addr(), SrcPort: 49152, DstPort: 53791, Size: 4096, ECN: header.ECNECT0})
	hosts[0].Start(0)
	loop.RunUntil(10 * sim.Microsecond) // warm up pools, queues, maps
	return loop, n
}

// pktTime is one 4096-byte packet at 100 Gbit/s.
const pktTime = 328 * sim.Nanosecond

// TestFabricCaptureNoAllocs: forwarding with capture on (every hop of the
// flow captured) allocates nothing in steady state.
func TestFabricCaptureNoAllocs(t *testing.T) {
	loop, n := steadyLab(t)
	c := newCapture(NetworkLayout(n))
	for _, s := range []string{"h0", "h2", "p0-leaf0", "p0-spine0"} {
		sp, _ := ParseSpec(s)
		c.add(sp, nopCloser{bytesDiscard{}}, nil)
	}
	n.SetObserver(c)
	loop.RunUntil(loop.Now() + 100*pktTime)
	allocs := testing.AllocsPerRun(50, func() { loop.RunUntil(loop.Now() + 100*pktTime) })
	if allocs != 0 {
		t.Errorf("%v allocations per 100 packets with capture on", allocs)
	}
	if c.sinks[0].Packets() < 1000 {
		t.Errorf("h0 capture saw only %d packets", c.sinks[0].Packets())
	}
}

// BenchmarkCaptureOverhead measures the fabric forwarding path three ways
// in the same run, 1000 packets per iteration each: with no observer
// (baseline), with a Capture whose only point is a host the traffic never
// touches (capture "off" at these points), and with every hop captured to
// a discarding writer. It reports ns per packet and the ratios to the
// baseline.
func BenchmarkCaptureOverhead(b *testing.B) {
	type variant struct {
		name  string
		loop  *sim.Loop
		spent time.Duration
	}
	mk := func(name string, setup func(n *fabric.Network)) *variant {
		loop, n := steadyLab(b)
		setup(n)
		return &variant{name: name, loop: loop}
	}
	vs := []*variant{
		mk("off", func(*fabric.Network) {}),
		mk("disabled", func(n *fabric.Network) {
			c := newCapture(NetworkLayout(n))
			sp, _ := ParseSpec("h3")
			c.add(sp, nopCloser{bytesDiscard{}}, nil)
			n.SetObserver(c)
		}),
		mk("on", func(n *fabric.Network) {
			c := newCapture(NetworkLayout(n))
			for _, s := range []string{"h0", "h2", "p0-leaf0", "p0-spine0"} {
				sp, _ := ParseSpec(s)
				c.add(sp, nopCloser{bytesDiscard{}}, nil)
			}
			n.SetObserver(c)
		}),
	}
	const pkts = 1000
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		// Interleave so that machine noise hits every variant alike.
		for _, v := range vs {
			start := time.Now()
			v.loop.RunUntil(v.loop.Now() + pkts*pktTime)
			v.spent += time.Since(start)
		}
	}
	base := float64(vs[0].spent) / float64(b.N*pkts)
	for _, v := range vs {
		per := float64(v.spent) / float64(b.N*pkts)
		b.ReportMetric(per, "ns/pkt-"+v.name)
		if v != vs[0] {
			b.ReportMetric(per/base, v.name+"/off")
		}
	}
}

type bytesDiscard struct{}

func (bytesDiscard) Write(p []byte) (int, error) { return len(p), nil }

// TestCaptureMatchesNIC: a MetaRoCE run with a lossy, marking fabric; the
// capture at a host holds exactly the packets its NIC sent (tx) and, on the
// rx side, the packets the NIC received plus those the fabric dropped on
// the way in, each drop and mark annotated.
func TestCaptureMatchesNIC(t *testing.T) {
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Planes: 2, Leaves: 2, Spines: 2, HostsPerLeaf: 2,
		HostLink: fabric.LinkParams{Rate: 100e9, Delay: 500, QueueBytes: 64 << 10, ECN: fabric.ECNConfig{Mode: fabric.ECNStep, K: 20000}}})
	if err != nil {
		t.Fatal(err)
	}
	loop := sim.NewLoop()
	pool := packet.NewPool()
	n, err := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	loss, _ := fabric.ParseImpairment("loss 2%")
	for _, l := range []string{"h0-p0", "h0-p1"} {
		n.SetImpairment(l, fabric.BtoA, loss) // into h0
	}
	cl, err := workload.NewCluster("ls", loop, pool, n, 2, workload.NICOptions{
		Protocols: func() []transport.Protocol {
			// Without receiver hints the incast's senders start at line
			// rate, so h0's downlinks queue, mark and overflow.
			return []transport.Protocol{metaroce.NewProtocol(metaroce.Options{Paths: 4, DisableRateHint: true})}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := newCapture(NetworkLayout(n))
	var out closeBuffer
	sp, _ := ParseSpec("h0")
	c.add(sp, &out, nil)
	n.SetObserver(c)
	// Incast into h0: its downlinks queue, mark and overflow.
	if _, err := workload.Run(cl, workload.Spec{Name: workload.Incast, Transport: transport.MetaRoCE, Size: 256 << 10, Iterations: 8}); err != nil {
		t.Fatal(err)
	}
	c.Close(loop.Now())
	r, pk, err := ReadAll(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var tx, rx, dropped, marked uint64
	for _, p := range pk {
		name := r.Interfaces()[p.Iface].Name
		switch {
		case strings.HasSuffix(name, " tx"):
			tx++
		case strings.Contains(p.Comment, "dropped: "):
			// A frame lost on the wire into h0 was marked at the queue
			// before it: "CE marked at ...; dropped: FCS error ...".
			dropped++
			if strings.HasPrefix(p.Comment, "CE marked at h0-p") {
				marked++
			}
		default:
			rx++
			if strings.HasPrefix(p.Comment, "CE marked at h0-p") {
				marked++
			}
		}
	}
	st := cl.NICs[0].Stats()
	snap := n.Counters()
	var fabricDrops, fabricMarks uint64
	for _, l := range []string{"h0-p0", "h0-p1"} {
		lc, _ := snap.Link(l, fabric.BtoA)
		fabricDrops += lc.Drops.Total()
		fabricMarks += lc.ECNMarks
	}
	t.Logf("h0: %d sent, %d received (%d CE), %d dropped on the way in", tx, rx, marked, dropped)
	if tx != st.TxPackets || rx != st.RxPackets || dropped != fabricDrops || marked != fabricMarks {
		t.Errorf("capture: tx %d rx %d dropped %d marked %d; NIC: tx %d rx %d; fabric: drops %d marks %d",
			tx, rx, dropped, marked, st.TxPackets, st.RxPackets, fabricDrops, fabricMarks)
	}
	if dropped == 0 || marked == 0 {
		t.Errorf("scenario too gentle: %d drops, %d marks", dropped, marked)
	}
}
