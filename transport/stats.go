package transport

import "github.com/mrlab/mrlab/internal/sim"

// StatsReporter is how a connection reports what the NIC cannot see from
// the packets it frames: retransmissions, timeouts, windows, round-trip
// times, per path. Every transport's Conn implements it (Conn embeds it),
// so the NIC, telemetry and tools read any transport's figures without
// knowing which transports exist.
type StatsReporter interface {
	// ReportStats overwrites s with the connection's figures now. It
	// reuses the storage of s.Paths, so a caller that keeps s polls
	// without allocating.
	ReportStats(s *Stats)
}

// CounterReporter is implemented by a connection that can report its
// cumulative connection-wide counters without walking its paths (a
// MetaRoCE connection has up to 256): ReportStats' work, for callers that
// sum counters over every connection, such as a NIC's totals read at the
// start and end of every run.
type CounterReporter interface {
	// ReportCounters overwrites s with what ReportStats would give for
	// TxBytes, BytesPlaced, Retransmits, Timeouts, ECNEchoes,
	// EntropyChanges, ChecksumDrops and Duplicates; every other field is
	// zero and s.Paths is emptied (its storage kept).
	ReportCounters(s *Stats)
}

// Stats are one connection's transport figures at one instant. Counters
// are cumulative over the connection's life; the rest is its state now.
// A figure a transport does not keep is 0.
type Stats struct {
	// TxBytes counts transport payload bytes sent, every packet type.
	TxBytes uint64
	// BytesPlaced counts payload bytes this end placed in its memory as a
	// receiver: a flow's goodput, seen at its receiving end.
	BytesPlaced uint64
	// PacketsAcked counts data packets the peer acknowledged and CEAcked
	// those of them that arrived CE marked.
	PacketsAcked, CEAcked uint64
	// Retransmits counts data packets sent again; Timeouts retransmission
	// timeouts, a probe's included: MetaRoCE keeps probing a failed path,
	// ever less often, so Timeouts grows while a plane is down even when
	// nothing is resent.
	Retransmits, Timeouts uint64
	// SpuriousLosses counts packets declared lost that proved to have
	// arrived; EarlierArrived data sent again (a probe's copy, a move)
	// whose earlier transmission proved to have arrived (MetaRoCE; 0 for
	// a transport that cannot tell). On a loss-free fabric every
	// declared loss is spurious.
	SpuriousLosses, EarlierArrived uint64
	// ECNEchoes counts congestion notifications the sender acted on (ECN
	// echoes in MetaRoCE ACKs, CNPs in RoCEv2).
	ECNEchoes uint64
	// EntropyChanges counts re-pathing decisions (new UDP source ports).
	EntropyChanges uint64
	// ChecksumDrops counts packets this end dropped because the
	// transport's own checksum failed (MetaRoCE's CRC32C; RoCEv2's ICRC is
	// checked by the NIC, which counts its drops). Duplicates counts data
	// packets received again (already placed or acknowledged).
	ChecksumDrops, Duplicates uint64

	// Cwnd is the congestion window in bytes, summed over paths; InFlight
	// the payload bytes sent and not yet acknowledged.
	Cwnd, InFlight int
	// SRTT is the smoothed round-trip time; RTO the retransmission timeout
	// the connection would wait now (the shortest of its usable paths').
	SRTT, RTO sim.Time
	// PacingRate is the rate the sender paces to in bits per second (0:
	// unpaced); RateHint the rate the receiver granted it (0: none).
	PacingRate, RateHint float64

	// Paths are the connection's sending paths: one for a single-path
	// transport such as RoCEv2.
	Paths []PathStats
}

// PathStats are one sending path's figures at one instant.
type PathStats struct {
	// Port is the NIC port (plane) the path leaves on; Entropy its UDP
	// source port now.
	Port    int
	Entropy uint16
	// State names the path's state in the transport's own words.
	State string
	// Sent counts data packets sent on the path, retransmissions
	// included; TxBytes the payload bytes sent on it.
	Sent, TxBytes uint64
	// BytesAcked and PacketsAcked count acknowledged data, CEAcked the
	// acknowledged packets that arrived CE marked.
	BytesAcked, PacketsAcked, CEAcked     uint64
	Retransmits, Timeouts, EntropyChanges uint64
	Cwnd, InFlight                        int // bytes
	SRTT, RTO                             sim.Time
}
