package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/fabric/partition"
	"github.com/mrlab/mrlab/labs"
)

// partitionsFlag is --partitions on sim, bench and experiment.
func partitionsFlag() cli.Flag {
	return &cli.IntFlag{Name: "partitions", Value: 1,
		Usage: "partitions of the event engine (one goroutine each); a full lab runs on 1 for now and says why"}
}

// fullLabPartitionsReason is why a lab with NICs and a workload runs on one
// partition: the engine (sim.Group) and the fabric (fabric.Network.Partition)
// are partition-safe, the rest is not yet.
const fullLabPartitionsReason = "the NICs' packet pool, the workload drivers' completion counters and the observers " +
	"(trace hash, capture, telemetry) are shared by every host, not partition-safe yet (#26); the fabric alone is"

// planPartitions plans --partitions for lab and says, on w, what runs. It
// returns the partitions used (1 today for a full lab) and the plan.
func planPartitions(w io.Writer, cmd string, lab *labs.Lab, asked int) (int, *partition.Plan, error) {
	if asked < 1 {
		return 0, nil, usagef("%s: --partitions %d: want 1 or more", cmd, asked)
	}
	if asked == 1 {
		return 1, nil, nil
	}
	// The fault timeline's links are not excluded from the cut here: the
	// plan is not run (see fullLabPartitionsReason).
	plan := partition.Make(lab.Topology(), asked, partition.Options{})
	fmt.Fprintf(w, "mrlab: %s %s: --partitions %d: plan %s; running on 1 partition: %s\n",
		cmd, lab.Name, asked, plan, fullLabPartitionsReason)
	return 1, plan, nil
}
