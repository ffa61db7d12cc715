package metaroce

import "github.com/mrlab/mrlab/transport"

// ReportStats implements transport.StatsReporter from Stats and PathStats.
// The connection's RTO is the shortest of its active paths' probe
// timeouts; PacketsAcked and CEAcked sum the paths'; Cwnd sums the paths'
// shares of the window; PacingRate is R (cc.go).
func (c *Conn) ReportStats(s *transport.Stats) {
	st := c.Stats()
	paths := s.Paths[:0]
	*s = transport.Stats{
		TxBytes: st.BytesSent, BytesPlaced: st.BytesPlaced,
		Retransmits: st.Retransmits, Timeouts: st.Timeouts, ECNEchoes: st.ECEReceived,
		SpuriousLosses: st.SpuriousLosses, EarlierArrived: st.EarlierArrived,
		EntropyChanges: st.EntropyChanges,
		ChecksumDrops:  st.DropChecksum, Duplicates: st.DupPackets,
		InFlight: st.InFlight, SRTT: st.SRTT, RateHint: st.RateHint * 8,
		PacingRate: c.paceRate() * 8,
	}
	for i := range st.Paths {
		p := c.PathStats(i)
		s.Cwnd += p.Cwnd
		s.PacketsAcked += p.Acked
		s.CEAcked += p.CEAcked
		if p.State == PathActive && (s.RTO == 0 || p.RTO < s.RTO) {
			s.RTO = p.RTO
		}
		paths = append(paths, transport.PathStats{
			Port: p.Plane, Entropy: p.Entropy, State: p.State.String(),
			Sent: p.Packets, TxBytes: p.Bytes, PacketsAcked: p.Acked, CEAcked: p.CEAcked,
			Retransmits: p.Retransmits, Timeouts: p.Timeouts, EntropyChanges: p.EntropyChanges,
			Cwnd: p.Cwnd, InFlight: p.InFlight, SRTT: p.SRTT, RTO: p.RTO,
		})
	}
	s.Paths = paths
}

// ReportCounters implements transport.CounterReporter: ReportStats'
// counters without the per-path walk.
func (c *Conn) ReportCounters(s *transport.Stats) {
	st := &c.st
	*s = transport.Stats{
		TxBytes: st.txBytes, BytesPlaced: st.bytesPlaced,
		Retransmits: st.retransmits, Timeouts: st.timeouts, ECNEchoes: st.ceEchoes,
		SpuriousLosses: uint64(st.spuriousLosses), EarlierArrived: uint64(st.earlierArrived),
		EntropyChanges: st.entropyChanges,
		ChecksumDrops:  st.dropChecksum, Duplicates: st.dupPackets,
		Paths: s.Paths[:0],
	}
}
