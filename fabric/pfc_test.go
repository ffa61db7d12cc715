package fabric_test

import (
	"net/netip"
	"testing"

	"github.com/mrlab/mrlab/fabric"
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
	b.Free()
}

// incastLab builds leaves x hostsPerLeaf hosts with small queues, every
// host but h0 sending count packets to h0.
func incastLab(t *testing.T, leaves, hpl int, pfc *fabric.PFCConfig, count int) (*lab, []*pullHost) {
	t.Helper()
	lp := fabric.LinkParams{Rate: 100e9, Delay: sim.Microsecond, QueueBytes: 32 << 10}
	topo := pfcTopo(t, fabric.LeafSpineParams{Leaves: leaves, Spines: 1, HostsPerLeaf: hpl, HostLink: lp, FabricLink: lp})
	if leaves == 1 {
		topo = pfcTopo(t, fabric.LeafSpineParams{Leaves: 1, HostsPerLeaf: hpl, HostLink: lp})
	}
	l := newLab(t, topo, fabric.BuildOptions{Seed: 1, PFC: pfc})
	var hosts []*pullHost
	for _, th := range topo.Hosts {
		h := &pullHost{pool: l.pool, src: th.Addr, dst: topo.Hosts[0].Addr, size: 4124}
		ports, err := l.net.Attach(th.Name, h)
		if err != nil {
			t.Fatal(err)
		}
		h.port = ports[0]
		hosts = append(hosts, h)
	}
	for _, h := range hosts[1:] {
		h.left = count
		h.start(0)
	}
	l.loop.RunUntil(100 * sim.Millisecond)
	return l, hosts
}

// TestPFCLossless: an incast that overflows 32 KiB drop-tail queues
// loses packets without PFC and none with it; every packet arrives, the
// senders were paused, and the bottleneck queue stays bounded by the
// pause thresholds.
func TestPFCLossless(t *testing.T) {
	const count = 300
	for _, c := range []struct {
		name        string
		leaves, hpl int
	}{
		{"one switch", 1, 4},
		{"leaf-spine-leaf", 2, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			lossy, lh := incastLab(t, c.leaves, c.hpl, nil, count)
			sent := (len(lh) - 1) * count
			snap := lossy.net.Counters()
			d := snap.Drops()
			if d[fabric.DropQueueFull] == 0 || lh[0].got+int(d.Total()) != sent {
				t.Fatalf("without PFC: %d queue drops, %d received of %d: want drops, and drops+received = sent", d[fabric.DropQueueFull], lh[0].got, sent)
			}
			if lossy.net.PFCEnabled() || lossy.net.PFCCounters() != nil {
				t.Errorf("PFC reported on a network built without it")
			}

			cfg := &fabric.PFCConfig{XOff: 16 << 10, XOn: 8 << 10}
			// After a pause, what is on the wire still arrives: a link's
			// bandwidth-delay product (12.5 KB at 100 Gbit/s over 1 us)
			// plus the packet being serialized and one arriving.
			const headroom = 12500 + 2*4124
			l, hosts := incastLab(t, c.leaves, c.hpl, cfg, count)
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
			pc := l.net.PFCCounters()
			var pauses uint64
			var hostPaused bool
			for _, x := range pc {
				pauses += x.Pauses
				if x.Pauses > 0 && x.Dir == fabric.AtoB && x.Link != "h0-p0" && len(x.Link) < 7 {
					hostPaused = true // a host's uplink (h<i>-p0, A end = host)
				}
				if x.MaxIngressBytes > cfg.XOff+headroom {
					t.Errorf("%s %v: %d bytes waited from one ingress, want <= XOff + %d", x.Link, x.Dir, x.MaxIngressBytes, headroom)
				}
			}
			if pauses == 0 || !hostPaused {
				t.Errorf("no sender was paused: %+v", pc)
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

// TestPFCConfig rejects bad thresholds and enabling under traffic.
func TestPFCConfig(t *testing.T) {
	lp := fabric.LinkParams{Rate: 100e9, Delay: sim.Microsecond}
	topo := pfcTopo(t, fabric.LeafSpineParams{Leaves: 1, HostsPerLeaf: 2, HostLink: lp})
	for _, bad := range []fabric.PFCConfig{{XOff: 1000, XOn: 1000}, {XOff: -1}, {XOff: 1000, XOn: 2000}} {
		l := &lab{loop: sim.NewLoop(), pool: packet.NewPool()}
		if _, err := fabric.Build(l.loop, l.pool, topo, fabric.BuildOptions{PFC: &bad}); err == nil {
			t.Errorf("Build accepted PFC %+v", bad)
		}
	}
	l := newLab(t, topo, fabric.BuildOptions{})
	s := &sink{}
	ports, err := l.net.Attach("h0", s)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		ports[0].Send(0, udp(l.pool, topo.Hosts[0].Addr, topo.Hosts[1].Addr, 1, 2, 1000, 0))
	}
	if err := l.net.EnablePFC(fabric.PFCConfig{}); err == nil {
		t.Errorf("EnablePFC accepted a network carrying packets")
	}
	l.loop.Run()
	if err := l.net.EnablePFC(fabric.PFCConfig{}); err != nil {
		t.Errorf("EnablePFC on an idle network: %v", err)
	}
}

// TestPFCDeterministic: the same lossless run twice gives the same trace.
func TestPFCDeterministic(t *testing.T) {
	run := func() uint64 {
		lp := fabric.LinkParams{Rate: 100e9, Delay: sim.Microsecond, QueueBytes: 32 << 10}
		topo := pfcTopo(t, fabric.LeafSpineParams{Leaves: 2, Spines: 2, HostsPerLeaf: 3, HostLink: lp, FabricLink: lp})
		l := newLab(t, topo, fabric.BuildOptions{Seed: 3, PFC: &fabric.PFCConfig{}})
		th := fabric.NewTraceHash()
		l.net.SetObserver(th)
		var hosts []*pullHost
		for _, h := range topo.Hosts {
			ph := &pullHost{pool: l.pool, src: h.Addr, dst: topo.Hosts[0].Addr, size: 4124, left: 200}
			ports, err := l.net.Attach(h.Name, ph)
			if err != nil {
				t.Fatal(err)
			}
			ph.port = ports[0]
			hosts = append(hosts, ph)
		}
		for _, h := range hosts[1:] {
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
