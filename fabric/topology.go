// Package fabric is mrlab's emulated Ethernet/IP fabric: links that serialize
// at their rate, queue, mark ECN and apply netem-style impairments; switches
// that route by destination prefix and spread over equal-cost ports with an
// ECMP hash of the 5-tuple; topology builders; failures; counters.
//
// The fabric reads IPv4 and UDP headers only. It knows nothing of MetaRoCE.
//
// Build turns a Topology (from LeafSpine, BackToBack, FatTree or a lab file)
// into a Network on a sim.Scheduler; NICs Attach to hosts and send through
// the returned Ports (see Port for the link model, switchNode's comment in
// switch.go for forwarding, recomputeRoutes for routing). Everything runs on
// the caller's loop: no goroutines, no clocks. Random draws come from
// per-link-direction and per-switch streams derived from BuildOptions.Seed,
// so a run is a function of topology, workload and seed. Forwarding a
// packet allocates nothing; drops are counters (Counters) and Observer
// events (TraceHash hashes them for determinism checks).
package fabric

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/mrlab/mrlab/internal/sim"
)

// Topology is a complete, explicit description of a fabric: its hosts,
// switches and links. Builders (LeafSpine, BackToBack, FatTree) produce one;
// lab files may also spell one out. Build turns it into a running Network.
type Topology struct {
	Name     string
	Planes   int
	Hosts    []Host
	Switches []Switch
	Links    []Link
}

// Host is an end host. It has one NIC port per plane (Ports), all sharing
// the host's one address: the NIC picks the plane by picking the port.
type Host struct {
	Name  string
	Addr  netip.Addr
	Ports int
}

// Switch is a switch in one plane.
type Switch struct {
	Name  string
	Plane int
	// Role is descriptive ("leaf", "spine", "agg", "core", "tor").
	Role string
}

// Endpoint names one side of a link: a node (host or switch) and its port.
type Endpoint struct {
	Node string
	Port int
}

// Link is a full-duplex link. Each direction is its own queue and server
// with the same parameters (per-direction overrides are set after Build).
type Link struct {
	Name   string
	A, B   Endpoint
	Params LinkParams
}

// LinkParams configure one direction of a link.
type LinkParams struct {
	// Rate in bits per second. Serialization of n bytes takes n*8/Rate s.
	Rate float64
	// Delay is the propagation delay.
	Delay sim.Time
	// QueueBytes is the drop-tail queue capacity in bytes.
	QueueBytes int
	// ECN configures marking at this direction's egress queue.
	ECN ECNConfig
	// Impair is the netem-style impairment applied to this direction.
	Impair Impairment
	// PFC makes the link lossless with priority flow control (see
	// pfc.go); the zero value leaves it lossy.
	PFC PFCConfig
	// LossAt says where Impair's loss and corruption hit a packet: on the
	// wire (the zero value, as a lossy optic or a bad cable does) or at
	// enqueue (as tc-netem does). See LossPoint.
	LossAt LossPoint
}

// LossPoint says where a link impairment loses and corrupts packets.
type LossPoint uint8

// Loss points.
const (
	// LossAtWire: a packet the loss model picks is admitted to the queue,
	// serialized and propagated like any other, and discarded by the
	// receiving port as a frame with a bad FCS (DropFCS): it costs the
	// wire its time, as on a real link. A corrupted packet is the same
	// FCS error (one flipped bit always fails the Ethernet CRC), so it
	// never reaches the far node either. netem's "ecn" still marks at
	// enqueue what the loss model would drop.
	LossAtWire LossPoint = iota
	// LossAtEnqueue is tc-netem's behaviour, for labs that emulate tc: a
	// lost packet is dropped before the queue (DropImpairment) and takes
	// no wire time; a corrupted packet is delivered with one bit flipped
	// after its IPv4 header, for the receiver's integrity checks to catch.
	LossAtEnqueue
)

var lossPointNames = [...]string{LossAtWire: "wire", LossAtEnqueue: "enqueue"}

// String returns "wire" or "enqueue", the lab file's spelling.
func (l LossPoint) String() string {
	if int(l) < len(lossPointNames) {
		return lossPointNames[l]
	}
	return "losspoint(" + strconv.Itoa(int(l)) + ")"
}

// ParseLossPoint reads "wire" or "enqueue" (also "netem"); "" is wire.
func ParseLossPoint(s string) (LossPoint, error) {
	switch strings.ToLower(s) {
	case "wire", "":
		return LossAtWire, nil
	case "enqueue", "netem":
		return LossAtEnqueue, nil
	}
	return 0, fmt.Errorf("loss point %q: want wire or enqueue", s)
}

// ECNMode selects how a queue marks ECN-capable packets.
type ECNMode uint8

// ECN marking modes.
const (
	ECNOff  ECNMode = iota
	ECNStep         // mark CE when the instantaneous queue exceeds K bytes (DCTCP)
	ECNRED          // mark with probability rising from 0 at Min to PMax at Max, then 1
)

// ECNConfig configures ECN marking. Only ECT(0)/ECT(1) packets are marked.
type ECNConfig struct {
	Mode ECNMode
	// K is the step threshold in bytes (ECNStep).
	K int
	// Min, Max (bytes) and PMax (0..1) are RED's thresholds (ECNRED).
	Min, Max int
	PMax     float64
	// Weight is RED's EWMA weight for the averaged queue; 0 means use the
	// instantaneous queue.
	Weight float64
}
