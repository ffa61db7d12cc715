package fabric_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/workload/udpgen"
)

// A fabric link fails: packets hashed into it are black-holed until the
// detection delay passes, then routing moves them to the other spines and
// nothing more is lost; when it is repaired it rejoins after the delay.
func TestLinkFailureBlackHoleThenReroute(t *testing.T) {
	const detect = 50 * sim.Microsecond
	const failAt, repairAt, end = 100 * sim.Microsecond, 300 * sim.Microsecond, 500 * sim.Microsecond
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 2, Spines: 4, HostsPerLeaf: 1,
		HostLink: fabric.LinkParams{Delay: 500}, FabricLink: fabric.LinkParams{Delay: 500}})
	l := newLab(t, mustTopo(t, topo, err), fabric.BuildOptions{Seed: 5, DetectionDelay: detect})
	hs, err := udpgen.AttachAll(l.net, l.pool, l.loop)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorderWithNet{net: l.net}
	l.net.SetObserver(rec)
	const flows = 64
	for f := 0; f < flows; f++ {
		hs[0].AddFlow(udpgen.FlowSpec{Dst: hs[1].Addr(), SrcPort: uint16(2000 + f), DstPort: 4791, Size: 1000, Rate: 1e9})
	}
	hs[0].Start(0)
	h1 := hs[1].Addr()

	l.loop.RunUntil(failAt)
	if err := l.net.SetLinkUp(failAt, "p0-leaf1-spine2", false); err != nil {
		t.Fatal(err)
	}
	routes, _ := l.net.Route("p0-leaf0", h1)
	if len(routes) != 4 {
		t.Fatalf("leaf0 group right after the failure: %v (routing must not know yet)", routes)
	}
	l.loop.RunUntil(failAt + detect)
	routes, _ = l.net.Route("p0-leaf0", h1)
	if diff := cmp.Diff([]string{"p0-leaf0-spine0", "p0-leaf0-spine1", "p0-leaf0-spine3"}, routes); diff != "" {
		t.Errorf("leaf0 group after detection (-want +got):\n%s", diff)
	}
	// Routing is plain shortest path: spine2 now reaches h1 through a
	// leaf and another spine (no valley-free policy), never its dead link.
	if r, _ := l.net.Route("p0-spine2", h1); len(r) == 0 || cmp.Equal(r, []string{"p0-leaf1-spine2"}) {
		t.Errorf("spine2 routes to h1 via %v", r)
	}
	l.loop.RunUntil(repairAt)
	if err := l.net.SetLinkUp(repairAt, "p0-leaf1-spine2", true); err != nil {
		t.Fatal(err)
	}
	l.loop.RunUntil(repairAt + detect/2)
	if routes, _ = l.net.Route("p0-leaf0", h1); len(routes) != 3 {
		t.Errorf("leaf0 group while the repaired link is joining: %v", routes)
	}
	if up, routing, _ := l.net.LinkState("p0-leaf1-spine2"); !up || routing != "joining" {
		t.Errorf("repaired link: up=%v routing=%s", up, routing)
	}
	l.loop.RunUntil(repairAt + detect)
	if routes, _ = l.net.Route("p0-leaf0", h1); len(routes) != 4 {
		t.Errorf("leaf0 group after repair: %v", routes)
	}
	l.loop.RunUntil(end)
	hs[0].Stop()
	l.loop.Run()

	var holes, other int
	for _, e := range rec.evs {
		if e.ev != fabric.EvDrop {
			continue
		}
		switch {
		case e.reason == fabric.DropBlackHole:
			holes++
			if e.at < failAt || e.at >= failAt+detect || e.pt.Node != "p0-spine2" {
				t.Errorf("black hole at %v on %q", e.at, e.pt.Node)
			}
		case e.reason == fabric.DropLinkDown && e.at >= failAt && e.at <= failAt+500+8+1:
			// Queued at the failure, or on the wire (500 ns propagation
			// after 8 ns of serialization) and lost at the far end.
			other++
		default:
			t.Errorf("unexpected drop %v at %v at %s", e.reason, e.at, l.net.PointName(e.pt))
		}
	}
	// About a quarter of 64 flows x 1 Gbit/s of 1000-byte packets = 16
	// flows x 6.25 packets per flow in 50 us.
	if holes < 50 || holes > 200 {
		t.Errorf("%d black-holed packets in the detection window", holes)
	}
	// Every flow is heard after the failure is detected, and no packet
	// sent after detection is lost.
	sent, got := uint64(0), uint64(0)
	for _, s := range hs[0].Stats() {
		sent += s.Sent
	}
	got, _ = hs[1].ReceivedTotal()
	if lost := sent - got; lost != uint64(holes+other) {
		t.Errorf("sent %d, received %d: %d lost, %d explained", sent, got, lost, holes+other)
	}
	if l.pool.Outstanding() != 0 {
		t.Errorf("%d buffers leaked", l.pool.Outstanding())
	}
}

