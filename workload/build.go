package workload

import (
	"fmt"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/transport/rocev2"
)

// NICOptions configure the NICs NewCluster builds.
type NICOptions struct {
	// PathMTU is the RDMA payload per packet; 0 means 4096.
	PathMTU int
	// MetaRoCE and RoCEv2 configure the transports every NIC speaks (paths
	// per connection, timeouts, DCQCN...); zero values mean defaults.
	MetaRoCE metaroce.Options
	RoCEv2   rocev2.Options
	// Protocols, if set, replaces both: it returns fresh transport
	// instances for one NIC (a Protocol holds NIC-wide state, so NICs must
	// not share them).
	Protocols func() []transport.Protocol
	// RoCEv2QPs is how many RoCEv2 queue pairs a workload opens between
	// two hosts when its spec does not say (Spec.Conns 0): 0 means one,
	// labs.PerPlane one per plane (NIC port).
	RoCEv2QPs int
	// Trace, if set, receives the transports' protocol decisions.
	Trace transport.Tracer
	// TraceFor, if set, gives each host's NIC its own tracer (so a trace
	// line can say which host decided); it overrides Trace.
	TraceFor func(host string) transport.Tracer
	// SecureKeys draws every NIC's memory keys, connection ids and region
	// addresses from crypto/rand (softnic.CryptoSource), as live labs do;
	// otherwise they follow from the seed, as sim runs' traces need.
	SecureKeys bool
	// HostQueue, if set, sizes each NIC's buffer of host (kernel) packets,
	// shared by its ports (softnic.Config.SharedHostQueue), from the NIC's
	// rate in bits per second (the sum of its ports'); otherwise each port
	// has softnic's default queue.
	HostQueue func(rate float64) int
}

// NewCluster builds a NIC for every host of net, named and addressed as
// the host, with one port per host port, and attaches it. seed seeds the
// NICs' random streams (use the lab's seed).
func NewCluster(name string, loop *sim.Loop, pool *packet.Pool, net *fabric.Network, seed uint64, opts NICOptions) (*Cluster, error) {
	return newCluster(name, loop, nil, nil, []*packet.Pool{pool}, net, seed, opts)
}

// NewPartitionedCluster is NewCluster on the partitions of g: host i's NIC
// runs on g.Part(hostPart[i]) and takes packets from pools[hostPart[i]];
// the cluster's Loop is g.Global(). Partition the fabric after this (its
// ports must be idle), with the same hostPart and pools. Only workloads
// that PartitionSafe accepts run on it.
func NewPartitionedCluster(name string, g *sim.Group, hostPart []int, pools []*packet.Pool, net *fabric.Network, seed uint64, opts NICOptions) (*Cluster, error) {
	if len(hostPart) != len(net.Topology().Hosts) || len(pools) != g.Parts() {
		return nil, fmt.Errorf("building cluster %q: %d host partitions and %d pools for %d hosts and %d partitions",
			name, len(hostPart), len(pools), len(net.Topology().Hosts), g.Parts())
	}
	if opts.Trace != nil || opts.TraceFor != nil {
		return nil, fmt.Errorf("building cluster %q: transport tracers see one global order: not partition-safe yet", name)
	}
	for i, p := range hostPart {
		if p < 0 || p >= g.Parts() {
			return nil, fmt.Errorf("building cluster %q: host %d in partition %d of %d", name, i, p, g.Parts())
		}
	}
	return newCluster(name, g.Global(), g, hostPart, pools, net, seed, opts)
}

func newCluster(name string, loop *sim.Loop, g *sim.Group, hostPart []int, pools []*packet.Pool, net *fabric.Network, seed uint64, opts NICOptions) (*Cluster, error) {
	protos := opts.Protocols
	if protos == nil {
		protos = func() []transport.Protocol {
			return []transport.Protocol{metaroce.NewProtocol(opts.MetaRoCE), rocev2.NewProtocol(opts.RoCEv2)}
		}
	}
	cl := &Cluster{Name: name, Loop: loop, Fabric: netCounters{net}, roceQPs: opts.RoCEv2QPs, Group: g, HostPart: hostPart}
	for i, h := range net.Topology().Hosts {
		sched, pool := loop, pools[0]
		if g != nil {
			sched, pool = g.Part(hostPart[i]), pools[hostPart[i]]
		}
		trace := opts.Trace
		if opts.TraceFor != nil {
			trace = opts.TraceFor(h.Name)
		}
		cfg := softnic.Config{
			Name: h.Name, Addr: h.Addr, Ports: h.Ports, PathMTU: opts.PathMTU,
			Sched: sched, Pool: pool, Seed: seed, Protocols: protos(), Trace: trace,
		}
		if opts.SecureKeys {
			cfg.KeySource = softnic.CryptoSource()
		}
		if opts.HostQueue != nil {
			var rate float64
			for _, k := range net.Topology().Links {
				if k.A.Node == h.Name || k.B.Node == h.Name {
					rate += k.Params.Rate
				}
			}
			cfg.HostQueue, cfg.SharedHostQueue = opts.HostQueue(rate), true
		}
		nic, err := softnic.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("building cluster %q: %w", name, err)
		}
		if err := AttachNIC(net, nic); err != nil {
			return nil, fmt.Errorf("building cluster %q: %w", name, err)
		}
		cl.Hosts = append(cl.Hosts, h.Name)
		cl.NICs = append(cl.NICs, nic)
	}
	return cl, nil
}

// The fabric's ports are the NIC's wires; a wire that says whether it is
// up keeps the NIC's host traffic off a failed port.
var (
	_ softnic.Wire           = (*fabric.Port)(nil)
	_ interface{ Up() bool } = (*fabric.Port)(nil)
	_ fabric.Node            = (*softnic.NIC)(nil)
)

// AttachNIC connects a NIC to its host (the host named like the NIC) in a
// fabric: the fabric delivers the host's packets to the NIC, and the NIC
// sends on the host's ports, port p on plane p.
func AttachNIC(net *fabric.Network, nic *softnic.NIC) error {
	ports, err := net.Attach(nic.Name(), nic)
	if err != nil {
		return fmt.Errorf("attaching NIC %q: %w", nic.Name(), err)
	}
	wires := make([]softnic.Wire, len(ports))
	for i, p := range ports {
		if p == nil {
			return fmt.Errorf("attaching NIC %q: port %d is not wired", nic.Name(), i)
		}
		wires[i] = p
	}
	return nic.SetWires(wires...)
}

// netCounters reads a fabric.Network's counters: its totals, not a
// Snapshot of every direction (the end-of-run read comes at the heap's
// peak).
type netCounters struct{ net *fabric.Network }

func (c netCounters) Counters() FabricSnapshot {
	t := c.net.Totals()
	drops := map[string]uint64{}
	for r, n := range t.Drops {
		if n > 0 && fabric.DropReason(r) != fabric.DropNone {
			drops[fabric.DropReason(r).String()] = n
		}
	}
	return FabricSnapshot{Drops: drops, PFCPauses: t.Pauses, Marks: t.ECNMarks, Corrupted: t.Corrupted, Duplicated: t.Duplicated}
}
