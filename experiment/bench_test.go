package experiment

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

// permLab is the benchmark's cluster (testdata/perm128.yaml): 128 hosts,
// 8 leaves of 16, 8 spines (non-blocking), one plane, 100 Gbit/s,
// MetaRoCE over 128 paths.
func permLab(b *testing.B) *labs.Lab {
	lab, err := labs.Load("testdata/perm128.yaml")
	if err != nil {
		b.Fatal(err)
	}
	return lab
}

const (
	permFlow  = 2 << 20 // bytes per host
	permPaths = 128
	permMTU   = 4096
)

// BenchmarkPermutation128 measures simulation speed: a 128-host
// leaf/spine permutation, every host WRITEs one 2 MB message to another
// over a MetaRoCE connection with 128 paths, with synthetic payload (what
// `mrlab bench` runs) and with real bytes. It reports simulated data
// packets (those arriving at receivers) per wall-clock second, events per
// data packet and the peak heap, and, as a baseline measured in the same
// run, the packets per second of the bare fabric moving the same bytes
// between the cheapest possible hosts, and the ratio of the two.
func BenchmarkPermutation128(b *testing.B) {
	for _, mode := range []softnic.PayloadMode{softnic.PayloadSynthetic, softnic.PayloadBytes} {
		b.Run("payload="+mode.String(), func(b *testing.B) { benchPermutation128(b, mode) })
	}
}

func benchPermutation128(b *testing.B, mode softnic.PayloadMode) {
	var simPkts, basePkts uint64
	var simWall, baseWall time.Duration
	var peak uint64
	for i := 0; i < b.N; i++ {
		pk, wall, pe, err := permMetaRoCE(permLab(b), mode)
		if err != nil {
			b.Fatal(err)
		}
		simPkts, simWall, peak = simPkts+pk, simWall+wall, max(peak, pe)
		b.StopTimer()
		pk, wall, err = permFabric(permLab(b))
		if err != nil {
			b.Fatal(err)
		}
		basePkts, baseWall = basePkts+pk, baseWall+wall
		b.StartTimer()
	}
	sim := float64(simPkts) / simWall.Seconds()
	base := float64(basePkts) / baseWall.Seconds()
	b.ReportMetric(sim, "pkts/s")
	b.ReportMetric(base, "fabric-pkts/s")
	b.ReportMetric(sim/base, "ratio-to-fabric")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(simPkts)/float64(b.N), "data-pkts/op")
	b.ReportMetric(float64(lastEvents)/float64(simPkts/uint64(b.N)), "events/pkt")
}

// lastEvents is the number of events the last permMetaRoCE run fired.
var lastEvents uint64

// permMetaRoCE runs the MetaRoCE permutation once and returns the data
// packets delivered, the wall time of the run and the peak heap.
func permMetaRoCE(lab *labs.Lab, mode softnic.PayloadMode) (uint64, time.Duration, uint64, error) {
	runtime.GC()
	loop := sim.NewLoop()
	cl, _, err := lab.NewCluster(loop, packet.NewPool(), labs.ClusterSetup{})
	if err != nil {
		return 0, 0, 0, err
	}
	var peak uint64
	var ms runtime.MemStats
	s := startSampler(loop, 0, 20*sim.Microsecond, sim.Never, func(sim.Time) {
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapAlloc)
	})
	fired0 := loop.Fired()
	start := time.Now()
	res, err := workload.Run(cl, workload.Spec{
		Name: workload.Permutation, Transport: transport.MetaRoCE, Size: permFlow, Iterations: 1, QueueDepth: 1,
		Seed: 1, Timeout: 100 * sim.Millisecond, Payload: mode,
	})
	wall := time.Since(start)
	s.stop()
	if err != nil {
		return 0, 0, 0, err
	}
	if !res.Check.OK || res.Errors != 0 {
		return 0, 0, 0, fmt.Errorf("permutation: data check %v, %d errors", res.Check.OK, res.Errors)
	}
	var pkts uint64
	for _, nic := range cl.NICs {
		for _, c := range nic.Conns() {
			if st := c.Stats(); st.RxBytes > st.TxBytes {
				pkts += st.RxPackets
			}
		}
	}
	runtime.ReadMemStats(&ms)
	lastEvents = loop.Fired() - fired0
	return pkts, wall, max(peak, ms.HeapAlloc), nil
}

// permFabric moves the same bytes through the same fabric with the
// cheapest possible hosts: each sends back-to-back 4124-byte IPv4/UDP
// packets (a copied header, 128 source ports in turn) to its permutation
// partner whenever its port goes idle, and each receiver counts and frees
// what arrives. What it measures is the fabric and the event loop alone.
func permFabric(lab *labs.Lab) (uint64, time.Duration, error) {
	topo := lab.Topology()
	loop := sim.NewLoop()
	pool := packet.NewPool()
	net, err := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: 1})
	if err != nil {
		return 0, 0, err
	}
	n := len(topo.Hosts)
	perm := permutation(n)
	size := permMTU + 28
	per := permFlow / permMTU
	hosts := make([]*blaster, n)
	for i, th := range topo.Hosts {
		hosts[i] = &blaster{pool: pool, left: per, size: size}
		ports, err := net.Attach(th.Name, hosts[i])
		if err != nil {
			return 0, 0, err
		}
		hosts[i].port = ports[0]
	}
	for i, h := range hosts {
		dst := topo.Hosts[perm[i]].Addr
		header.IPv4(h.hdr[:]).Encode(&header.IPv4Fields{TotalLength: uint16(size), TTL: 64, Protocol: header.IPv4ProtoUDP,
			Src: topo.Hosts[i].Addr, Dst: dst})
		h.port.SetOnIdle(h.send)
	}
	start := time.Now()
	for _, h := range hosts {
		h.send(0)
	}
	loop.Run()
	wall := time.Since(start)
	var pkts uint64
	for _, h := range hosts {
		pkts += h.got
	}
	if pkts == 0 {
		return 0, 0, fmt.Errorf("fabric baseline delivered nothing")
	}
	return pkts, wall, nil
}

// blaster is the fabric baseline's host.
type blaster struct {
	pool       *packet.Pool
	port       *fabric.Port
	hdr        [28]byte
	left, size int
	sport      uint16
	got        uint64
}

func (h *blaster) send(now sim.Time) {
	if h.left == 0 || !h.port.Idle() {
		return
	}
	h.left--
	b := h.pool.Get(h.size)
	b.SetLen(h.size)
	d := b.Data()
	copy(d, h.hdr[:])
	h.sport++
	udp := header.UDP(d[20:])
	udp.Encode(10000+h.sport%permPaths, 4791, h.size-28)
	h.port.Send(now, b)
}

func (h *blaster) Receive(now sim.Time, port int, b *packet.Buffer) {
	h.got++
	b.Free()
}

// permutation returns a single-cycle permutation of 0..n-1 (host i sends
// to host (i + n/2 + 1) mod n: across leaves, nobody to itself).
func permutation(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = (i + n/2 + 1) % n
	}
	return p
}
