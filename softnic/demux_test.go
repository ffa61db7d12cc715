package softnic

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// ipPacket builds an IPv4/UDP packet with the given ports and payload.
func ipPacket(pool *packet.Pool, src, dst netip.Addr, sport, dport uint16, payload []byte) *packet.Buffer {
	b := pool.Get(IPv4UDPSize + len(payload))
	b.SetLen(len(payload))
	copy(b.Data(), payload)
	header.UDP(b.Prepend(header.UDPSize)).Encode(sport, dport, len(payload))
	header.IPv4(b.Prepend(header.IPv4MinSize)).Encode(&header.IPv4Fields{
		TotalLength: uint16(IPv4UDPSize + len(payload)), Protocol: header.IPv4ProtoUDP, Src: src, Dst: dst})
	return b
}

type hostSink struct{ got [][]byte }

func (h *hostSink) Deliver(now sim.Time, ip []byte) {
	h.got = append(h.got, append([]byte(nil), ip...))
}

// sealToy is the toy transport with a trailer checksum over the IPv4
// packet, standing in for RoCEv2's ICRC.
type sealToy struct{ toy }

func (s *sealToy) Seal(ip []byte) { ip[len(ip)-1] = byte(header.Checksum(ip[:len(ip)-1], 0)) }
func (s *sealToy) Check(ip []byte) bool {
	return ip[len(ip)-1] == byte(header.Checksum(ip[:len(ip)-1], 0))
}

func TestReceiveDrops(t *testing.T) {
	p := newPair(t, 1, func() []transport.Protocol {
		return []transport.Protocol{&toy{kind: transport.MetaRoCE, port: toyPort}, &sealToy{toy{kind: transport.RoCEv2, port: 4791, trailer: 1}}}
	})
	pool := p.pool
	data := func(id uint32) []byte {
		b := make([]byte, toyHdr+1)
		b[0] = tResp
		binary.BigEndian.PutUint32(b[1:], id)
		return b
	}
	syn := []byte{tSyn, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0}
	other := netip.MustParseAddr("198.18.0.99")
	garbage := pool.Get(40)
	garbage.SetLen(40)
	badUDP := ipPacket(pool, addrA, addrB, 1, toyPort, []byte("x"))
	header.IPv4(badUDP.Data())[header.IPv4MinSize+5] = 200 // UDP length past the packet
	badSeal := ipPacket(pool, addrA, addrB, 1, 4791, data(1))
	badSeal.Data()[badSeal.Len()-1] ^= 0xff
	cases := []struct {
		name string
		pkt  *packet.Buffer
		want DropReason
	}{
		{"not IPv4", garbage, DropMalformed},
		{"UDP length", badUDP, DropMalformed},
		{"short transport header", ipPacket(pool, addrA, addrB, 1, toyPort, []byte{1, 2}), DropMalformed},
		{"unknown connection", ipPacket(pool, addrA, addrB, 1, toyPort, data(77)), DropUnknownConn},
		{"connection id zero", ipPacket(pool, addrA, addrB, 1, toyPort, data(0)), DropUnknownConn},
		{"not addressed to me", ipPacket(pool, addrA, other, 1, toyPort, data(1)), DropNotMine},
		{"setup without listener", ipPacket(pool, addrA, addrB, 1, toyPort, syn), DropNoListener},
		{"kernel packet without host port", ipPacket(pool, addrA, addrB, 1, 53, []byte("dns")), DropNoHostPort},
		{"bad ICRC", badSeal, DropICRC},
		{"wrong peer", ipPacket(pool, other, addrB, 1, toyPort, data(1)), DropWrongPeer},
	}
	// One real connection, for the wrong-peer case.
	p.connect(t, 4096, transport.AccessLocalWrite, transport.MetaRoCE)
	p.b.StopListening(0)
	p.loop.RunUntil(p.loop.Now() + sim.Millisecond)
	rx0 := p.b.Stats().RxPackets
	for _, c := range cases {
		before := p.b.Stats()
		p.b.Receive(0, 0, c.pkt)
		after := p.b.Stats()
		var want Stats = before
		want.Drops[c.want]++
		if d := cmp.Diff(want.Drops, after.Drops); d != "" {
			t.Errorf("%s: drops (-want +got):\n%s", c.name, d)
		}
	}
	if p.pool.Outstanding() != 0 {
		t.Errorf("%d buffers leaked", p.pool.Outstanding())
	}
	if got := p.b.Stats().RxPackets - rx0; got != uint64(len(cases)) {
		t.Errorf("rx packets %d, want %d", got, len(cases))
	}
}

