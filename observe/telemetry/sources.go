package telemetry

import (
	"net/netip"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/transport/rocev2"
)

// networkSource samples every link direction of a fabric from one counter
// snapshot per sampling instant.
type networkSource struct {
	n    *fabric.Network
	prev map[dirKey]*linkPrev
	// All writes every direction every time; otherwise idle directions
	// (nothing sent, queued, dropped or marked since the last sample) are
	// skipped, which keeps big labs' files small.
	all bool
}

type dirKey struct {
	link string
	dir  fabric.Direction
}

type linkPrev struct {
	name  string
	prev  prev
	drops uint64
	marks uint64
	sent  bool
}

// AddNetwork samples the link directions of a fabric: queue depth, bytes
// and packets sent, drops, CE marks and utilization, named "link:AtoB" as
// the fabric's counters name them. Unless all is set, a direction is
// written only when something happened on it since its last sample.
func (s *Sampler) AddNetwork(n *fabric.Network, all bool) {
	s.nets = append(s.nets, &networkSource{n: n, prev: map[dirKey]*linkPrev{}, all: all})
}

func (s *Sampler) sampleNetwork(now sim.Time, ns *networkSource) {
	snap := ns.n.Counters()
	for i := range snap.Links {
		lc := &snap.Links[i]
		k := dirKey{lc.Link, lc.Dir}
		lp := ns.prev[k]
		if lp == nil {
			lp = &linkPrev{name: lc.Link + ":" + lc.Dir.String()}
			ns.prev[k] = lp
		}
		drops := lc.Drops.Total()
		idle := lp.sent && lc.TxBytes == lp.prev.txBytes && lc.QueueBytes == 0 && drops == lp.drops && lc.ECNMarks == lp.marks
		smp := &s.s
		*smp = Sample{T: now, Kind: KindLink, Link: lp.name, QueueBytes: int64(lc.QueueBytes), TxBytes: lc.TxBytes,
			TxPackets: lc.TxPackets, Drops: drops, Marks: lc.ECNMarks}
		p := &lp.prev
		if p.valid && now > p.t && lc.Rate > 0 && lc.TxBytes >= p.txBytes {
			smp.Util = float64(lc.TxBytes-p.txBytes) * 8 / (now - p.t).Seconds() / lc.Rate
		}
		p.t, p.valid, p.txBytes = now, true, lc.TxBytes
		lp.drops, lp.marks = drops, lc.ECNMarks
		if idle && !ns.all {
			continue
		}
		lp.sent = true
		s.note(s.sink.Write(smp))
	}
}

// nicSource samples every connection a NIC has, as they come.
type nicSource struct {
	host  string
	nic   *softnic.NIC
	peer  func(netip.Addr) string
	conns map[uint32]*connEntry
}

// AddNIC samples every connection of a host's NIC, including connections
// opened later. peer names the host at an address (nil: the address).
// Connections whose transport reports nothing telemetry understands are
// skipped.
func (s *Sampler) AddNIC(host string, nic *softnic.NIC, peer func(netip.Addr) string) {
	s.nics = append(s.nics, &nicSource{host: host, nic: nic, peer: peer, conns: map[uint32]*connEntry{}})
}

func (s *Sampler) sampleNIC(now sim.Time, ns *nicSource) {
	for _, c := range ns.nic.Conns() {
		if c == nil {
			continue
		}
		e := ns.conns[c.ID()]
		if e == nil {
			src := ConnSourceOf(c.Transport())
			if src == nil {
				continue
			}
			peer := c.Peer().String()
			if ns.peer != nil {
				if n := ns.peer(c.Peer()); n != "" {
					peer = n
				}
			}
			e = &connEntry{host: ns.host, peer: peer, id: c.ID(), src: src}
			ns.conns[c.ID()] = e
		}
		if e.removed {
			continue
		}
		s.sampleConn(now, e)
		if st := c.State(); st == transport.StateClosed || st == transport.StateError {
			// One last sample shows the end; then the series stops.
			e.removed = true
		}
	}
}

// ConnSourceOf adapts a transport connection to ConnSource, or returns nil
// for a transport telemetry does not know.
func ConnSourceOf(tc transport.Conn) ConnSource {
	switch c := tc.(type) {
	case ConnSource:
		return c
	case *rocev2.Conn:
		return roceSource{c}
	case *metaroce.Conn:
		return mrSource{c}
	}
	return nil
}

// mrSource reads a MetaRoCE connection. Its delivery rate (rate_bps) is the
// bytes it placed as a receiver, so a flow's goodput shows on its
// receiving end; every end's send rate counts the payload bytes it sent.
// A path's rate is its send rate (the transport counts acknowledged
// packets per path, not bytes) and its ECN fraction the share of its
// acknowledged packets that were CE marked, per interval.
type mrSource struct{ c *metaroce.Conn }

func (m mrSource) TelemetryConn() ConnStats {
	st := m.c.Stats()
	cs := ConnStats{Transport: "metaroce", InFlight: int64(st.InFlight), SRTT: st.SRTT, RateHint: st.RateHint * 8,
		BytesAcked: st.BytesPlaced, TxBytes: st.BytesSent, Retransmits: st.Retransmits, Timeouts: st.Timeouts,
		EntropyChanges: st.EntropyChanges}
	for i := 0; i < st.Paths; i++ {
		ps := m.c.PathStats(i)
		cs.Cwnd += int64(ps.Cwnd)
		cs.PacketsAcked += ps.Acked
		cs.CEAcked += ps.CEAcked
		if ps.State == metaroce.PathActive && (cs.RTO == 0 || ps.RTO < cs.RTO) {
			cs.RTO = ps.RTO
		}
	}
	return cs
}

func (m mrSource) NumPaths() int { return m.c.Paths() }

func (m mrSource) TelemetryPath(i int) PathStats {
	ps := m.c.PathStats(i)
	return PathStats{Plane: ps.Plane, Entropy: ps.Entropy, State: ps.State.String(), Cwnd: int64(ps.Cwnd),
		InFlight: int64(ps.InFlight), SRTT: ps.SRTT, RTO: ps.RTO, PacketsAcked: ps.Acked, CEAcked: ps.CEAcked,
		TxBytes: ps.Bytes, Retransmits: ps.Retransmits, Timeouts: ps.Timeouts, EntropyChanges: ps.EntropyChanges}
}

// roceSource reads a RoCEv2 QP: one path (its fixed source port and
// port), the go-back-N window as cwnd, the DCQCN rate as the pacing rate.
// The baseline keeps no RTT estimate and no acknowledged-byte count, so
// srtt, rto and the delivery rate stay 0; the send rate comes from the
// bytes it transmitted.
type roceSource struct{ c *rocev2.Conn }

func (r roceSource) TelemetryConn() ConnStats {
	st := r.c.Stats()
	return ConnStats{Transport: "rocev2", Cwnd: int64(st.Window) * int64(r.c.MTU()), PacingRate: st.Rate,
		TxBytes: st.TxBytes, Retransmits: st.Retransmitted, Timeouts: st.Timeouts}
}

func (r roceSource) NumPaths() int { return 1 }

func (r roceSource) TelemetryPath(int) PathStats {
	st := r.c.Stats()
	return PathStats{Plane: r.c.Port(), Entropy: r.c.SourcePort(), State: r.c.State().String(),
		Cwnd: int64(st.Window) * int64(r.c.MTU()), TxBytes: st.TxBytes, Retransmits: st.Retransmitted, Timeouts: st.Timeouts}
}
