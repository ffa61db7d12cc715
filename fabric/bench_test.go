package fabric_test

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// countSink counts and frees what it receives; with sum set it folds
// every packet's bytes (elided ones as zeros) into it.
type countSink struct {
	n   int
	sum *fabric.TraceHash
	buf []byte
}

func (c *countSink) Receive(now sim.Time, _ int, b *packet.Buffer) {
	c.n++
	if c.sum != nil {
		c.buf = b.AppendBytes(c.buf[:0])
		c.sum.Observe(now, fabric.EvDeliver, fabric.Point{}, nil, fabric.DropNone)
		for _, x := range c.buf {
			c.sum.Observe(sim.Time(x), fabric.EvDeliver, fabric.Point{}, nil, fabric.DropNone)
		}
	}
	b.Free()
}

// pump is a pull-style source: each time its port goes idle it sends the
// next packet of a template, cycling over 16 UDP source ports.
type pump struct {
	pool *packet.Pool
	port *fabric.Port
	tmpl []byte
	seq  uint16
	// elide, if set, sends header-only packets: the bytes after the IPv4
	// and UDP headers up to a 4-byte trailer are elided (they are zero).
	elide bool
}

func (p *pump) Receive(_ sim.Time, _ int, b *packet.Buffer) { b.Free() }

func (p *pump) send(now sim.Time) {
	b := p.pool.Get(len(p.tmpl))
	b.SetLen(len(p.tmpl))
	d := b.Data()
	copy(d, p.tmpl)
	p.seq++
	binary.BigEndian.PutUint16(d[header.IPv4MinSize:], 1000+p.seq%16)
	if p.elide {
		b = b.Elide(28, len(d)-32)
	}
	p.port.Send(now, b)
}

// forwardBench is a fabric with a pump on one host and a sink on another.
type forwardBench struct {
	l    *lab
	sink *countSink
}

func newForwardBench(t testing.TB, topo *fabric.Topology, src, dst string, size int) *forwardBench {
	return newForwardBenchOpt(t, topo, src, dst, size, false, nil)
}

// newForwardBenchOpt is newForwardBench with header-only packets if elide,
// and obs observing from the first packet if not nil.
func newForwardBenchOpt(t testing.TB, topo *fabric.Topology, src, dst string, size int, elide bool, obs fabric.Observer) *forwardBench {
	l := newLab(t, topo, fabric.BuildOptions{Seed: 1})
	if obs != nil {
		l.net.SetObserver(obs)
	}
	f := &forwardBench{l: l, sink: &countSink{}}
	var srcAddr, dstAddr = topo.Hosts[0].Addr, topo.Hosts[0].Addr
	for _, h := range topo.Hosts {
		switch h.Name {
		case src:
			srcAddr = h.Addr
		case dst:
			dstAddr = h.Addr
		}
	}
	if _, err := l.net.Attach(dst, f.sink); err != nil {
		t.Fatal(err)
	}
	p := &pump{pool: l.pool, elide: elide}
	ports, err := l.net.Attach(src, p)
	if err != nil {
		t.Fatal(err)
	}
	p.port = ports[0]
	tb := udp(l.pool, srcAddr, dstAddr, 1000, 4791, size, header.ECNECT0)
	p.tmpl = append([]byte(nil), tb.Data()...)
	copy(p.tmpl[size-4:], "CRC!") // a trailer after the zero payload
	tb.Free()
	p.port.SetOnIdle(p.send)
	p.send(0)
	f.run(2000) // warm up: pools, queues and the timer heap reach their size
	return f
}

// run steps the loop until n more packets have been delivered.
func (f *forwardBench) run(n int) {
	target := f.sink.n + n
	for f.sink.n < target {
		if !f.l.loop.Step() {
			panic("loop ran dry")
		}
	}
}

func leafSpineLeaf(t testing.TB, host, fab fabric.LinkParams) *fabric.Topology {
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 2, Spines: 4, HostsPerLeaf: 1, HostLink: host, FabricLink: fab})
	return mustTopo(t, topo, err)
}

