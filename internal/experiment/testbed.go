package experiment

import (
	"fmt"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

// bed describes one simulated cluster: a non-blocking multi-plane
// leaf/spine fabric, one NIC per host speaking both transports.
type bed struct {
	name                        string
	planes, leaves, spines, hpl int
	rate                        float64  // host link rate, bit/s; spine links sized non-blocking
	delay                       sim.Time // propagation delay of every link
	queue                       int      // drop-tail queue per link direction, bytes
	ecnK                        int      // DCTCP-style step marking threshold, bytes (0: off)
	loss                        float64  // random loss on every link direction (data and ACKs)
	pfc                         bool     // lossless: PFC pause instead of queue-full drops
	seed                        uint64
	mtu                         int // RDMA payload per packet
	detect                      sim.Time
	protocols                   func() []transport.Protocol
	oversubscription            float64
}

// defaultBed returns the link parameters every experiment starts from:
// the lab default (labs.DefaultLinkParams) of 100 Gbit/s, 1 us, 512 KiB
// queues with step ECN at 64 KiB, 4096-byte payloads.
func defaultBed(name string, seed uint64) bed {
	return bed{
		name: name, planes: 1, leaves: 2, spines: 2, hpl: 4,
		rate: 100e9, delay: sim.Microsecond, queue: 512 << 10, ecnK: 64 << 10,
		seed: seed, mtu: 4096, oversubscription: 1,
	}
}

func (b bed) hosts() int { return b.leaves * b.hpl }

// topology builds the bed's leaf/spine topology with every link's final
// parameters.
func (b bed) topology() (*fabric.Topology, error) {
	lp := fabric.LinkParams{Rate: b.rate, Delay: b.delay, QueueBytes: b.queue}
	if b.ecnK > 0 {
		lp.ECN = fabric.ECNConfig{Mode: fabric.ECNStep, K: b.ecnK}
	}
	if b.pfc {
		lp.PFC = fabric.DefaultPFC
	}
	if b.loss > 0 {
		lp.Impair.Loss = fabric.LossModel{Kind: fabric.LossRandom, P: b.loss}
	}
	fl := lp
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{
		Name: b.name, Planes: b.planes, Leaves: b.leaves, Spines: b.spines, HostsPerLeaf: b.hpl,
		HostLink: lp, FabricLink: fl, Oversubscription: b.oversubscription,
	})
	if err != nil {
		return nil, fmt.Errorf("building topology %s: %w", b.name, err)
	}
	return topo, nil
}

// testbed is a built bed: loop, fabric and the workload cluster.
type testbed struct {
	bed  bed
	loop *sim.Loop
	pool *packet.Pool
	net  *fabric.Network
	cl   *workload.Cluster
}

// build builds the bed on a fresh loop.
func (b bed) build() (*testbed, error) {
	topo, err := b.topology()
	if err != nil {
		return nil, err
	}
	loop := sim.NewLoop()
	pool := packet.NewPool()
	opts := fabric.BuildOptions{Seed: b.seed, DetectionDelay: b.detect}
	net, err := fabric.Build(loop, pool, topo, opts)
	if err != nil {
		return nil, fmt.Errorf("building %s: %w", b.name, err)
	}
	protos := b.protocols
	if protos == nil {
		protos = experimentProtocols
	}
	cl, err := workload.NewCluster(b.name, loop, pool, net, b.seed, workload.NICOptions{PathMTU: b.mtu, Protocols: protos})
	if err != nil {
		return nil, fmt.Errorf("building %s: %w", b.name, err)
	}
	return &testbed{bed: b, loop: loop, pool: pool, net: net, cl: cl}, nil
}

// serialize returns how long n bytes take at rate.
func serialize(n int, rate float64) sim.Time {
	return sim.Time(float64(n)*8/rate*1e9 + 0.5)
}

// baseRTT is the round trip of an unloaded path between hosts on
// different leaves: four links each way, a full data packet out and a
// small ACK back, each serialized once per hop.
func (b bed) baseRTT() sim.Time {
	hops := 4
	if b.leaves == 1 {
		hops = 2
	}
	data := b.mtu + 64 + 28 // payload + transport headers (approx.) + IPv4/UDP
	ack := 128
	return sim.Time(2*hops)*b.delay + sim.Time(hops)*(serialize(data, b.rate)+serialize(ack, b.rate))
}

// describe says what the bed is, for a report's setup lines.
func (b bed) describe() string {
	s := fmt.Sprintf("%d hosts on a %d-plane leaf/spine (%d leaves x %d hosts, %d spines per plane, non-blocking), "+
		"%s links, %v propagation per link, %s drop-tail queues",
		b.hosts(), b.planes, b.leaves, b.hpl, b.spines, fabric.FormatRate(b.rate), b.delay, sizeString(b.queue))
	if b.ecnK > 0 {
		s += fmt.Sprintf(", ECN step marking above %s", sizeString(b.ecnK))
	}
	s += fmt.Sprintf(", %d-byte payloads, base RTT %v", b.mtu, b.baseRTT())
	return s
}

// kib formats a byte count in KiB with one decimal.
func kib(n int) string { return fmt.Sprintf("%.1f KiB", float64(n)/1024) }

// sizeString formats a size exactly: MiB or KiB when it divides, else
// bytes.
func sizeString(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