func TestSealedTransport(t *testing.T) {
	p := newPair(t, 1, func() []transport.Protocol {
		return []transport.Protocol{&sealToy{toy{kind: transport.RoCEv2, port: 4791, trailer: 1}}}
	})
	src, dst := p.connect(t, 4096, transport.AccessLocalWrite|transport.AccessRemoteWrite, transport.RoCEv2)
	wr := transport.WorkRequest{ID: 1, Op: transport.OpWrite, RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey(), NumSGE: 1}
	wr.SGL[0] = src.mr.SGE(0, 100)
	if err := src.c.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	if wc := p.waitCompletion(t, src.cq, sim.Millisecond); wc.Status != transport.StatusOK {
		t.Fatalf("completion %+v", wc)
	}
	if d := p.a.Stats().Drops[DropICRC] + p.b.Stats().Drops[DropICRC]; d != 0 {
		t.Errorf("%d ICRC drops of sealed packets", d)
	}
}

func TestHostPort(t *testing.T) {
	p := newPair(t, 4, toyProtos)
	sink := &hostSink{}
	p.b.SetHostPort(sink)
	// Kernel traffic from a to b: each flow keeps to one plane.
	planes := map[uint16]int{}
	for i := 0; i < 64; i++ {
		sport := uint16(1000 + i%8)
		b := ipPacket(p.pool, addrA, addrB, sport, 5201, []byte{byte(i)})
		before := make([]int, 4)
		for k, w := range p.ab {
			before[k] = w.sent
		}
		p.a.SendIP(p.loop.Now(), b)
		p.loop.RunUntil(p.loop.Now() + 10*sim.Microsecond)
		plane := -1
		for k, w := range p.ab {
			if w.sent != before[k] {
				plane = k
			}
		}
		if prev, ok := planes[sport]; ok && prev != plane {
			t.Fatalf("flow %d moved from plane %d to %d", sport, prev, plane)
		}
		planes[sport] = plane
	}
	used := map[int]bool{}
	for _, pl := range planes {
		used[pl] = true
	}
	if len(used) < 2 {
		t.Errorf("8 flows all hashed to planes %v", used)
	}
	if len(sink.got) != 64 || sink.got[5][IPv4UDPSize] != 5 {
		t.Fatalf("host received %d packets", len(sink.got))
	}
	if s := p.b.Stats(); s.HostRxPackets != 64 {
		t.Errorf("host rx %d", s.HostRxPackets)
	}
	// A down port is skipped; all down is a counted drop.
	for _, w := range p.ab {
		w.down = true
	}
	p.a.SendIP(p.loop.Now(), ipPacket(p.pool, addrA, addrB, 1, 2, nil))
	if p.a.Stats().Drops[DropPortDown] != 1 {
		t.Error("send with every port down not counted")
	}
	bad := p.pool.Get(10)
	bad.SetLen(10)
	p.a.SendIP(p.loop.Now(), bad)
	if p.a.Stats().Drops[DropMalformed] != 1 {
		t.Error("malformed host packet not counted")
	}
}

func TestHostQueueFull(t *testing.T) {
	loop := sim.NewLoop()
	pool := packet.NewPool()
	n, _ := New(Config{Name: "n", Addr: addrA, Ports: 1, Sched: loop, Pool: pool, HostQueue: 2})
	w := newFakeWire(loop, 1e9, 0)
	w.busy = true // hold everything in the host queue
	if err := n.SetWires(w); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		n.SendIP(0, ipPacket(pool, addrA, addrB, 1, 2, nil))
	}
	if n.Stats().Drops[DropHostQueue] != 1 {
		t.Errorf("drops %v", n.Stats().Drops)
	}
	w.busy = false
	w.onIdle(0)
	loop.Run()
	if n.Stats().HostTxPackets != 2 || pool.Outstanding() != 0 {
		t.Errorf("host tx %d, outstanding %d", n.Stats().HostTxPackets, pool.Outstanding())
	}
}