func singleLink(t testing.TB) *fabric.Topology {
	topo, err := fabric.BackToBack(fabric.BackToBackParams{Link: fabric.LinkParams{Delay: sim.Microsecond}})
	return mustTopo(t, topo, err)
}

var impairedHost = fabric.LinkParams{Delay: sim.Microsecond, ECN: fabric.ECNConfig{Mode: fabric.ECNRED, Min: 4000, Max: 40000, PMax: 0.1, Weight: 0.01}}
var impairedFabric = fabric.LinkParams{Delay: sim.Microsecond, ECN: fabric.ECNConfig{Mode: fabric.ECNStep, K: 0},
	Impair: fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossGemodel, GEp: 0.01, GEr: 0.1, GE1h: 0.5}, Delay: 500, Jitter: 200, Duplicate: 0.01, Corrupt: 0.01}}

// The forwarding path allocates nothing per packet in steady state.
func TestForwardingAllocatesNothing(t *testing.T) {
	cases := []struct {
		name string
		topo *fabric.Topology
		src  string
	}{
		{"single link", singleLink(t), "h0"},
		{"leaf-spine-leaf", leafSpineLeaf(t, fabric.LinkParams{Delay: sim.Microsecond}, fabric.LinkParams{Delay: sim.Microsecond}), "h0"},
		{"leaf-spine-leaf impaired+ecn", leafSpineLeaf(t, impairedHost, impairedFabric), "h0"},
	}
	for _, c := range cases {
		f := newForwardBench(t, c.topo, c.src, "h1", 1000)
		if allocs := testing.AllocsPerRun(2000, func() { f.run(1) }); allocs != 0 {
			t.Errorf("%s: %v allocations per packet", c.name, allocs)
		}
		// The same with a trace hash observing every event.
		f.l.net.SetObserver(fabric.NewTraceHash())
		if allocs := testing.AllocsPerRun(2000, func() { f.run(1) }); allocs != 0 {
			t.Errorf("%s with an observer: %v allocations per packet", c.name, allocs)
		}
	}
}

func benchForward(b *testing.B, topo *fabric.Topology, size int) {
	f := newForwardBench(b, topo, "h0", "h1", size)
	b.ReportAllocs()
	b.ResetTimer()
	f.run(b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "packets/s")
}

// BenchmarkSingleLink is the baseline: host -> host over one link (two
// events per packet).
func BenchmarkSingleLink(b *testing.B) {
	benchForward(b, singleLink(b), 1000)
}

// BenchmarkForwardLeafSpineLeaf: host -> leaf -> spine -> leaf -> host
// (four links, three switches, eight events per packet).
func BenchmarkForwardLeafSpineLeaf(b *testing.B) {
	b.Run("plain", func(b *testing.B) {
		benchForward(b, leafSpineLeaf(b, fabric.LinkParams{Delay: sim.Microsecond}, fabric.LinkParams{Delay: sim.Microsecond}), 1000)
	})
	b.Run("ecn+impaired", func(b *testing.B) {
		benchForward(b, leafSpineLeaf(b, impairedHost, impairedFabric), 1000)
	})
	b.Run("tracehash", func(b *testing.B) {
		f := newForwardBench(b, leafSpineLeaf(b, fabric.LinkParams{Delay: sim.Microsecond}, fabric.LinkParams{Delay: sim.Microsecond}), "h0", "h1", 1000)
		f.l.net.SetObserver(fabric.NewTraceHash())
		b.ReportAllocs()
		b.ResetTimer()
		f.run(b.N)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "packets/s")
	})
}