// A leaf-side failure black-holes at the leaf.
func TestLeafUplinkFailureBlackHolesAtLeaf(t *testing.T) {
	const detect = 20 * sim.Microsecond
	l, ports, sinks := leafSpine(t, fabric.LeafSpineParams{Leaves: 2, Spines: 2, HostsPerLeaf: 1}, fabric.BuildOptions{DetectionDelay: detect})
	h1 := l.net.Topology().Hosts[1].Addr
	l.net.SetLinkUp(0, "p0-leaf0-spine0", false)
	for f := 0; f < 100; f++ {
		ports[0][0].Send(l.loop.Now(), udp(l.pool, addr0, h1, uint16(f), 1, 100, 0))
	}
	l.loop.RunUntil(detect)
	for f := 0; f < 100; f++ {
		ports[0][0].Send(l.loop.Now(), udp(l.pool, addr0, h1, uint16(f), 1, 100, 0))
	}
	l.loop.Run()
	pc, _ := l.net.Counters().Port("p0-leaf0", 1) // port to spine0
	holes := pc.NodeDrops[fabric.DropBlackHole]
	if holes == 0 || holes+uint64(len(sinks[1].got)) != 200 || len(sinks[1].got) < 100 {
		t.Errorf("black-holed %d at leaf0's spine0 port, delivered %d", holes, len(sinks[1].got))
	}
}

func TestSwitchAndPlaneDown(t *testing.T) {
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Planes: 2, Leaves: 2, Spines: 2, HostsPerLeaf: 1})
	l := newLab(t, mustTopo(t, topo, err), fabric.BuildOptions{DetectionDelay: -1})
	hs, err := udpgen.AttachAll(l.net, l.pool, l.loop)
	if err != nil {
		t.Fatal(err)
	}
	ports, _ := l.net.Ports("h0")
	for pl := 0; pl < 2; pl++ {
		hs[0].AddFlow(udpgen.FlowSpec{Name: fmt.Sprint("plane", pl), Dst: hs[1].Addr(), SrcPort: uint16(pl + 1), DstPort: 9, Size: 1000, Plane: pl, Rate: 1e9})
	}
	hs[0].Start(0)
	l.loop.RunUntil(10 * sim.Microsecond)
	if err := l.net.SetPlaneUp(10*sim.Microsecond, 1, false); err != nil {
		t.Fatal(err)
	}
	if ports[1].Up() || !ports[0].Up() {
		t.Fatalf("plane 1 down: port up = %v, %v", ports[0].Up(), ports[1].Up())
	}
	l.loop.RunUntil(50 * sim.Microsecond)
	before, _ := hs[1].ReceivedTotal()
	rx := hs[1].Received()
	l.net.SetPlaneUp(50*sim.Microsecond, 1, true)
	// One spine down: with immediate detection, nothing is lost.
	l.net.SetSwitchUp(50*sim.Microsecond, "p0-spine0", false)
	l.loop.RunUntil(100 * sim.Microsecond)
	hs[0].Stop()
	l.loop.Run()
	after, _ := hs[1].ReceivedTotal()
	if rx[0].Packets < 5 || rx[1].Packets > 2 {
		t.Errorf("with plane 1 down: received per plane %d, %d", rx[0].Packets, rx[1].Packets)
	}
	if after-before < 2*5 {
		t.Errorf("after restore: %d more packets", after-before)
	}
	c := l.net.Counters()
	lc, _ := c.Link("h0-p1", fabric.AtoB)
	if lc.Drops[fabric.DropLinkDown] < 4 {
		t.Errorf("h0-p1 link-down drops %d", lc.Drops[fabric.DropLinkDown])
	}
	if d := c.Drops(); d[fabric.DropBlackHole] != 0 || d[fabric.DropNoRoute] != 0 {
		t.Errorf("drops with immediate detection: %v", d)
	}
	if up, routing, _ := l.net.LinkState("p0-leaf0-spine0"); up || routing != "down" {
		t.Errorf("p0-leaf0-spine0: up=%v routing=%s", up, routing)
	}
	if err := l.net.SetSwitchUp(0, "h0", false); err == nil {
		t.Error("SetSwitchUp accepted a host")
	}
	if err := l.net.SetPlaneUp(0, 7, false); err == nil {
		t.Error("SetPlaneUp accepted a missing plane")
	}
}

