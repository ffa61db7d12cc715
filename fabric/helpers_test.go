package fabric_test

import (
	"net/netip"
	"testing"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// lab is a built network on a fresh loop and pool.
type lab struct {
	loop *sim.Loop
	pool *packet.Pool
	net  *fabric.Network
}

func newLab(t testing.TB, topo *fabric.Topology, opts fabric.BuildOptions) *lab {
	t.Helper()
	l := &lab{loop: sim.NewLoop(), pool: packet.NewPool()}
	n, err := fabric.Build(l.loop, l.pool, topo, opts)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	l.net = n
	return l
}

func mustTopo(t testing.TB, topo *fabric.Topology, err error) *fabric.Topology {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// udp returns an IPv4/UDP packet of total length size.
func udp(pool *packet.Pool, src, dst netip.Addr, sport, dport uint16, size int, ecn uint8) *packet.Buffer {
	b := pool.Get(size)
	b.SetLen(size)
	d := b.Data()
	clear(d)
	header.IPv4(d).Encode(&header.IPv4Fields{TOS: ecn, TotalLength: uint16(size), Protocol: header.IPv4ProtoUDP, Src: src, Dst: dst})
	header.UDP(d[header.IPv4MinSize:]).Encode(sport, dport, size-header.IPv4MinSize-header.UDPSize)
	return b
}

// arrival is one packet a sink received.
type arrival struct {
	at   sim.Time
	port int
	size int
	ecn  uint8
	ttl  uint8
	ok   bool // valid IPv4 header
	data []byte
}

// sink is a Node that records what it receives and frees it.
type sink struct {
	got  []arrival
	keep bool // copy packet bytes
}

func (s *sink) Receive(now sim.Time, port int, b *packet.Buffer) {
	a := arrival{at: now, port: port, size: b.Len()}
	ip := header.IPv4(b.Data())
	if ip.Validate() == nil {
		a.ok, a.ecn, a.ttl = true, ip.ECN(), ip.TTL()
	}
	if s.keep {
		a.data = append([]byte(nil), b.Data()...)
	}
	s.got = append(s.got, a)
	b.Free()
}

// recorder is an Observer that keeps every event.
type recorder struct {
	evs []obsEvent
}

type obsEvent struct {
	at     sim.Time
	ev     fabric.Event
	pt     fabric.Point
	id     uint64
	reason fabric.DropReason
	sport  uint16
	queue  int // the port's queued bytes when the event happened (link events)
}

type recorderWithNet struct {
	recorder
	net *fabric.Network
}

func (r *recorderWithNet) Observe(now sim.Time, ev fabric.Event, pt fabric.Point, p *packet.Buffer, reason fabric.DropReason) {
	e := obsEvent{at: now, ev: ev, pt: pt, id: p.ID, reason: reason}
	if d := p.Data(); len(d) >= header.IPv4MinSize+4 {
		e.sport = header.UDP(d[header.IPv4MinSize:]).SrcPort()
	}
	if pt.Link >= 0 {
		e.queue = r.net.PortAt(pt.Link).QueueBytes()
	}
	r.evs = append(r.evs, e)
}

var (
	addr0 = netip.MustParseAddr("198.18.0.1")
	addr1 = netip.MustParseAddr("198.18.0.2")
)

// b2b builds two hosts joined by one link with params lp, attaches sinks
// and returns h0's port and h1's sink.
func b2b(t testing.TB, lp fabric.LinkParams, opts fabric.BuildOptions) (*lab, *fabric.Port, *sink) {
	t.Helper()
	topo, err := fabric.BackToBack(fabric.BackToBackParams{Link: lp})
	l := newLab(t, mustTopo(t, topo, err), opts)
	ports, err := l.net.Attach("h0", &sink{})
	if err != nil {
		t.Fatal(err)
	}
	s1 := &sink{}
	if _, err := l.net.Attach("h1", s1); err != nil {
		t.Fatal(err)
	}
	return l, ports[0], s1
}