// BenchmarkBuildFatTree measures Build (dominated by route computation, which
// also runs after every detected failure) on a k=16 fat-tree: 1024 hosts,
// 320 switches per plane.
func BenchmarkBuildFatTree(b *testing.B) {
	for _, c := range []struct{ k, planes int }{{16, 1}, {16, 4}, {32, 8}} {
		if testing.Short() && c.k > 16 {
			continue
		}
		topo, err := fabric.FatTree(fabric.FatTreeParams{K: c.k, Planes: c.planes})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("k%d-planes%d", c.k, c.planes), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := fabric.Build(sim.NewLoop(), packet.NewPool(), topo, fabric.BuildOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFatTreeTopology measures the fat-tree builder alone (the
// topology Build then turns into a network): 8 planes of k=16.
func BenchmarkFatTreeTopology(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := fabric.FatTree(fabric.FatTreeParams{K: 16, Planes: 8}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReroute measures the route work of one link failure and its
// repair, routing told at once (DetectionDelay -1), on fat trees of one and
// several planes: the ns/op is two recomputations.
func BenchmarkReroute(b *testing.B) {
	for _, c := range []struct{ k, planes int }{{16, 1}, {16, 4}, {32, 8}} {
		if testing.Short() && c.k > 16 {
			continue
		}
		topo, err := fabric.FatTree(fabric.FatTreeParams{K: c.k, Planes: c.planes})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("k%d-planes%d", c.k, c.planes), func(b *testing.B) {
			n, err := fabric.Build(sim.NewLoop(), packet.NewPool(), topo, fabric.BuildOptions{DetectionDelay: -1})
			if err != nil {
				b.Fatal(err)
			}
			link := topo.Links[len(topo.Links)-1].Name // a core uplink of the last plane
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := n.SetLinkUp(sim.Time(2*i+1), link, false); err != nil {
					b.Fatal(err)
				}
				if err := n.SetLinkUp(sim.Time(2*i+2), link, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRouteFailure measures the route work of single failures on 8
// planes of k=32 (65,536 host ports; 4 planes of k=16 with -short), routing
// told at once (DetectionDelay -1), against a full recomputation of every
// FIB in the same run: each iteration times a full recomputation, then
// each failure and its repair. It reports milliseconds of each and each
// failure's and repair's cost as a fraction of the full recomputation
// (x-full), the figures to read on a shared machine.
func BenchmarkRouteFailure(b *testing.B) {
	k, planes := 32, 8
	if testing.Short() {
		k, planes = 16, 4
	}
	topo, err := fabric.FatTree(fabric.FatTreeParams{K: k, Planes: planes})
	if err != nil {
		b.Fatal(err)
	}
	n, err := fabric.Build(sim.NewLoop(), packet.NewPool(), topo, fabric.BuildOptions{DetectionDelay: -1})
	if err != nil {
		b.Fatal(err)
	}
	// Fail a link and a switch of each tier, the last of each in the
	// fabric (the last plane's).
	role := map[string]string{}
	switches := map[string]string{}
	for _, sw := range topo.Switches {
		role[sw.Name] = sw.Role
		switches[sw.Role] = sw.Name
	}
	var hostLink, edgeLink, coreLink string
	for _, l := range topo.Links {
		switch ra, rb := role[l.A.Node], role[l.B.Node]; {
		case ra == "" || rb == "":
			hostLink = l.Name
		case ra == "core" || rb == "core":
			coreLink = l.Name
		default:
			edgeLink = l.Name
		}
	}
	type failure struct {
		name string
		set  func(now sim.Time, up bool) error
	}
	link := func(l string) func(sim.Time, bool) error {
		return func(now sim.Time, up bool) error { return n.SetLinkUp(now, l, up) }
	}
	sw := func(s string) func(sim.Time, bool) error {
		return func(now sim.Time, up bool) error { return n.SetSwitchUp(now, s, up) }
	}
	fails := []failure{
		{"link-host", link(hostLink)},
		{"link-edge-agg", link(edgeLink)},
		{"link-agg-core", link(coreLink)},
	}
	for _, role := range []string{"edge", "agg", "core"} {
		if s, ok := switches[role]; ok {
			fails = append(fails, failure{"switch-" + role, sw(s)})
		}
	}
	if len(fails) != 6 || hostLink == "" || edgeLink == "" || coreLink == "" {
		b.Fatalf("fat tree: found failures %v (roles %v)", fails, switches)
	}
	full := time.Duration(0)
	took := make([]time.Duration, len(fails))
	back := make([]time.Duration, len(fails))
	now := sim.Time(0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		n.RecomputeAllRoutes()
		full += time.Since(t0)
		for j, f := range fails {
			now++
			t0 := time.Now()
			if err := f.set(now, false); err != nil {
				b.Fatal(err)
			}
			took[j] += time.Since(t0)
			now++
			t0 = time.Now()
			if err := f.set(now, true); err != nil {
				b.Fatal(err)
			}
			back[j] += time.Since(t0)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(b.N) / 1e6 }
	b.ReportMetric(ms(full), "ms-full")
	for j, f := range fails {
		b.ReportMetric(ms(took[j]), "ms-"+f.name)
		b.ReportMetric(float64(took[j])/float64(full), "x-full-"+f.name)
		b.ReportMetric(ms(back[j]), "ms-"+f.name+"-repair")
		b.ReportMetric(float64(back[j])/float64(full), "x-full-"+f.name+"-repair")
	}
}

// A built port holds no packet rings until it carries packets: a big
// fabric's Build costs little memory per port (it preallocated 64-entry
// queue, departure and flight rings, 4 KiB per port, 1 GiB at 8 planes x
// k=32). The bound is per port of the whole Build (routes and nodes
// included), so it fails if the rings come back.
func TestBuildMemoryPerPort(t *testing.T) {
	topo, err := fabric.FatTree(fabric.FatTreeParams{K: 8, Planes: 2})
	if err != nil {
		t.Fatal(err)
	}
	ports := 2 * len(topo.Links)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	net, err := fabric.Build(sim.NewLoop(), packet.NewPool(), topo, fabric.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(net)
	per := float64(after.TotalAlloc-before.TotalAlloc) / float64(ports)
	t.Logf("%d ports, %.0f bytes allocated per port by Build", ports, per)
	if per > 4096 {
		t.Errorf("Build allocates %.0f bytes per port, want at most 4096", per)
	}
}

// Header-only packets make the same run as packets that hold their zero
// payload: the same trace hash (every event with every byte), the same
// bytes delivered, on a plain fabric and on one that corrupts (with the
// bit flipped into the packet: LossAtEnqueue), duplicates, delays and
// marks; and forwarding them allocates nothing.
func TestHeaderOnlyPacketsSameTrace(t *testing.T) {
	corrupting := impairedFabric
	corrupting.LossAt = fabric.LossAtEnqueue
	corrupting.Impair.Corrupt = 0.2
	cases := []struct {
		name      string
		host, fab fabric.LinkParams
	}{
		{"plain", fabric.LinkParams{Delay: sim.Microsecond}, fabric.LinkParams{Delay: sim.Microsecond}},
		{"ecn+impaired", impairedHost, impairedFabric},
		{"corrupt at enqueue", impairedHost, corrupting},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var sums [2]uint64
			var events [2]uint64
			for i, elide := range []bool{false, true} {
				th := fabric.NewTraceHash()
				f := newForwardBenchOpt(t, leafSpineLeaf(t, c.host, c.fab), "h0", "h1", 4096+32, elide, th)
				f.sink.sum = fabric.NewTraceHash()
				f.run(3000)
				sums[i] = th.Sum() ^ f.sink.sum.Sum()
				events[i] = th.Events()
				if elide {
					if allocs := testing.AllocsPerRun(500, func() { f.run(1) }); allocs != 0 {
						t.Errorf("%v allocations per header-only packet", allocs)
					}
				}
			}
			if sums[0] != sums[1] || events[0] != events[1] {
				t.Errorf("full packets: hash %x over %d events; header-only: %x over %d", sums[0], events[0], sums[1], events[1])
			}
		})
	}
}
