package labs

import (
	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/workload"
)

// A lab builds the cluster a workload runs on: the fabric, its fault
// timeline and a NIC for every host configured by the lab's transports
// section. This lives here, above workload, so that workload takes plain
// values and never imports the lab-file package (labs/live imports
// workload; the arrows point one way).

// NICOptions returns the NIC options a lab's transports section sets: every
// NIC's MetaRoCE and RoCEv2 options and RoCEv2's queue pairs per host
// pair. `mrlab sim`, `mrlab experiment` and live labs all build their NICs
// from it, so one lab file means one configuration.
func (l *Lab) NICOptions() workload.NICOptions {
	t := l.Transports
	return workload.NICOptions{MetaRoCE: t.MetaRoCE, RoCEv2: t.RoCEv2, RoCEv2QPs: t.RoCEv2QPs}
}

// ClusterSetup configures NewCluster.
type ClusterSetup struct {
	// Observe, if set, sees the built fabric before anything is armed on
	// the loop (captures, trace hashes, an experiment's probes).
	Observe func(net *fabric.Network) error
	// OnGroup, if set, hears NewPartitionedCluster's group before Observe
	// runs (the loop of its global events is the cluster's Loop, where an
	// observer arms its samplers).
	OnGroup func(g *sim.Group)
	// NoFaults leaves the lab's fault timeline unarmed.
	NoFaults bool
	// NIC, if set, adjusts the lab's NIC options (command-line overrides,
	// tracers).
	NIC func(*workload.NICOptions)
	// FaultReport, if set, hears of each fault of the timeline as it
	// fires (NewPartitionedCluster; NewCluster's caller arms the timeline
	// itself in Observe when it wants a report).
	FaultReport FaultReport
}

// NewCluster builds the lab on loop the way `mrlab sim` runs a workload
// on it, so `mrlab experiment` and `mrlab sim` run the same simulation for
// the same lab and seed: the fabric (lab.Build), Observe, the fault
// timeline from the loop's now, then a NIC for every host with the lab's
// transports section (NICOptions, then NIC). Its workloads decide on the
// lab's grid (workload.Cluster.Grid): a partition-safe one gives the
// result NewPartitionedCluster gives for any number of partitions.
func (lab *Lab) NewCluster(loop *sim.Loop, pool *packet.Pool, setup ClusterSetup) (*workload.Cluster, *fabric.Network, error) {
	net, err := lab.Build(loop, pool)
	if err != nil {
		return nil, nil, err
	}
	if setup.Observe != nil {
		if err := setup.Observe(net); err != nil {
			return nil, nil, err
		}
	}
	if !setup.NoFaults && len(lab.Faults) > 0 {
		if err := lab.ScheduleFaults(loop, net, nil); err != nil {
			return nil, nil, err
		}
	}
	opts := lab.NICOptions()
	if setup.NIC != nil {
		setup.NIC(&opts)
	}
	cl, err := workload.NewCluster(lab.Name, loop, pool, net, lab.Seed, opts)
	if err != nil {
		return nil, nil, err
	}
	// Decide as NewPartitionedCluster's runs do: the same result on one
	// loop and on any number of partitions.
	cl.Grid = lab.PartitionGrid()
	return cl, net, nil
}
