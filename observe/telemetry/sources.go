package telemetry

import (
	"net/netip"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
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
		smp := s.linkSample(now, lp.name, &lp.prev, linkStats{QueueBytes: int64(lc.QueueBytes), TxBytes: lc.TxBytes,
			TxPackets: lc.TxPackets, Drops: drops, Marks: lc.ECNMarks, Rate: lc.Rate})
		smp.DropsBy = lc.Drops
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
// opened later, whatever their transport. peer names the host at an
// address (nil: the address).
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
			peer := c.Peer().String()
			if ns.peer != nil {
				if n := ns.peer(c.Peer()); n != "" {
					peer = n
				}
			}
			e = &connEntry{host: ns.host, peer: peer, id: c.ID(), transport: c.Kind().String(), src: c.Transport(),
				acked: c.BytesCompleted}
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
