package fabric_test

import (
	"net/netip"
	"testing"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// pullHost sends count packets of size bytes to dst back to back, one
// each time its port goes idle (as a NIC does), and counts what it
// receives.
type pullHost struct {
	pool   *packet.Pool
	port   *fabric.Port
	src    netip.Addr
	dst    netip.Addr
	sport  uint16
	size   int
	left   int
	got    int
	gotB   int
	sends  int
	blocks int // sends skipped because the port was not idle
	// onRecv, if set, hears the source of every packet received.
	onRecv func(src netip.Addr)
}

func (h *pullHost) start(now sim.Time) {
	h.port.SetOnIdle(h.send)
	h.send(now)
}

func (h *pullHost) send(now sim.Time) {
	if h.left == 0 {
		return
	}
	if !h.port.Idle() {
		h.blocks++
		return
	}
	h.left--
	h.sends++
	h.sport++
	h.port.Send(now, udp(h.pool, h.src, h.dst, 10000+h.sport%64, 4791, h.size, 0))
}

func (h *pullHost) Receive(now sim.Time, port int, b *packet.Buffer) {
	h.got++
	h.gotB += b.Len()
	if h.onRecv != nil {
		h.onRecv(header.IPv4(b.Data()).Src())
	}
	b.Free()
}

// incastLab builds leaves x hostsPerLeaf hosts with small queues and
// links of the given delay, PFC (if pfc is on) on every link, every host
// but h0 sending count packets to h0.
func incastLab(t *testing.T, leaves, hpl int, pfc fabric.PFCConfig, delay sim.Time, count int) (*lab, []*pullHost) {
	t.Helper()
	lp := fabric.LinkParams{Rate: 100e9, Delay: delay, QueueBytes: 32 << 10, PFC: pfc}
	topo := pfcTopo(t, fabric.LeafSpineParams{Leaves: leaves, Spines: 1, HostsPerLeaf: hpl, HostLink: lp, FabricLink: lp})
	if leaves == 1 {
		topo = pfcTopo(t, fabric.LeafSpineParams{Leaves: 1, HostsPerLeaf: hpl, HostLink: lp})
	}
	l := newLab(t, topo, fabric.BuildOptions{Seed: 1})
	hosts := attachPull(t, l, topo)
	for _, h := range hosts[1:] {
		h.dst = topo.Hosts[0].Addr
		h.left = count
		h.start(0)
	}
	l.loop.RunUntil(100 * sim.Millisecond)
	return l, hosts
}

// attachPull attaches a pullHost to every host of topo (port 0).
func attachPull(t *testing.T, l *lab, topo *fabric.Topology) []*pullHost {
	t.Helper()
	var hosts []*pullHost
	for _, th := range topo.Hosts {
		h := &pullHost{pool: l.pool, src: th.Addr, size: 4124}
		ports, err := l.net.Attach(th.Name, h)
		if err != nil {
			t.Fatal(err)
		}
		h.port = ports[0]
		hosts = append(hosts, h)
	}
	return hosts
}

// TestPFCLossless: an incast that overflows 32 KiB drop-tail queues
// loses packets without PFC and none with it; every packet arrives, the
// senders were paused, and no ingress holds more than XOff plus the
// headroom the pause's delay needs.
func TestPFCLossless(t *testing.T) {
	const count = 300
	for _, c := range []struct {
		name        string
		leaves, hpl int
		delay       sim.Time
	}{
		{"one switch", 1, 4, sim.Microsecond},
		{"leaf-spine-leaf", 2, 3, sim.Microsecond},
		{"long links", 2, 3, 5 * sim.Microsecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			lossy, lh := incastLab(t, c.leaves, c.hpl, fabric.PFCConfig{}, c.delay, count)
			sent := (len(lh) - 1) * count
			snap := lossy.net.Counters()
			d := snap.Drops()
			if d[fabric.DropQueueFull] == 0 || lh[0].got+int(d.Total()) != sent {
				t.Fatalf("without PFC: %d queue drops, %d received of %d: want drops, and drops+received = sent", d[fabric.DropQueueFull], lh[0].got, sent)
			}
			if lossy.net.PFCEnabled() || snap.PFCPauses() != 0 {
				t.Errorf("PFC reported on a network built without it")
			}

			cfg := fabric.PFCConfig{XOff: 16 << 10, XOn: 8 << 10}
			// What arrives after the ingress crosses XOff: the PAUSE waits
			// for the reverse direction's packet, crosses the link, and
			// the sender finishes its packet; meanwhile a link's
			// bandwidth-delay product is on the wire each way.
			bdp := int(100e9 / 8 * c.delay.Seconds())
			headroom := 2*bdp + 3*4124 + 64
			l, hosts := incastLab(t, c.leaves, c.hpl, cfg, c.delay, count)
			snap = l.net.Counters()
			if d := snap.Drops(); d.Total() != 0 {
				t.Errorf("with PFC: drops %v, want none", d)
			}
			if hosts[0].got != sent {
				t.Errorf("with PFC: received %d of %d", hosts[0].got, sent)
			}
			if !l.net.PFCEnabled() {
				t.Errorf("PFCEnabled false")
			}
			var hostPaused bool
			var maxIn int
			for _, x := range snap.Links {
				if x.PFCPauses > 0 && x.Dir == fabric.AtoB && x.Link != "h0-p0" && x.From.Node[0] == 'h' {
					hostPaused = true
				}
				if x.PFCPauses > 0 && x.PFCPausedTime <= 0 {
					t.Errorf("%s %v: %d pauses but no paused time", x.Link, x.Dir, x.PFCPauses)
				}
				maxIn = max(maxIn, x.PFCMaxIngressBytes)
				if x.PFCMaxIngressBytes > cfg.XOff+headroom {
					t.Errorf("%s %v: %d bytes waited from one ingress, want <= XOff + %d", x.Link, x.Dir, x.PFCMaxIngressBytes, headroom)
				}
			}
			if snap.PFCPauses() == 0 || !hostPaused {
				t.Errorf("no sender was paused: %d pauses", snap.PFCPauses())
			}
			if c.delay > sim.Microsecond && maxIn <= cfg.XOff+bdp {
				t.Errorf("longest ingress %d bytes: a pause that takes %v to arrive should let more than XOff + one BDP (%d) in", maxIn, c.delay, cfg.XOff+bdp)
			}
			// Every ingress holds at most XOff plus the headroom, so no
			// queue grows past that times the ingresses feeding it.
			bott, _ := snap.Link("h0-p0", fabric.BtoA)
			if limit := (len(hosts) - 1) * (cfg.XOff + headroom); bott.QueueMaxBytes > limit {
				t.Errorf("bottleneck queue reached %d bytes, want <= %d", bott.QueueMaxBytes, limit)
			}
			if l.pool.Outstanding() != 0 {
				t.Errorf("%d buffers outstanding after the run", l.pool.Outstanding())
			}
		})
	}
}

