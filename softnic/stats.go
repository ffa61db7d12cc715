package softnic

// DropReason says why the NIC discarded a packet. Each reason is a column of
// Stats.Drops.
type DropReason uint8

// NIC drop reasons.
const (
	// DropMalformed: not a valid IPv4 packet, a truncated UDP header, or a
	// transport payload its protocol could not demultiplex.
	DropMalformed DropReason = iota
	// DropNotMine: a transport packet addressed to another host.
	DropNotMine
	// DropUnknownConn: a transport packet for a connection id this NIC
	// does not have (closed, or never opened).
	DropUnknownConn
	// DropWrongPeer: a transport packet for a connection whose peer has
	// another address (a stray or spoofed packet).
	DropWrongPeer
	// DropNoListener: a connection request with no listener to accept it,
	// or one the transport refused.
	DropNoListener
	// DropNoHostPort: a packet for the host kernel with no host port set.
	DropNoHostPort
	// DropICRC: a RoCEv2 packet whose invariant CRC did not check.
	DropICRC
	// DropHostQueue: a host packet to send found the port's host queue
	// full (or, with Config.SharedHostQueue, the NIC's shared host buffer).
	DropHostQueue
	// DropPortDown: a host packet to send found every port down.
	DropPortDown
	// DropSpoofed: a host packet to send whose IPv4 source is not the
	// NIC's address (a raw socket posing as another host).
	DropSpoofed
	// DropSetupLimit: a connection request refused because its source had
	// too many half-open connections or was rate-limited for access
	// errors (guard.go). Nothing is sent back.
	DropSetupLimit
	numDropReasons
)

var dropNames = [numDropReasons]string{"malformed", "not-mine", "unknown-conn", "wrong-peer", "no-listener",
	"no-host-port", "icrc", "host-queue-full", "port-down", "spoofed", "setup-limit"}

// String names the drop reason in statistics and metrics.
func (r DropReason) String() string {
	if r < numDropReasons {
		return dropNames[r]
	}
	return "unknown"
}

// DropReasons lists every drop reason, in column order.
func DropReasons() []DropReason {
	r := make([]DropReason, numDropReasons)
	for i := range r {
		r[i] = DropReason(i)
	}
	return r
}

// Stats are a NIC's counters. They only grow.
type Stats struct {
	TxPackets, TxBytes uint64 // everything sent on any port (IPv4 bytes)
	RxPackets, RxBytes uint64 // everything received on any port
	// HostTxPackets counts packets the host injected with SendIP and the
	// NIC sent; HostRxPackets packets delivered to the host port.
	HostTxPackets, HostRxPackets uint64
	// CEReceived counts transport packets that arrived marked CE.
	CEReceived uint64
	// ECTSent counts transport packets sent with ECT(0).
	ECTSent uint64
	// Accepted counts passive connections whose handshake completed and
	// that went to a listener; Refused those of them the application
	// refused (Conn.Refuse): connection requests it did not ask for.
	Accepted, Refused uint64
	// HalfOpenOpened counts passive connections opened by a request
	// (half-open until their handshake completes); HalfOpenEvicted those
	// a listener's bound evicted (guard.go).
	HalfOpenOpened, HalfOpenEvicted uint64
	// CQOverruns counts completions lost because a completion queue was
	// full.
	CQOverruns uint64
	// AccessErrors counts peers' requests refused by the region table (bad
	// rkey, range or permission); ProtectionErrors local SGEs refused.
	AccessErrors, ProtectionErrors uint64
	// SyntheticMaterialized counts gathers from a synthetic region into
	// something other than the packet being built (the content was
	// generated as real bytes); SyntheticOpaque counts placements of real,
	// non-zero bytes into a synthetic region (content no check matches).
	SyntheticMaterialized, SyntheticOpaque uint64
	// TransmitOverruns counts Transmit calls that claimed more bytes than
	// the buffer held: a transport bug, sent as nothing.
	TransmitOverruns uint64
	Drops            [numDropReasons]uint64
}

// Dropped returns the total number of dropped packets.
func (s *Stats) Dropped() uint64 {
	var n uint64
	for _, d := range s.Drops {
		n += d
	}
	return n
}

// PortStats are one port's counters.
type PortStats struct {
	TxPackets, TxBytes uint64
	RxPackets, RxBytes uint64
}

// ConnStats are what the NIC itself counts for one connection: the framed
// packets that went out and came in. Transport-level figures
// (retransmissions, per-path windows) come from TransportStats.
type ConnStats struct {
	TxPackets, TxBytes uint64 // transport payload bytes
	RxPackets, RxBytes uint64
	CEReceived         uint64
	// AccessErrors counts the peer's requests this end refused;
	// ProtectionErrors this end's own SGEs refused.
	AccessErrors, ProtectionErrors uint64
	// PortTxPackets counts packets sent per port (plane).
	PortTxPackets []uint64
	// BytesCompleted counts the bytes of this end's WRITEs, SENDs and
	// READs that completed OK: every byte acknowledged by the peer (for a
	// READ, arrived), counted as each message completes.
	BytesCompleted uint64
}

// BytesCompleted returns ConnStats.BytesCompleted without copying the
// rest (telemetry reads it every interval).
func (c *Conn) BytesCompleted() uint64 { return c.stats.BytesCompleted }
