package softnic

import "github.com/mrlab/mrlab/internal/sim"

// TransportStats are one connection's transport-level counters, in a form
// both transports fill: what the NIC cannot see from the packets it frames.
type TransportStats struct {
	// Retransmits counts data packets sent again.
	Retransmits uint64
	// Timeouts counts retransmission timeouts.
	Timeouts uint64
	// ECNEchoes counts congestion notifications the sender acted on (ECN
	// echoes in MetaRoCE ACKs, CNPs in RoCEv2).
	ECNEchoes uint64
	// Paths holds per-path figures (one entry for RoCEv2).
	Paths []PathStats
}

// PathStats are one path's figures.
type PathStats struct {
	Path        int
	Port        int    // NIC port (plane)
	Entropy     uint16 // UDP source port
	Sent        uint64 // data packets sent, retransmissions included
	Retransmits uint64
	ECNEchoes   uint64
	SRTT        sim.Time
	Cwnd        int // bytes
}

// TransportStats returns the connection's transport counters, or zeros if
// its transport does not report them.
func (c *Conn) TransportStats() TransportStats {
	return transportStats(c.tc)
}