// TestPFCPerLink: PFC protects only what arrives through a PFC link. With
// PFC on h1's link alone, an incast into h0 drops packets of the other
// senders and none of h1's, and only h1 is paused.
func TestPFCPerLink(t *testing.T) {
	lp := fabric.LinkParams{Rate: 100e9, Delay: sim.Microsecond, QueueBytes: 32 << 10}
	topo := pfcTopo(t, fabric.LeafSpineParams{Leaves: 1, HostsPerLeaf: 4, HostLink: lp})
	for i := range topo.Links {
		if topo.Links[i].Name == "h1-p0" {
			topo.Links[i].Params.PFC = fabric.PFCConfig{XOff: 16 << 10, XOn: 8 << 10}
		}
	}
	l := newLab(t, topo, fabric.BuildOptions{Seed: 1})
	hosts := attachPull(t, l, topo)
	const count = 300
	for _, h := range hosts[1:] {
		h.dst = topo.Hosts[0].Addr
		h.left = count
		h.start(0)
	}
	got := map[netip.Addr]int{}
	hosts[0].onRecv = func(src netip.Addr) { got[src]++ }
	l.loop.RunUntil(100 * sim.Millisecond)
	snap := l.net.Counters()
	if got[topo.Hosts[1].Addr] != count {
		t.Errorf("h1 (PFC link): %d of %d packets arrived", got[topo.Hosts[1].Addr], count)
	}
	if d := snap.Drops()[fabric.DropQueueFull]; d == 0 || int(d)+hosts[0].got != 3*count {
		t.Errorf("%d queue drops, %d received of %d: want the lossy senders to lose some", d, hosts[0].got, 3*count)
	}
	for _, x := range snap.Links {
		if x.PFCPauses > 0 && x.Link != "h1-p0" {
			t.Errorf("%s %v paused %d times; only h1-p0 has PFC", x.Link, x.Dir, x.PFCPauses)
		}
	}
	if x, _ := snap.Link("h1-p0", fabric.AtoB); x.PFCPauses == 0 {
		t.Errorf("h1 was never paused")
	}
}

