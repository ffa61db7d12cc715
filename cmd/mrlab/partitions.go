package main

import (
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/fabric/partition"
	"github.com/mrlab/mrlab/labs"
)

// partitionsFlag is --partitions on sim and experiment.
func partitionsFlag() cli.Flag {
	return &cli.IntFlag{Name: "partitions", DefaultText: "as many as cores, capped by the lab",
		Usage: "partitions of the event engine (one goroutine each); results do not depend on it"}
}

// hostsPerPartition is the fewest hosts a partition gets by default: a
// window of a smaller lab holds too few events to pay for its barrier.
const hostsPerPartition = 16

// autoPartitions is the default partition count for lab: one per core,
// at most one per hostsPerPartition hosts.
func autoPartitions(lab *labs.Lab) int {
	return max(1, min(runtime.NumCPU(), len(lab.Topology().Hosts)/hostsPerPartition))
}

// askedPartitions reads --partitions (an int flag): the count asked for,
// whether it was asked for explicitly, or a usage error.
func askedPartitions(c *cli.Context, cmd string, lab *labs.Lab) (int, bool, error) {
	if !c.IsSet("partitions") {
		return autoPartitions(lab), false, nil
	}
	n := c.Int("partitions")
	if n < 1 {
		return 0, true, usagef("%s: --partitions %d: want 1 or more", cmd, n)
	}
	return n, true, nil
}

// parsePartitionList reads bench's --partitions: N or N,M,... (each run
// in turn, the speedup over 1 reported when 1 is among them).
func parsePartitionList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, usagef("bench: --partitions %q: want counts from 1 up, such as 2 or 1,2", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// planPartitions plans asked partitions for lab. why, when not empty, is
// the reason the run uses one plain loop instead (an observer, a workload
// that is not partition-safe): the plan is then not used. It says on w
// what runs when the count was asked for explicitly.
func planPartitions(w io.Writer, cmd string, lab *labs.Lab, asked int, explicit bool, why string) *partition.Plan {
	plan := lab.PlanPartitions(asked)
	switch {
	case why != "" && asked > 1:
		if explicit {
			fmt.Fprintf(w, "mrlab: %s %s: --partitions %d: running on 1 partition: %s (the result is the same)\n", cmd, lab.Name, asked, why)
		}
		plan = lab.PlanPartitions(1)
	case explicit && asked > 1:
		fmt.Fprintf(w, "mrlab: %s %s: --partitions %d: %s\n", cmd, lab.Name, asked, plan)
	}
	return plan
}
