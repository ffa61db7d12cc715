package live

import (
	"fmt"
	"runtime"
	"time"

	"github.com/mrlab/mrlab/fabric/partition"
)

// Partitions of a live lab.
//
// A partitioned live lab cuts the lab as sim does (fabric/partition: by
// plane, else by pod or leaf with their hosts; only links with a delay
// are cut), so both modes agree on where every switch and NIC runs. Each
// partition would be a Pacer of its own: a sim.Loop on a goroutine locked
// to its OS thread, paced to the wall clock, with its own timers and the
// TUN descriptors of its hosts. A packet leaves a partition only on a cut
// link, through a crossing (crossing.go): a bounded SPSC ring, the packet
// stamped with its arrival time at the far end, at least the link's delay
// (the plan's lookahead) after it was sent. No barrier holds the
// partitions together, since a barrier a microsecond (the shipped labs'
// link delay) cannot be kept in real time; a packet that reaches its
// partition after its stamp is counted late, in the lab's lag figures.
//
// What is built: the plan (the sim rule, shown by status), the crossing
// and its accounting, and a pacer serving its crossings (crosspoll.go).
// What is not: the runtime that runs a lab on more than one pacer. The fabric's cut links hand packets over at the sim engine's
// barriers (fabric.Network.Partition), and routing, faults, the workload
// cluster, telemetry and capture run on the group's global loop, alone at
// barriers; a live group needs each of those made safe without a barrier
// (a stop-the-world for faults and status). Until then every live lab runs
// on one partition and says so (PartitionStatus.Reason).
//
// The default count leaves one core to the hosts: the hosts' kernels (TCP,
// the TUN reads and writes) and the programs in them (iperf3, ping, verbs
// clients) need a core of their own, and a lab loop that competes with
// them for it lags; on this project's 2-core box two paced partitions
// exchanging packets were 9-110x slower than one (BenchmarkPacedPartitions;
// README "Partitions").

// PartitionStatus is how a live lab's event loop is partitioned.
type PartitionStatus struct {
	// Asked is the count asked for (mrlab up --partitions, or the
	// default: DefaultPartitions).
	Asked int `json:"asked"`
	// Running is the count of partitions the lab runs on.
	Running int `json:"running"`
	// Plan is the sim rule's plan for Asked (fabric/partition): where the
	// partitions' boundaries fall, the cut links and the lookahead.
	Plan string `json:"plan"`
	// Lookahead is the plan's: the smallest delay plus serialization of
	// a cut link (0 when nothing is cut).
	Lookahead time.Duration `json:"lookahead_ns,omitempty"`
	// Reason says why Running < Asked ("" when it is not).
	Reason string `json:"reason,omitempty"`
}

// errNoLivePartitions is why a live lab runs on one partition whatever
// was asked (see the comment above).
const errNoLivePartitions = "the live runtime paces one loop: partitioned live pacing is not built yet (labs/live/partition.go says what is missing)"

// DefaultPartitions is the partition count a live lab asks for on a
// machine of cores CPUs: one core fewer, at least one (the hosts' kernels
// and programs keep a core).
func DefaultPartitions(cores int) int { return max(1, cores-1) }

// livePartitions is the partition status of a lab planned as plan.
func livePartitions(plan *partition.Plan) PartitionStatus {
	s := PartitionStatus{Asked: plan.Asked, Running: 1, Plan: plan.String()}
	if plan.Lookahead > 0 && plan.Parts > 1 {
		s.Lookahead = time.Duration(plan.Lookahead)
	}
	switch {
	case plan.Parts < plan.Asked && plan.Reason != "":
		s.Reason = "the lab allows " + fmt.Sprint(plan.Parts) + ": " + plan.Reason
		if plan.Parts > 1 {
			s.Reason += "; and " + errNoLivePartitions
		}
	case plan.Parts > 1:
		s.Reason = errNoLivePartitions
	}
	return s
}

// partitioner is an Engine that plans its lab's partitions (labEngine).
type partitioner interface {
	Partitions(asked int) PartitionStatus
}

// Partitions plans the lab's partitions with the sim rule for asked.
func (e *labEngine) Partitions(asked int) PartitionStatus {
	return livePartitions(e.lab.PlanPartitions(max(asked, 1)))
}

// planLive is the partition status of eng asked for asked partitions (0:
// the default for this machine's cores).
func planLive(eng Engine, asked int) PartitionStatus {
	if asked <= 0 {
		asked = DefaultPartitions(runtime.NumCPU())
	}
	if p, ok := eng.(partitioner); ok {
		return p.Partitions(asked)
	}
	s := PartitionStatus{Asked: asked, Running: 1, Plan: "1 partition(s) one loop"}
	if asked > 1 {
		s.Reason = "the engine cannot be partitioned"
	}
	return s
}