// traceRun runs a busy, impaired 2-plane leaf/spine and returns its trace
// hash and counters.
func traceRun(t *testing.T, seed uint64) (uint64, uint64, fabric.Snapshot) {
	imp, err := fabric.ParseImpairment("delay 2us 1us distribution normal loss gemodel 2% 20% 80% 0.1% duplicate 1% corrupt 1% reorder 10%")
	if err != nil {
		t.Fatal(err)
	}
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Planes: 2, Leaves: 2, Spines: 2, HostsPerLeaf: 2,
		HostLink:   fabric.LinkParams{Delay: 500, QueueBytes: 64 << 10, ECN: fabric.ECNConfig{Mode: fabric.ECNRED, Min: 8000, Max: 32000, PMax: 0.2}},
		FabricLink: fabric.LinkParams{Delay: 800, QueueBytes: 64 << 10, ECN: fabric.ECNConfig{Mode: fabric.ECNStep, K: 16000}},
	})
	topo.Links[len(topo.Links)-1].Params.Impair = imp
	l := newLab(t, mustTopo(t, topo, err), fabric.BuildOptions{Seed: seed, DetectionDelay: 10 * sim.Microsecond})
	th := fabric.NewTraceHash()
	l.net.SetObserver(th)
	hs, err := udpgen.AttachAll(l.net, l.pool, l.loop)
	if err != nil {
		t.Fatal(err)
	}
	for i, src := range hs {
		for j, dst := range hs {
			if i == j {
				continue
			}
			for f := 0; f < 4; f++ {
				hs[i].AddFlow(udpgen.FlowSpec{Dst: dst.Addr(), SrcPort: uint16(100*j + f), DstPort: 4791, Size: 1024,
					Plane: f % 2, Rate: 20e9, Count: 120, ECN: 2})
			}
		}
		src.Start(0)
	}
	l.loop.RunUntil(50 * sim.Microsecond)
	l.net.SetLinkUp(50*sim.Microsecond, "p1-leaf1-spine0", false)
	l.loop.Run()
	return th.Sum(), th.Events(), l.net.Counters()
}

// The same topology and seed give the same trace twice; another seed gives
// another.
func TestDeterministicTrace(t *testing.T) {
	h1, n1, c1 := traceRun(t, 1)
	h2, n2, c2 := traceRun(t, 1)
	h3, _, _ := traceRun(t, 2)
	if h1 != h2 || n1 != n2 {
		t.Errorf("same seed, different traces: %x (%d events) vs %x (%d)", h1, n1, h2, n2)
	}
	if diff := cmp.Diff(c1, c2); diff != "" {
		t.Errorf("same seed, different counters:\n%s", diff)
	}
	if h1 == h3 {
		t.Errorf("seeds 1 and 2 gave the same trace %x", h1)
	}
	d := c1.Drops()
	var marks uint64
	for _, l := range c1.Links {
		marks += l.ECNMarks
	}
	// The run must exercise what it claims to.
	if d[fabric.DropFCS] == 0 || d[fabric.DropBlackHole] == 0 || marks == 0 {
		t.Errorf("trace run too tame: drops %v, %d marks", d, marks)
	}
	t.Logf("trace %x, %d events, drops %v, %d marks", h1, n1, d, marks)
}

