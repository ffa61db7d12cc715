package workload

import (
	"fmt"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
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
	// roceQPs is NICOptions.RoCEv2QPs.
	roceQPs int
	// Group, if set, runs the cluster partitioned (see partitioned.go):
	// Loop is its global loop and host i's NIC runs on
	// Group.Part(HostPart[i]).
	Group    *sim.Group
	HostPart []int
	// Grid, if set on a plain cluster, makes a partition-safe workload
	// take its global decisions at multiples of Grid, as a partitioned
	// run of the same lab does (labs.NewCluster sets it to the lab's
	// PartitionGrid): then a lab gives the same result on one loop and on
	// any number of partitions.
	Grid sim.Time
}

// ConnsPerPeer returns the connections a workload of kind opens between
// two hosts when its spec does not say: one MetaRoCE connection (it
// spans every plane already); for RoCEv2 the cluster's RoCEv2QPs, where
// per-plane means the fewest ports any NIC has.
func (cl *Cluster) ConnsPerPeer(kind transport.Kind) int {
	if kind != transport.RoCEv2 || cl.roceQPs == 0 {
		return 1
	}
	if cl.roceQPs > 0 {
		return cl.roceQPs
	}
	ports := 0
	for _, n := range cl.NICs {
		if ports == 0 || n.Ports() < ports {
			ports = n.Ports()
		}
	}
	return max(ports, 1)
}

// FabricCounters reads a fabric's cumulative counters. A workload reads
// them before and after and reports the difference.
type FabricCounters interface {
	Counters() FabricSnapshot
}

// FabricSnapshot is a fabric's cumulative counters at one time.
type FabricSnapshot struct {
	// Drops counts drops by cause name; Marks the CE marks; PFCPauses the
	// times PFC paused a sender.
	Drops     map[string]uint64
	Marks     uint64
	PFCPauses uint64
	// Corrupted counts packets an impairment flipped a bit of;
	// Duplicated copies an impairment made.
	Corrupted, Duplicated uint64
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

// qpInfo describes a connection's two ends as perftest prints them; lmr
// and rmr are the buffers the test exposes on each side (nil for SEND
// tests, which print none).
func qpInfo(req *connReq, lmr, rmr *softnic.MR) QPInfo {
	end := func(c *softnic.Conn, mr *softnic.MR) Endpoint {
		if c == nil {
			return Endpoint{}
		}
		tc := c.Transport()
		e := Endpoint{Host: c.NIC().Name(), QPN: tc.LocalID(), Addr: c.NIC().Addr()}
		if q, ok := tc.(interface{ QPN() uint32 }); ok {
			e.QPN = q.QPN()
		}
		// A transport that does not say starts at PSN 0 (MetaRoCE: every
		// path's PSNs start at 0).
		if p, ok := tc.(interface{ StartPSN() uint32 }); ok {
			e.PSN = p.StartPSN()
		}
		if mr != nil {
			e.RKey, e.VAddr = mr.RKey(), mr.Addr()
		}
		return e
	}
	return QPInfo{Local: end(req.dial, lmr), Remote: end(req.acc, rmr)}
}
