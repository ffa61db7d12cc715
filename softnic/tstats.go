package softnic

import "github.com/mrlab/mrlab/transport"

// TransportTotals are transport counters summed over connections.
type TransportTotals struct {
	// Retransmits counts data packets sent again.
	Retransmits uint64
	// Timeouts counts retransmission timeouts.
	Timeouts uint64
	// ECNEchoes counts congestion notifications senders acted on (ECN
	// echoes in MetaRoCE ACKs, CNPs in RoCEv2).
	ECNEchoes uint64
	// ChecksumDrops counts packets a transport dropped for a bad checksum
	// of its own (the NIC's ICRC drops are Stats.Drops[DropICRC]);
	// Duplicates data packets received again.
	ChecksumDrops, Duplicates uint64
	// SpuriousLosses and EarlierArrived: see transport.Stats.
	SpuriousLosses, EarlierArrived uint64
}

// add adds one connection's counters.
func (t *TransportTotals) add(s *transport.Stats) {
	t.Retransmits += s.Retransmits
	t.Timeouts += s.Timeouts
	t.ECNEchoes += s.ECNEchoes
	t.ChecksumDrops += s.ChecksumDrops
	t.Duplicates += s.Duplicates
	t.SpuriousLosses += s.SpuriousLosses
	t.EarlierArrived += s.EarlierArrived
}

// TransportStats returns the connection's transport figures, whichever
// transport it speaks (see transport.StatsReporter).
func (c *Conn) TransportStats() transport.Stats {
	var s transport.Stats
	c.tc.ReportStats(&s)
	return s
}