// Loss models applied by a link match their Markov steady state.
func TestLinkLossMatchesSteadyState(t *testing.T) {
	for _, c := range []struct {
		spec string
		at   fabric.LossPoint
	}{
		{"loss gemodel 1% 10% 70% 0.1%", fabric.LossAtWire},
		{"loss state 1% 10% 2% 5% 0.1%", fabric.LossAtEnqueue},
		{"loss random 1%", fabric.LossAtWire},
	} {
		spec := c.spec
		reason := fabric.DropFCS
		if c.at == fabric.LossAtEnqueue {
			reason = fabric.DropImpairment
		}
		imp, err := fabric.ParseImpairment(spec)
		if err != nil {
			t.Fatal(err)
		}
		want, err := imp.Loss.SteadyState()
		if err != nil {
			t.Fatal(err)
		}
		l, port, _ := b2b(t, fabric.LinkParams{Rate: 100e9, Impair: imp, LossAt: c.at}, fabric.BuildOptions{Seed: 77})
		var outcomes []bool // true = lost
		l.net.SetObserver(observerFunc(func(ev fabric.Event, r fabric.DropReason) {
			switch {
			case ev == fabric.EvEnqueue:
				outcomes = append(outcomes, false)
			case ev == fabric.EvDrop && r == reason && c.at == fabric.LossAtWire:
				outcomes[len(outcomes)-1] = true // enqueued, lost on the wire
			case ev == fabric.EvDrop && r == reason:
				outcomes = append(outcomes, true) // dropped before the queue
			}
		}))
		const n = 400_000
		for i := 0; i < n; i++ {
			port.Send(l.loop.Now(), udp(l.pool, addr0, addr1, 1, 2, 64, 0))
			l.loop.Run()
		}
		lost, bursts := 0, 0
		for i, o := range outcomes {
			if o {
				lost++
				if i == 0 || !outcomes[i-1] {
					bursts++
				}
			}
		}
		rate, burst := float64(lost)/n, float64(lost)/float64(bursts)
		lc, _ := l.net.Counters().Link("p0-h0-h1", fabric.AtoB)
		if lc.Drops[reason] != uint64(lost) || len(outcomes) != n {
			t.Fatalf("%s: counter %d, observed %d of %d", spec, lc.Drops[reason], lost, len(outcomes))
		}
		if math.Abs(rate-want.Rate) > 0.05*want.Rate || math.Abs(burst-want.MeanBurst) > 0.05*want.MeanBurst {
			t.Errorf("%s: rate %.5f burst %.3f; steady state %.5f, %.3f", spec, rate, burst, want.Rate, want.MeanBurst)
		}
	}
}

type observerFunc func(ev fabric.Event, r fabric.DropReason)

func (f observerFunc) Observe(_ sim.Time, ev fabric.Event, _ fabric.Point, _ *packet.Buffer, r fabric.DropReason) {
	f(ev, r)
}

func TestTopologyValidate(t *testing.T) {
	good, _ := fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 2, Spines: 1, HostsPerLeaf: 1})
	cases := []struct {
		name   string
		mod    func(t *fabric.Topology)
		kind   string
		index  int
		field  string
		substr string
	}{
		{"dup host", func(t *fabric.Topology) { t.Hosts[1].Name = "h0" }, "host", 1, "name", "already used"},
		{"dup addr", func(t *fabric.Topology) { t.Hosts[1].Addr = t.Hosts[0].Addr }, "host", 1, "addr", "already used"},
		{"unknown node", func(t *fabric.Topology) { t.Links[0].B.Node = "nowhere" }, "link", 0, "b", `unknown node "nowhere"`},
		{"port reuse", func(t *fabric.Topology) { t.Links[1].B = t.Links[0].B }, "link", 1, "b", "already wired"},
		{"host port", func(t *fabric.Topology) { t.Links[0].A.Port = 3 }, "link", 0, "a", "has no port 3"},
		{"rate", func(t *fabric.Topology) { t.Links[2].Params.Rate = 0 }, "link", 2, "params", "rate"},
		{"ecn", func(t *fabric.Topology) {
			t.Links[2].Params.ECN = fabric.ECNConfig{Mode: fabric.ECNRED, Min: 10, Max: 5}
		}, "link", 2, "params", "min"},
		{"impairment", func(t *fabric.Topology) { t.Links[2].Params.Impair.Duplicate = 2 }, "link", 2, "params", "duplicate"},
		{"switch name", func(t *fabric.Topology) { t.Switches[0].Name = "h1" }, "switch", 0, "name", "already used"},
	}
	for _, c := range cases {
		topo := *good
		topo.Hosts = append([]fabric.Host(nil), good.Hosts...)
		topo.Switches = append([]fabric.Switch(nil), good.Switches...)
		topo.Links = append([]fabric.Link(nil), good.Links...)
		c.mod(&topo)
		_, err := fabric.Build(sim.NewLoop(), nil, &topo, fabric.BuildOptions{})
		if err == nil {
			t.Errorf("%s: Build accepted", c.name)
			continue
		}
		err = topo.Validate()
		var te *fabric.TopologyError
		if !errors.As(err, &te) {
			t.Errorf("%s: %v is not a TopologyError", c.name, err)
			continue
		}
		if te.Kind != c.kind || te.Index != c.index || te.Field != c.field || !strings.Contains(err.Error(), c.substr) {
			t.Errorf("%s: got %s %d field %s: %v", c.name, te.Kind, te.Index, te.Field, err)
		}
	}
	if err := good.Validate(); err != nil {
		t.Errorf("builder topology invalid: %v", err)
	}
}

