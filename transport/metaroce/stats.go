package metaroce

import (
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// connCounters are a connection's lifetime counters.
type connCounters struct {
	txPackets, txBytes, rxPackets, rxBytes     uint64
	dataPackets, retransmits, losses, timeouts uint64
	entropyChanges, tailProbes                 uint64
	acksSent, acksReceived, staleAcks          uint64
	naksSent, naksReceived, naksDropped        uint64
	// Rare events count in 32 bits: the Conn keeps its size class.
	rnrNaks, rnrNaksSent                   uint32
	protectionNaks, protectionNaksSent     uint32
	spuriousLosses, earlierArrived         uint32
	ceReceived, ceEchoes                   uint64
	dataReceived, dupPackets, dupData      uint64
	bytesPlaced                            uint64
	dropChecksum, dropMalformed, dropState uint64
	dropWindow, dropStale                  uint64
	posted, completions                    uint64
}

// ConnStats is a snapshot of a connection's counters and state.
type ConnStats struct {
	State transport.State
	Paths int
	// Sent and received packets and bytes (MetaRoCE payloads, all types).
	PacketsSent, BytesSent, PacketsReceived, BytesReceived uint64
	// DataPacketsSent counts data packets including retransmissions;
	// Retransmits counts retransmissions (same PSN, or moved to another
	// path); Losses counts PSNs declared lost.
	DataPacketsSent, Retransmits, Losses uint64
	Timeouts, EntropyChanges, TailProbes uint64
	AcksSent, AcksReceived, StaleAcks    uint64
	NaksSent, NaksReceived               uint64
	// RNR NAKs received (as sender) and sent (as receiver).
	RNRNaksReceived, RNRNaksSent uint64
	// Protection and invalid-request NAKs received and sent.
	ProtectionNaksReceived, ProtectionNaksSent uint64
	// CEReceived counts CE-marked data packets received; ECEReceived ACKs
	// that reported new marks.
	CEReceived, ECEReceived uint64
	// DataReceived counts data packets accepted; DupPackets repeated PSNs;
	// DupData chunks already placed via another PSN.
	DataReceived, DupPackets, DupData uint64
	BytesPlaced                       uint64
	// Drops by reason: bad CRC32C, malformed or misaddressed, wrong
	// connection state, outside a window, stale (a completed message).
	DropChecksum, DropMalformed, DropState, DropWindow, DropStale uint64
	Posted, Completions                                           uint64
	// RateHint is the receiver's current fair share for this sender in
	// bytes per second (0: none yet or hints disabled).
	RateHint float64
	// InFlight is the payload bytes outstanding; InFlightCap the current
	// connection-wide limit.
	InFlight, InFlightCap int
	SRTT, MinRTT          sim.Time
	// Open messages (posted, not completed), chunks not yet acknowledged,
	// and receive buffers posted and not yet consumed.
	OpenMessages, OpenChunks, PostedRecvs int
	// RetxShare is the receiver's measured share of arrivals the peer
	// flagged RETX (about the last 64), and AckCopies how many ACKs carry
	// each path's state because of it (1 loss-free, at most
	// maxAckRedundancy, plus a quick extra copy above 2). The flag is
	// the peer's to set: a peer that flags every packet gets every
	// record AckCopies times; these two make that visible.
	RetxShare float64
	AckCopies int
	// Copies counts proactive copies sent: second transmissions of
	// outstanding chunks while the connection's share had room under
	// measured loss (spec §10, redundancy.go). Not in Retransmits.
	Copies uint64
	// GrantRevisions counts SYN_ACKs sent with FlagRevise: first grants
	// lowered after later dialers came (spec §9, first flight).
	GrantRevisions uint64
	// SpuriousLosses counts PSNs declared lost (Losses) that proved to
	// have arrived (acknowledged before their resend went, or by a
	// record echoing a ts older than the resend: lossdetect.go); on a
	// loss-free fabric every declaration is one. EarlierArrived counts
	// chunks sent again (a tail-loss probe, a move after a timeout, a
	// copy) whose earlier transmission proved to have arrived: the
	// resend was not needed.
	SpuriousLosses, EarlierArrived uint64
}

// Stats returns a snapshot of the connection's counters.
func (c *Conn) Stats() ConnStats {
	s := c.st
	return ConnStats{
		State: c.state, Paths: c.pathCount(),
		PacketsSent: s.txPackets, BytesSent: s.txBytes, PacketsReceived: s.rxPackets, BytesReceived: s.rxBytes,
		DataPacketsSent: s.dataPackets, Retransmits: s.retransmits, Losses: s.losses,
		Timeouts: s.timeouts, EntropyChanges: s.entropyChanges, TailProbes: s.tailProbes,
		AcksSent: s.acksSent, AcksReceived: s.acksReceived, StaleAcks: s.staleAcks,
		NaksSent: s.naksSent, NaksReceived: s.naksReceived,
		RNRNaksReceived: uint64(s.rnrNaks), RNRNaksSent: uint64(s.rnrNaksSent),
		ProtectionNaksReceived: uint64(s.protectionNaks), ProtectionNaksSent: uint64(s.protectionNaksSent),
		CEReceived: s.ceReceived, ECEReceived: s.ceEchoes,
		DataReceived: s.dataReceived, DupPackets: s.dupPackets, DupData: s.dupData, BytesPlaced: s.bytesPlaced,
		DropChecksum: s.dropChecksum, DropMalformed: s.dropMalformed, DropState: s.dropState,
		DropWindow: s.dropWindow, DropStale: s.dropStale,
		Posted: s.posted, Completions: s.completions,
		RateHint: c.s.hint, InFlight: c.s.inflight, InFlightCap: c.window(),
		SRTT: c.s.srtt, MinRTT: c.s.minRTT,
		RetxShare: float64(c.r.lossQ) / 65536, AckCopies: int(c.ackRedundancy()),
		Copies: uint64(c.copies), GrantRevisions: uint64(c.ctl.revisions),
		SpuriousLosses: uint64(s.spuriousLosses), EarlierArrived: uint64(s.earlierArrived),
		OpenMessages: int(wire.Seq(c.s.msnBase).Span(wire.Seq(c.s.msnNext))),
		OpenChunks:   int(wire.Seq(c.s.dsnBase).Span(wire.Seq(c.s.dsnNext))),
		PostedRecvs:  int(wire.Seq(c.r.rqBase).Span(wire.Seq(c.r.rqNext))),
	}
}

// PathStats is a snapshot of one sending path.
type PathStats struct {
	State   PathState
	Plane   int
	Entropy uint16
	Gen     uint8
	// Packets and bytes sent (data, retransmissions and probes).
	Packets, Bytes                        uint64
	Retransmits, Losses, Timeouts, Probes uint64
	EntropyChanges                        uint64
	// Acked packets and, of those, CE-marked ones; ECNFraction is their
	// ratio over the path's life.
	Acked, CEAcked uint64
	ECNFraction    float64
	Alpha          float64
	// Cwnd is the path's share of the connection's window, in bytes
	// (doc.go); InFlight its payload bytes outstanding.
	Cwnd, InFlight int
	SRTT, RTTVar   sim.Time
	// RTO is the path's probe timeout (tail-loss probe, then timeout).
	RTO sim.Time
}

// PathStats returns a snapshot of sending path i (0 <= i < Paths).
func (c *Conn) PathStats(i int) PathStats {
	fresh := sndPath{pathCold: &freshCold}
	p, share := &fresh, 0
	if c.s.paths != nil {
		p = &c.s.paths[i]
		share = c.pathShare(p)
	} else {
		// Not allocated yet (ensurePaths): every path is as built, and
		// reading its figures does not allocate them. A connection that
		// closed without ever sending has forgotten its entropies
		// (Protocol.forget): they read 0.
		p.id, p.credit = uint8(i), 1
		if e0 := c.proto.entropy0[c]; i < len(e0) {
			p.entropy = e0[i]
		}
		share = c.freshShare(p)
	}
	s := PathStats{
		State: p.state, Plane: p.plane(c.cfg.Ports), Entropy: p.entropy, Gen: p.gen,
		Packets: p.st.packets, Bytes: p.st.bytes, Retransmits: p.st.retransmits, Losses: p.st.losses,
		Timeouts: p.st.timeouts, Probes: p.st.probes, EntropyChanges: p.st.entropyChanges,
		Acked: p.st.acked, CEAcked: p.st.ceAcked, Alpha: float64(p.alpha),
		Cwnd: share, InFlight: p.sb.inflight, SRTT: p.srtt, RTTVar: p.rttvar, RTO: c.pto(p),
	}
	if p.st.acked > 0 {
		s.ECNFraction = float64(p.st.ceAcked) / float64(p.st.acked)
	}
	return s
}

// Paths returns the number of sending paths.
func (c *Conn) Paths() int { return c.pathCount() }
