package fabric

import (
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// Node is anything links deliver packets to: a switch, or a host's NIC.
// Receive takes ownership of p, which arrived on the node's port.
type Node interface {
	Receive(now sim.Time, port int, p *packet.Buffer)
}

// Event is what happened to a packet at an observation point.
type Event uint8

// Packet events, in the order a packet meets them on a link.
const (
	EvEnqueue   Event = iota + 1 // accepted into a link's queue
	EvTransmit                   // serialization started
	EvDeliver                    // arrived at the far end of the link
	EvDrop                       // dropped (Reason says why)
	EvMark                       // CE marked at enqueue
	EvCorrupt                    // a bit flipped by an impairment
	EvDuplicate                  // a copy made by an impairment
)

// DropReason says why a packet was dropped.
type DropReason uint8

// Drop reasons, the columns of the drop counters.
const (
	DropNone       DropReason = iota
	DropQueueFull             // drop-tail queue overflow
	DropImpairment            // netem loss model
	DropLinkDown              // link administratively or failed down
	DropNoRoute               // no route for the destination
	DropBlackHole             // hashed to a failed port before detection
	DropTTL                   // TTL expired
	DropMalformed             // not a valid IPv4 packet
	numDropReasons
)

// Observer sees packet events on links and switches. Capture, traces and
// trace hashes are Observers. A Network with no Observer does no work for
// them. Observe must not keep p after it returns.
type Observer interface {
	Observe(now sim.Time, ev Event, point Point, p *packet.Buffer, reason DropReason)
}

// Point identifies where an event happened: a link direction (Link >= 0)
// or a switch (Link < 0, Node set).
type Point struct {
	Link int    // index into the Network's link directions, or -1
	Node string // switch or host name for node events
}