// TestPFCHeadOfLineBlocking: the pause that protects an incast also stops
// a flow to an idle destination that shares the paused links (the victim),
// and it spreads hop by hop from the congested switch back to the hosts.
// Without PFC the victim runs at line rate (the incast loses packets
// instead).
func TestPFCHeadOfLineBlocking(t *testing.T) {
	run := func(pfc fabric.PFCConfig) (victimDone sim.Time, snap fabric.Snapshot) {
		host := fabric.LinkParams{Rate: 100e9, Delay: sim.Microsecond, QueueBytes: 64 << 10, PFC: pfc}
		fab := host
		fab.Rate = 400e9 // non-blocking: 4 hosts x 100 Gbit/s per leaf
		topo := pfcTopo(t, fabric.LeafSpineParams{Leaves: 2, Spines: 1, HostsPerLeaf: 4, HostLink: host, FabricLink: fab})
		l := newLab(t, topo, fabric.BuildOptions{Seed: 1})
		hosts := attachPull(t, l, topo)
		const count = 400
		// h1, h2, h3 (leaf 0) -> h4 (leaf 1): 300 Gbit/s into 100.
		for _, i := range []int{1, 2, 3} {
			hosts[i].dst, hosts[i].left = topo.Hosts[4].Addr, count
		}
		// The victim, h0 -> h7, crosses the same leaf 0 uplink and spine
		// downlink to an idle host.
		hosts[0].dst, hosts[0].left = topo.Hosts[7].Addr, count
		hosts[7].onRecv = func(netip.Addr) {
			if hosts[7].got == count {
				victimDone = l.loop.Now()
			}
		}
		for _, i := range []int{0, 1, 2, 3} {
			hosts[i].start(0)
		}
		l.loop.RunUntil(100 * sim.Millisecond)
		if hosts[7].got != count {
			t.Fatalf("victim received %d of %d packets", hosts[7].got, count)
		}
		return victimDone, l.net.Counters()
	}
	lossy, _ := run(fabric.PFCConfig{})
	lossless, snap := run(fabric.PFCConfig{XOff: 32 << 10, XOn: 24 << 10})
	t.Logf("victim done: %v without PFC, %v with", lossy, lossless)
	// Alone at 100 Gbit/s, 400 packets of 4124 bytes take 132 us.
	if alone := serialization(400*4124, 100e9); lossy > alone+20*sim.Microsecond {
		t.Errorf("without PFC the victim took %v, want about %v (line rate)", lossy, alone)
	}
	if lossless < lossy*3/2 {
		t.Errorf("with PFC the victim took %v, without %v: want head-of-line blocking to slow it by half or more", lossless, lossy)
	}
	// The pause spreads: the congested leaf pauses the spine, the spine
	// pauses leaf 0, leaf 0 pauses the hosts, the victim among them.
	for _, hop := range []struct {
		link string
		dir  fabric.Direction
	}{
		{"p0-leaf1-spine0", fabric.BtoA}, // spine -> leaf 1
		{"p0-leaf0-spine0", fabric.AtoB}, // leaf 0 -> spine
		{"h0-p0", fabric.AtoB},           // the victim's own uplink
	} {
		if x, _ := snap.Link(hop.link, hop.dir); x.PFCPauses == 0 {
			t.Errorf("%s %v was never paused", hop.link, hop.dir)
		}
	}
	if d := snap.Drops(); d.Total() != 0 {
		t.Errorf("with PFC: drops %v", d)
	}
}

func serialization(n int, rate float64) sim.Time { return sim.Time(float64(n) * 8 / rate * 1e9) }

// TestPFCConfig rejects bad thresholds.
func TestPFCConfig(t *testing.T) {
	for _, bad := range []fabric.PFCConfig{{XOff: 1000, XOn: 1000}, {XOff: -1}, {XOff: 1000, XOn: 2000}, {XOn: 10}} {
		lp := fabric.LinkParams{Rate: 100e9, Delay: sim.Microsecond, PFC: bad}
		topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 1, HostsPerLeaf: 2, HostLink: lp})
		if err == nil {
			l := &lab{loop: sim.NewLoop(), pool: packet.NewPool()}
			_, err = fabric.Build(l.loop, l.pool, topo, fabric.BuildOptions{})
		}
		if err == nil {
			t.Errorf("accepted PFC %+v", bad)
		}
	}
	if err := fabric.DefaultPFC().Validate(); err != nil || !fabric.DefaultPFC().Enabled() {
		t.Errorf("DefaultPFC() %+v: %v", fabric.DefaultPFC(), err)
	}
}

// TestPFCDeterministic: the same lossless run twice gives the same trace.
func TestPFCDeterministic(t *testing.T) {
	run := func() uint64 {
		lp := fabric.LinkParams{Rate: 100e9, Delay: sim.Microsecond, QueueBytes: 32 << 10, PFC: fabric.DefaultPFC()}
		topo := pfcTopo(t, fabric.LeafSpineParams{Leaves: 2, Spines: 2, HostsPerLeaf: 3, HostLink: lp, FabricLink: lp})
		l := newLab(t, topo, fabric.BuildOptions{Seed: 3})
		th := fabric.NewTraceHash()
		l.net.SetObserver(th)
		hosts := attachPull(t, l, topo)
		for _, h := range hosts[1:] {
			h.dst, h.left = topo.Hosts[0].Addr, 200
			h.start(0)
		}
		l.loop.Run()
		return th.Sum()
	}
	if a, b := run(), run(); a != b {
		t.Errorf("trace hashes differ: %x, %x", a, b)
	}
}

// pfcTopo builds a leaf/spine topology or fails the test.
func pfcTopo(t *testing.T, p fabric.LeafSpineParams) *fabric.Topology {
	t.Helper()
	topo, err := fabric.LeafSpine(p)
	return mustTopo(t, topo, err)
}
