package softnic

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// TestSpoofedHostPacketsDropped: a host packet whose source is another
// host's address never reaches a wire; it is counted as spoofed.
func TestSpoofedHostPacketsDropped(t *testing.T) {
	p := newPair(t, 2, toyProtos)
	sink := &hostSink{}
	p.b.SetHostPort(sink)
	other := netip.MustParseAddr("198.18.0.3")
	for _, src := range []netip.Addr{addrB, other} {
		p.a.SendIP(p.loop.Now(), ipPacket(p.pool, src, addrB, 1, toyPort, []byte{tSyn, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0}))
	}
	p.a.SendIP(p.loop.Now(), ipPacket(p.pool, addrA, addrB, 1, 2, nil))
	p.loop.Run()
	if d := p.a.Stats().Drops[DropSpoofed]; d != 2 {
		t.Errorf("spoofed drops %d, want 2", d)
	}
	sent := 0
	for _, w := range p.ab {
		sent += w.sent
	}
	if sent != 1 || len(sink.got) != 1 || p.b.Stats().Accepted != 0 {
		t.Errorf("%d packets on the wires, %d delivered, %d accepted: want only the honest one", sent, len(sink.got), p.b.Stats().Accepted)
	}
	if p.pool.Outstanding() != 0 {
		t.Errorf("%d buffers leaked", p.pool.Outstanding())
	}
}

// TestRefuse: a listener refusing a connection closes it (the peer hears
// of it) and the NIC counts it.
func TestRefuse(t *testing.T) {
	p := newPair(t, 1, toyProtos)
	pd := p.b.AllocPD()
	var got *Conn
	p.b.Listen(&ListenOptions{ConnOptions: ConnOptions{PD: pd}, OnConn: func(c *Conn) { got = c; c.Refuse() }})
	syn := []byte{tSyn, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0}
	p.b.Receive(0, 0, ipPacket(p.pool, addrA, addrB, 1, toyPort, syn))
	if got == nil || got.State() != transport.StateClosed {
		t.Fatalf("refused connection: %v", got)
	}
	if s := p.b.Stats(); s.Accepted != 1 || s.Refused != 1 {
		t.Errorf("accepted %d refused %d, want 1 and 1", s.Accepted, s.Refused)
	}
}

// TestKeySource: with a KeySource, keys, connection ids and region
// addresses differ between NICs built alike (and between runs); without
// one they are the same for the same seed, as sim mode's traces need.
func TestKeySource(t *testing.T) {
	type ids struct {
		key  uint32
		addr uint64
		conn uint32
	}
	build := func(src rand.Source) ids {
		loop := sim.NewLoop()
		n, err := New(Config{Name: "n", Addr: addrA, Ports: 1, Sched: loop, Pool: packet.NewPool(), Seed: 7,
			Protocols: toyProtos(), KeySource: src})
		if err != nil {
			t.Fatal(err)
		}
		n.SetWires(newFakeWire(loop, 1e9, 0))
		pd := n.AllocPD()
		var last *MR
		for i := 0; i < 3; i++ {
			mr, err := pd.Register(make([]byte, 100), transport.AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			// Every key resolves to its own region, whatever the base.
			if n.lookup(mr.RKey()) != mr || n.lookup(mr.RKey()^0x100) == mr {
				t.Fatalf("key %#x does not name its region alone", mr.RKey())
			}
			last = mr
		}
		c, err := n.Dial(addrB, ConnOptions{PD: pd})
		if err != nil {
			t.Fatal(err)
		}
		if i := n.connIndex(c.ID()); i < 0 || n.conns[i] != c || n.connIndex(c.ID()+1) >= 0 || n.connIndex(0) >= 0 {
			t.Fatalf("connection id %d does not name its connection alone", c.ID())
		}
		if n.Conn(c.ID()) != c || n.Conn(c.ID()+1) != nil || n.Conn(0) != nil {
			t.Fatalf("NIC.Conn(%d) does not return its connection alone", c.ID())
		}
		if c.ID() >= 1<<24-16 {
			t.Fatalf("connection id %#x too wide for RoCEv2", c.ID())
		}
		return ids{last.RKey(), last.Addr(), c.ID()}
	}
	if a, b := build(nil), build(nil); a != b {
		t.Errorf("without a KeySource: %+v then %+v, want the same", a, b)
	}
	a, b := build(CryptoSource()), build(CryptoSource())
	if a.key == b.key || a.addr == b.addr || a.conn == b.conn {
		t.Errorf("with CryptoSource: %+v then %+v, want every field different", a, b)
	}
}
