package workload

import (
	"fmt"
	"net/netip"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
)

// Cluster is what a workload runs on: a lab's NICs, in host order, driven
// by one event loop.
type Cluster struct {
	// Name names the lab in results.
	Name string
	Loop *sim.Loop
	// Hosts are the host names, NICs their NICs (same order).
	Hosts []string
	NICs  []*softnic.NIC
	// Fabric, if set, supplies the fabric's counters for results (drops by
	// cause, ECN marks).
	Fabric FabricCounters
}

// FabricCounters reads a fabric's cumulative counters. A workload reads
// them before and after and reports the difference.
type FabricCounters interface {
	// Drops returns drop counts by cause name; Marks the CE marks.
	Counters() (drops map[string]uint64, marks uint64)
}

// check validates the cluster.
func (cl *Cluster) check() error {
	if cl.Loop == nil {
		return fmt.Errorf("%w: cluster has no loop", ErrBadSpec)
	}
	if len(cl.NICs) < 2 || len(cl.NICs) != len(cl.Hosts) {
		return fmt.Errorf("%w: cluster needs at least 2 hosts with a NIC each (have %d hosts, %d NICs)",
			ErrBadSpec, len(cl.Hosts), len(cl.NICs))
	}
	return nil
}

func (cl *Cluster) index(name string) int {
	for i, h := range cl.Hosts {
		if h == name {
			return i
		}
	}
	return -1
}

func (cl *Cluster) byAddr(a netip.Addr) int {
	for i, n := range cl.NICs {
		if n.Addr() == a {
			return i
		}
	}
	return -1
}
