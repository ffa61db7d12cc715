package fabric

import (
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// switchNode forwards IPv4 packets by destination. Its FIB maps each
// destination host to an ECMP group: the ports on shortest paths to it
// (computed from the topology, see recomputeRoutes). A packet's port in
// the group is chosen by a hash of its 5-tuple seeded per switch, so one
// flow (one UDP source port) keeps one path, and different switches split
// flows independently (no polarization).
//
// Per packet: validate the IPv4 header (else DropMalformed); drop when TTL
// would reach 0 (DropTTL), else decrement it (checksum fixed); look the
// destination up (DropNoRoute); hash to a port; if that port's link is down
// but routing has not noticed yet, the packet is black-holed
// (DropBlackHole); else enqueue on the port.
type switchNode struct {
	net  *Network
	obs  Observer // the network's, or its partition's recorder (SetObserver)
	name string
	id   int
	seed uint64
	// ports by port number (nil where unwired).
	ports []*Port
	// route maps a destination class (routeState) to a group in groups:
	// -1 if unreachable, routeDirect at the class's own switches.
	route     []int32
	groups    [][]*Port
	groupKeys map[string]int32 // members' port indices -> group
}

var _ Node = (*switchNode)(nil)

// Receive implements Node.
func (s *switchNode) Receive(now sim.Time, port int, b *packet.Buffer) {
	s.forward(now, port, b, int64(now)*1000)
}

// forward routes b, which arrived on port at atPs (picoseconds).
func (s *switchNode) forward(now sim.Time, port int, b *packet.Buffer, atPs int64) {
	if !b.Flow.Valid && !s.net.tag(b) {
		s.drop(now, s.port(port), b, DropMalformed)
		return
	}
	ip := header.IPv4(b.Data())
	if ip.TTL() <= 1 {
		s.drop(now, s.port(port), b, DropTTL)
		return
	}
	ip.DecTTL()
	h := b.Flow.Dst
	gi := int32(-1)
	if h >= 0 {
		gi = s.groupFor(h)
	}
	if gi < 0 {
		s.drop(now, s.port(port), b, DropNoRoute)
		return
	}
	g := s.groups[gi]
	out := g[0]
	if len(g) > 1 {
		f := &b.Flow
		out = g[pick(ecmpHash(s.seed, f.Src, f.DstAddr, f.Proto, f.SPort, f.DPort), len(g))]
	}
	if !out.up {
		s.drop(now, out, b, DropBlackHole)
		return
	}
	out.sentPkts++
	out.sentBytes += uint64(b.Len())
	out.enqueue(now, b, atPs)
}

// port returns the switch's port number i, nil if there is none. Only a
// drop reads it: a forwarded packet does not touch its ingress port.
func (s *switchNode) port(i int) *Port {
	if i >= 0 && i < len(s.ports) {
		return s.ports[i]
	}
	return nil
}

func (s *switchNode) drop(now sim.Time, at *Port, b *packet.Buffer, r DropReason) {
	if at != nil {
		at.nodeDrops[r]++
	}
	if o := s.obs; o != nil {
		o.Observe(now, EvDrop, Point{Link: -1, Node: s.name}, b, r)
	}
	b.Free()
}

// ecmpHash mixes the 5-tuple with a seed (two rounds of the splitmix64
// finalizer: every input bit affects every output bit).
func ecmpHash(seed uint64, src, dst uint32, proto uint8, sport, dport uint16) uint64 {
	h := mix64(seed ^ (uint64(src)<<32 | uint64(dst)))
	return mix64(h ^ (uint64(proto)<<32 | uint64(sport)<<16 | uint64(dport)))
}

// tag validates b's IPv4 header and notes its flow (packet.FlowTag), as
// the fabric does once per packet, where it enters. It reports whether
// the header is valid; an invalid packet stays untagged.
func (n *Network) tag(b *packet.Buffer) bool {
	ip := header.IPv4(b.Data())
	if ip.ValidateIn(b.Len()) != nil {
		return false
	}
	// A header-only packet holds its headers, not all TotalLength bytes.
	src, dst, proto, sport, dport := header.FiveTuple(ip[:min(int(ip.TotalLength()), len(ip))])
	b.Flow = packet.FlowTag{Src: src, DstAddr: dst, SPort: sport, DPort: dport, Proto: proto, Valid: true, Dst: n.hostOf(dst)}
	return true
}

func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// pick maps a hash to 0..n-1 by multiply-shift (unbiased enough for n far
// below 2^32, and no division).
func pick(h uint64, n int) int { return int((h >> 32) * uint64(n) >> 32) }
