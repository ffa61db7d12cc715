package rocev2

import "github.com/mrlab/mrlab/transport"

// ReportStats implements transport.StatsReporter. A QP has one path: its
// port and fixed UDP source port. Its go-back-N window is the congestion
// window and the DCQCN rate the pacing rate. RoCEv2 keeps no RTT estimate
// and counts no acknowledged or placed bytes, so those figures are 0.
func (c *Conn) ReportStats(s *transport.Stats) {
	st := c.Stats()
	cwnd := st.Window * c.mtu
	paths := append(s.Paths[:0], transport.PathStats{
		Port: c.port, Entropy: c.srcPort, State: c.State().String(),
		Sent: st.DataPackets, TxBytes: st.TxBytes, Retransmits: st.Retransmitted, Timeouts: st.Timeouts,
		Cwnd: cwnd,
	})
	*s = transport.Stats{
		TxBytes: st.TxBytes, Retransmits: st.Retransmitted, Timeouts: st.Timeouts, ECNEchoes: st.CNPsReceived,
		Cwnd: cwnd, PacingRate: st.Rate, Paths: paths, Duplicates: st.Duplicates,
	}
}
