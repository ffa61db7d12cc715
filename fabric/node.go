package fabric

import (
	"strconv"

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
	// DropFCS: lost or corrupted on the wire by the link's impairment
	// (LossAtWire); the receiving port discards the frame as an FCS error.
	DropFCS
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

// NumDropReasons is the number of DropReason values, DropNone included: the
// length of a DropCounts array.
const NumDropReasons = int(numDropReasons)

var eventNames = [...]string{
	EvEnqueue:   "enqueue",
	EvTransmit:  "transmit",
	EvDeliver:   "deliver",
	EvDrop:      "drop",
	EvMark:      "mark",
	EvCorrupt:   "corrupt",
	EvDuplicate: "duplicate",
}

// String returns the event's lower-case name, as traces print it.
func (e Event) String() string {
	if int(e) < len(eventNames) && eventNames[e] != "" {
		return eventNames[e]
	}
	return "event(" + strconv.Itoa(int(e)) + ")"
}

var dropReasonNames = [...]string{
	DropNone:       "none",
	DropQueueFull:  "queue-full",
	DropImpairment: "impairment",
	DropLinkDown:   "link-down",
	DropNoRoute:    "no-route",
	DropBlackHole:  "black-hole",
	DropTTL:        "ttl",
	DropMalformed:  "malformed",
	DropFCS:        "fcs-error",
}

// String returns the reason's name, as counters and traces print it.
func (r DropReason) String() string {
	if int(r) < len(dropReasonNames) {
		return dropReasonNames[r]
	}
	return "drop(" + strconv.Itoa(int(r)) + ")"
}

// DropCounts counts drops by reason; index it with a DropReason.
type DropCounts [NumDropReasons]uint64

// Total returns the number of drops for all reasons.
func (d DropCounts) Total() uint64 {
	var t uint64
	for _, n := range d {
		t += n
	}
	return t
}

// add adds o into d.
func (d *DropCounts) add(o *DropCounts) {
	for i := range d {
		d[i] += o[i]
	}
}
