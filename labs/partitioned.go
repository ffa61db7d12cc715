package labs

import (
	"errors"
	"fmt"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/fabric/partition"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/workload"
)

// ErrNotPartitionable says why a lab cannot run on the partitioned engine
// at all (for any number of partitions): it then runs on one plain loop.
var ErrNotPartitionable = errors.New("lab not partition-safe")

// PlanPartitions plans up to want partitions of the lab. Links that the
// fault timeline impairs are kept uncut (an impairment reorders
// deliveries, which a cut link cannot).
func (lab *Lab) PlanPartitions(want int) *partition.Plan {
	noCut := map[string]string{}
	for i := range lab.Faults {
		f := &lab.Faults[i]
		if f.Action != ActionImpair {
			continue
		}
		links, err := lab.linksOf(f)
		if err != nil {
			continue // ScheduleFaults reports it
		}
		for _, k := range links {
			noCut[k] = fmt.Sprintf("the fault timeline impairs it at %v", f.At)
		}
	}
	return partition.Make(lab.Topology(), want, partition.Options{NoCut: noCut})
}

// PartitionGrid is the grid step of the lab's partitioned runs
// (sim.Group.SetGrid): the smallest propagation delay of any link (1 us if
// none has one). It depends on the lab only, never on the partitioning,
// so a workload's global decisions (begin, finish) fall at the same
// instants on 1 or N partitions; it is at most one hop's delay, so they
// wait at most that long.
func (lab *Lab) PartitionGrid() sim.Time {
	grid := sim.Never
	for _, k := range lab.topo.Links {
		if k.Params.Delay > 0 {
			grid = min(grid, k.Params.Delay)
		}
	}
	if grid == sim.Never {
		grid = sim.Microsecond
	}
	return grid
}

// NewPartitionedCluster builds the lab as NewCluster does, on the
// partitions of plan (PlanPartitions): a sim.Group with the plan's
// lookahead and the lab's grid, one packet pool per partition, every
// host's NIC on its partition's loop, the fabric partitioned, and the
// fault timeline on the group's global loop. setup.Observe sees the
// fabric as on one loop: its observers see every partition's events
// merged in one loop's order (fabric.Network.SetObserver), and timers it
// arms on the global loop (g.Global(), told to setup.OnGroup) run alone
// at barriers. A lab the partitioned engine cannot run (PFC) is an error
// wrapping ErrNotPartitionable.
func (lab *Lab) NewPartitionedCluster(plan *partition.Plan, setup ClusterSetup) (*workload.Cluster, *fabric.Network, error) {
	g, err := sim.NewGroup(plan.Parts, plan.Lookahead)
	if err != nil {
		return nil, nil, fmt.Errorf("partitioning lab %s: %w", lab.Name, err)
	}
	g.SetGrid(lab.PartitionGrid())
	pools := make([]*packet.Pool, plan.Parts)
	for i := range pools {
		pools[i] = packet.NewPoolIDs(uint64(i) << 48) // an ID names one packet
	}
	net, err := lab.Build(g.Global(), pools[0])
	if err != nil {
		return nil, nil, err
	}
	if net.PFCEnabled() {
		return nil, nil, fmt.Errorf("%w: PFC pauses act on the far end of a link directly", ErrNotPartitionable)
	}
	if setup.OnGroup != nil {
		setup.OnGroup(g)
	}
	if setup.Observe != nil {
		if err := setup.Observe(net); err != nil {
			return nil, nil, err
		}
	}
	if !setup.NoFaults && len(lab.Faults) > 0 {
		if err := lab.ScheduleFaults(g.Global(), net, setup.FaultReport); err != nil {
			return nil, nil, err
		}
	}
	opts := lab.NICOptions()
	if setup.NIC != nil {
		setup.NIC(&opts)
	}
	cl, err := workload.NewPartitionedCluster(lab.Name, g, plan.Host, pools, net, lab.Seed, opts)
	if err != nil {
		return nil, nil, err
	}
	if err := net.Partition(g, plan.Host, plan.Switch, pools); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrNotPartitionable, err)
	}
	return cl, net, nil
}
