package softnic

import (
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/transport/rocev2"
)

// transportStats reads a transport connection's counters by its concrete
// type: transports do not know softnic's types.
func transportStats(tc transport.Conn) TransportStats {
	switch c := tc.(type) {
	case *metaroce.Conn:
		s := c.Stats()
		ts := TransportStats{Retransmits: s.Retransmits, Timeouts: s.Timeouts, ECNEchoes: s.ECEReceived,
			Paths: make([]PathStats, c.Paths())}
		for i := range ts.Paths {
			p := c.PathStats(i)
			ts.Paths[i] = PathStats{Path: i, Port: p.Plane, Entropy: p.Entropy, Sent: p.Packets,
				Retransmits: p.Retransmits, ECNEchoes: p.CEAcked, SRTT: p.SRTT, Cwnd: p.Cwnd}
		}
		return ts
	case *rocev2.Conn:
		s := c.Stats()
		return TransportStats{
			Retransmits: s.Retransmitted,
			Timeouts:    s.Timeouts,
			ECNEchoes:   s.CNPsReceived,
			Paths: []PathStats{{
				Port: c.Port(), Entropy: c.SourcePort(), Sent: s.DataPackets,
				Retransmits: s.Retransmitted, ECNEchoes: s.CNPsReceived,
				Cwnd: s.Window * c.MTU(),
			}},
		}
	}
	return TransportStats{}
}