func TestAttach(t *testing.T) {
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Planes: 3, Leaves: 1, Spines: 0, HostsPerLeaf: 2})
	l := newLab(t, mustTopo(t, topo, err), fabric.BuildOptions{})
	ports, err := l.net.Attach("h1", &sink{})
	if err != nil {
		t.Fatal(err)
	}
	for pl, p := range ports {
		if p.Link() != fmt.Sprintf("h1-p%d", pl) || p.Remote().Node != fmt.Sprintf("p%d-leaf0", pl) || p.Rate() != 100e9 || !p.Up() || !p.Idle() {
			t.Errorf("port %d: %s to %v", pl, p.Name(), p.Remote())
		}
	}
	if _, err := l.net.Attach("h1", &sink{}); err == nil {
		t.Error("attached twice")
	}
	if _, err := l.net.Attach("p0-leaf0", &sink{}); err == nil {
		t.Error("attached a switch")
	}
	// h0 has no NIC: packets for it are counted, not lost silently.
	ports[0].Send(0, udp(l.pool, topo.Hosts[1].Addr, topo.Hosts[0].Addr, 1, 2, 100, 0))
	l.loop.Run()
	lc, _ := l.net.Counters().Link("h0-p0", fabric.BtoA)
	if lc.Drops[fabric.DropNoRoute] != 1 {
		t.Errorf("unattached host drops: %v", lc.Drops)
	}
}

func TestSettersAndSnapshotOrder(t *testing.T) {
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 1, Spines: 0, HostsPerLeaf: 12})
	l := newLab(t, mustTopo(t, topo, err), fabric.BuildOptions{})
	if err := l.net.SetImpairment("h3-p0", fabric.Both, fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossRandom, P: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		l.net.SetImpairment("nope", fabric.AtoB, fabric.Impairment{}),
		l.net.SetImpairment("h3-p0", fabric.AtoB, fabric.Impairment{Duplicate: 3}),
		l.net.SetImpairment("h3-p0", fabric.Direction(7), fabric.Impairment{}),
		l.net.SetRate("h3-p0", fabric.AtoB, 0),
		l.net.SetECN("h3-p0", fabric.AtoB, fabric.ECNConfig{Mode: fabric.ECNStep, K: -1}),
		l.net.SetLinkUp(0, "nope", false),
	} {
		if err == nil {
			t.Error("a bad setter call was accepted")
		}
	}
	if err := l.net.SetRate("h3-p0", fabric.BtoA, 25e9); err != nil {
		t.Fatal(err)
	}
	if p, _ := l.net.LinkPort("h3-p0", fabric.BtoA); p.Rate() != 25e9 {
		t.Errorf("rate %v", p.Rate())
	}
	ports, _ := l.net.Attach("h3", &sink{})
	ports[0].Send(0, udp(l.pool, topo.Hosts[3].Addr, topo.Hosts[4].Addr, 1, 2, 100, 0))
	l.loop.Run()
	c := l.net.Counters()
	// The packet was lost on the wire into p0-leaf0: the switch's port
	// counts the FCS error, h3's sent it through a free line.
	if pc, _ := c.Port("h3", 0); pc.Drops.Total() != 0 || pc.TxPackets != 1 {
		t.Errorf("h3 port drops %v", pc.Drops)
	}
	if lc, _ := c.Link("h3-p0", fabric.AtoB); lc.Drops[fabric.DropFCS] != 1 || lc.TxPackets != 1 {
		t.Errorf("h3-p0 link: %d transmitted, drops %v", lc.TxPackets, lc.Drops)
	}
	var order []string
	for _, p := range c.Ports[:13] {
		order = append(order, fmt.Sprintf("%s/%d", p.Node, p.Port))
	}
	want := []string{"h0/0", "h1/0", "h2/0", "h3/0", "h4/0", "h5/0", "h6/0", "h7/0", "h8/0", "h9/0", "h10/0", "h11/0", "p0-leaf0/0"}
	if diff := cmp.Diff(want, order); diff != "" {
		t.Errorf("port order (-want +got):\n%s", diff)
	}
}