// With SharedHostQueue, HostQueue bounds the host packets of all ports
// together: one flow (one port) may use the whole buffer, and once it is
// full a flow on another port finds it full too.
func TestSharedHostQueue(t *testing.T) {
	loop := sim.NewLoop()
	pool := packet.NewPool()
	n, err := New(Config{Name: "n", Addr: addrA, Ports: 2, Sched: loop, Pool: pool, HostQueue: 6, SharedHostQueue: true})
	if err != nil {
		t.Fatal(err)
	}
	w0, w1 := newFakeWire(loop, 1e9, 0), newFakeWire(loop, 1e9, 0)
	w0.busy, w1.busy = true, true // hold everything in the host queues
	if err := n.SetWires(w0, w1); err != nil {
		t.Fatal(err)
	}
	// Find a source port for each port of the NIC.
	var sport [2]uint16
	for sp, found := uint16(1), 0; found < 2; sp++ {
		n.SendIP(0, ipPacket(pool, addrA, addrB, sp, 2, nil))
		for i := range n.ports {
			if n.ports[i].hN == 1 && sport[i] == 0 {
				sport[i], found = sp, found+1
			}
		}
		w0.busy, w1.busy = false, false
		w0.onIdle(0)
		w1.onIdle(0)
		loop.Run()
		w0.busy, w1.busy = true, true
	}
	for range 7 {
		n.SendIP(loop.Now(), ipPacket(pool, addrA, addrB, sport[0], 2, nil))
	}
	if hn, d := n.ports[0].hN, n.Stats().Drops[DropHostQueue]; hn != 6 || d != 1 {
		t.Errorf("one flow of 7 packets into a shared buffer of 6: %d queued at its port, %d dropped; want 6 and 1", hn, d)
	}
	n.SendIP(loop.Now(), ipPacket(pool, addrA, addrB, sport[1], 2, nil))
	if hn, d := n.ports[1].hN, n.Stats().Drops[DropHostQueue]; hn != 0 || d != 2 {
		t.Errorf("a packet for the other port with the buffer full: %d queued there, %d dropped in all; want 0 and 2", hn, d)
	}
	w0.busy = false
	w0.onIdle(0)
	loop.Run()
	n.SendIP(loop.Now(), ipPacket(pool, addrA, addrB, sport[1], 2, nil))
	if hn := n.ports[1].hN; hn != 1 {
		t.Errorf("once the buffer drained, the other port queued %d, want 1", hn)
	}
}

// The host queue is made on the first host packet and grows with need,
// wrapped or not, to HostQueue: packets leave in the order they came and
// the ones beyond HostQueue are counted drops.
func TestHostQueueGrows(t *testing.T) {
	loop := sim.NewLoop()
	pool := packet.NewPool()
	n, _ := New(Config{Name: "n", Addr: addrA, Ports: 1, Sched: loop, Pool: pool, HostQueue: 20})
	w := newFakeWire(loop, 1e9, 0)
	if err := n.SetWires(w); err != nil {
		t.Fatal(err)
	}
	if n.ports[0].host != nil {
		t.Fatalf("host queue of %d made before any host packet", len(n.ports[0].host))
	}
	var order []uint16
	w.seen = func(p *packet.Buffer) {
		order = append(order, header.UDP(p.Data()[header.IPv4MinSize:]).SrcPort())
	}
	sport := uint16(0)
	send := func(k int) {
		for range k {
			sport++
			n.SendIP(loop.Now(), ipPacket(pool, addrA, addrB, sport, 2, nil))
		}
	}
	w.busy = true
	send(6) // a queue of 8
	w.busy = false
	w.onIdle(0) // one leaves: the queue's head moves
	send(10)    // 15 waiting: grows to 16 wrapped
	send(10)    // to 20, then 5 drops
	if got := n.Stats().Drops[DropHostQueue]; got != 5 {
		t.Errorf("%d host queue drops, want 5", got)
	}
	if l := len(n.ports[0].host); l != 20 {
		t.Errorf("host queue of %d, want HostQueue's 20", l)
	}
	loop.Run()
	if len(order) != 21 {
		t.Fatalf("%d packets sent, want 21", len(order))
	}
	for i, sp := range order {
		if sp != uint16(i+1) {
			t.Fatalf("sent in the order %v, want 1..21", order)
		}
	}
	if pool.Outstanding() != 0 {
		t.Errorf("%d buffers outstanding", pool.Outstanding())
	}
}

func TestRepeatedSetupReachesSameConn(t *testing.T) {
	p := newPair(t, 1, toyProtos)
	var accepted int
	pd := p.b.AllocPD()
	p.b.Listen(&ListenOptions{ConnOptions: ConnOptions{PD: pd}, OnConn: func(*Conn) { accepted++ }})
	syn := []byte{tSyn, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0}
	for i := 0; i < 3; i++ {
		p.b.Receive(0, 0, ipPacket(p.pool, addrA, addrB, 1, toyPort, syn))
	}
	if accepted != 1 || len(p.b.Conns()) != 1 || p.b.Stats().Accepted != 1 {
		t.Fatalf("accepted %d, conns %d", accepted, len(p.b.Conns()))
	}
	if tc := p.b.Conns()[0].Transport().(*toyConn); tc.rxCount != 2 {
		t.Errorf("repeats delivered to the connection: %d, want 2", tc.rxCount)
	}
}
