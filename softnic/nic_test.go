package softnic

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/transport/rocev2"
)

const toyPort = 9000

var (
	addrA = netip.MustParseAddr("198.18.0.1")
	addrB = netip.MustParseAddr("198.18.0.2")
)

// pair is two NICs joined back to back by fake wires, one per port.
type pair struct {
	loop   *sim.Loop
	pool   *packet.Pool
	a, b   *NIC
	ab, ba []*fakeWire
}

func newPair(t testing.TB, ports int, protos func() []transport.Protocol) *pair {
	t.Helper()
	loop := sim.NewLoop()
	pool := packet.NewPool()
	mk := func(name string, addr netip.Addr) *NIC {
		n, err := New(Config{Name: name, Addr: addr, Ports: ports, Sched: loop, Pool: pool, Seed: 7, Protocols: protos()})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	p := &pair{loop: loop, pool: pool, a: mk("a", addrA), b: mk("b", addrB)}
	var wa, wb []Wire
	for i := 0; i < ports; i++ {
		ab := newFakeWire(loop, 100e9, sim.Microsecond)
		ba := newFakeWire(loop, 100e9, sim.Microsecond)
		ab.to, ab.toPort = p.b, i
		ba.to, ba.toPort = p.a, i
		p.ab, p.ba = append(p.ab, ab), append(p.ba, ba)
		wa, wb = append(wa, ab), append(wb, ba)
	}
	if err := p.a.SetWires(wa...); err != nil {
		t.Fatal(err)
	}
	if err := p.b.SetWires(wb...); err != nil {
		t.Fatal(err)
	}
	return p
}

func toyProtos() []transport.Protocol {
	return []transport.Protocol{&toy{kind: transport.MetaRoCE, port: toyPort}}
}

// transportCase is a transport the verbs tests run on.
type transportCase struct {
	name   string
	protos func() []transport.Protocol
	kind   transport.Kind
}

// transportCases are the toy (which tests the NIC alone) and the real
// transports.
func transportCases() []transportCase {
	return []transportCase{
		{"toy", toyProtos, transport.MetaRoCE},
		{"rocev2", func() []transport.Protocol { return []transport.Protocol{rocev2.NewProtocol(rocev2.Options{})} }, transport.RoCEv2},
		{"metaroce", func() []transport.Protocol { return []transport.Protocol{metaroce.NewProtocol(metaroce.Options{})} }, transport.MetaRoCE},
	}
}

// endpoint is one side's verbs objects for a test connection.
type endpoint struct {
	pd  *PD
	mr  *MR
	cq  *CQ
	c   *Conn
	buf []byte
}

// connect dials from a to b with one region of size bytes on each side and
// runs the loop until both ends are established.
func (p *pair) connect(t testing.TB, size int, access transport.Access, kind transport.Kind) (src, dst *endpoint) {
	t.Helper()
	return p.connectMode(t, size, access, kind, PayloadBytes)
}

// connectMode is connect with regions of the given payload mode.
func (p *pair) connectMode(t testing.TB, size int, access transport.Access, kind transport.Kind, mode PayloadMode) (src, dst *endpoint) {
	t.Helper()
	src, dst = &endpoint{}, &endpoint{}
	for _, e := range []struct {
		ep  *endpoint
		nic *NIC
	}{{src, p.a}, {dst, p.b}} {
		e.ep.pd = e.nic.AllocPD()
		var mr *MR
		var err error
		if mode == PayloadSynthetic {
			mr, err = e.ep.pd.RegisterSynthetic(size, access)
		} else {
			e.ep.buf = make([]byte, size)
			mr, err = e.ep.pd.Register(e.ep.buf, access)
		}
		if err != nil {
			t.Fatal(err)
		}
		e.ep.mr = mr
		e.ep.cq = e.nic.CreateCQ(256)
	}
	if err := p.b.Listen(&ListenOptions{
		ConnOptions: ConnOptions{PD: dst.pd, SendCQ: dst.cq, RecvCQ: dst.cq},
		OnConn:      func(c *Conn) { dst.c = c },
	}); err != nil {
		t.Fatal(err)
	}
	c, err := p.a.Dial(p.b.Addr(), ConnOptions{Transport: kind, PD: src.pd, SendCQ: src.cq, RecvCQ: src.cq})
	if err != nil {
		t.Fatal(err)
	}
	src.c = c
	p.loop.RunUntil(p.loop.Now() + sim.Millisecond)
	if c.State() != transport.StateEstablished || dst.c == nil || dst.c.State() != transport.StateEstablished {
		t.Fatalf("connection not established: dial side %v, accepted %v", c.State(), dst.c)
	}
	return src, dst
}

// waitCompletion runs the loop until cq has a completion or limit passes.
func (p *pair) waitCompletion(t testing.TB, cq *CQ, limit sim.Time) Completion {
	t.Helper()
	end := p.loop.Now() + limit
	for cq.Len() == 0 && p.loop.Now() < end && p.loop.Next() <= end {
		p.loop.Step()
	}
	var wc [1]Completion
	if cq.Poll(wc[:]) != 1 {
		t.Fatalf("no completion within %v", limit)
	}
	return wc[0]
}

func TestFraming(t *testing.T) {
	p := newPair(t, 1, toyProtos)
	var pkts [][]byte
	p.ab[0].tap = func(b []byte) { pkts = append(pkts, append([]byte(nil), b...)) }
	p.connect(t, 4096, transport.AccessLocalWrite|transport.AccessRemoteWrite, 0)
	if len(pkts) == 0 {
		t.Fatal("nothing sent")
	}
	ip := header.IPv4(pkts[0])
	if err := ip.Validate(); err != nil {
		t.Fatalf("sent packet: %v", err)
	}
	udp := header.UDP(ip.Payload())
	type fields struct {
		ECN, TTL, Proto uint8
		DF              bool
		Src, Dst        string
		SPort, DPort    uint16
		UDPLen, UDPSum  uint16
	}
	got := fields{ip.ECN(), ip.TTL(), ip.Protocol(), ip[6]&0x40 != 0, ip.Src().String(), ip.Dst().String(),
		udp.SrcPort(), udp.DstPort(), udp.Length(), udp.Checksum()}
	want := fields{header.ECNECT0, 64, header.IPv4ProtoUDP, true, addrA.String(), addrB.String(),
		0xc000 | 1, toyPort, uint16(len(pkts[0]) - 20), 0}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("framing (-want +got):\n%s", d)
	}
	if s := p.a.Stats(); s.ECTSent == 0 || s.TxPackets != uint64(len(pkts)) {
		t.Errorf("stats %+v after %d packets", s, len(pkts))
	}
}

func TestReceiveReadsCE(t *testing.T) {
	p := newPair(t, 1, toyProtos)
	p.ab[0].tap = func(b []byte) { header.IPv4(b).SetECN(header.ECNCE) }
	_, dst := p.connect(t, 4096, transport.AccessLocalWrite|transport.AccessRemoteWrite, 0)
	tc := dst.c.Transport().(*toyConn)
	if !tc.lastRx.CE {
		t.Error("CE mark not passed to the transport")
	}
	if p.b.Stats().CEReceived == 0 || dst.c.Stats().CEReceived == 0 && tc.rxCount > 0 {
		t.Errorf("CE not counted: nic %d conn %d", p.b.Stats().CEReceived, dst.c.Stats().CEReceived)
	}
}

func TestWriteLandsExactly(t *testing.T) {
	for _, tc := range transportCases() {
		t.Run(tc.name, func(t *testing.T) { testWriteLandsExactly(t, tc) })
	}
}

func testWriteLandsExactly(t *testing.T, tc transportCase) {
	p := newPair(t, 2, tc.protos)
	src, dst := p.connect(t, 8192, transport.AccessLocalWrite|transport.AccessRemoteWrite, tc.kind)
	for i := range src.buf {
		src.buf[i] = byte(i*7 + 1)
	}
	// Two SGEs gathered from the source, placed at an offset.
	const off, n1, n2 = 1000, 3000, 700
	wr := transport.WorkRequest{ID: 42, Op: transport.OpWrite, RemoteAddr: dst.mr.Addr() + off, RKey: dst.mr.RKey(), NumSGE: 2}
	wr.SGL[0] = src.mr.SGE(0, n1)
	wr.SGL[1] = src.mr.SGE(5000, n2)
	if err := src.c.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	wc := p.waitCompletion(t, src.cq, sim.Millisecond)
	if wc.Status != transport.StatusOK || wc.ID != 42 || wc.Conn != src.c {
		t.Fatalf("completion %+v", wc)
	}
	want := make([]byte, len(dst.buf))
	copy(want[off:], src.buf[:n1])
	copy(want[off+n1:], src.buf[5000:5000+n2])
	if !bytes.Equal(dst.buf, want) {
		t.Error("destination memory differs from the expected image")
	}
}

func TestMemoryResolve(t *testing.T) {
	loop := sim.NewLoop()
	n, err := New(Config{Name: "n", Addr: addrA, Ports: 1, Sched: loop, Pool: packet.NewPool()})
	if err != nil {
		t.Fatal(err)
	}
	pd, other := n.AllocPD(), n.AllocPD()
	buf := make([]byte, 100)
	rw, _ := pd.Register(buf, transport.AccessLocalWrite|transport.AccessRemoteWrite)
	ro, _ := pd.Register(make([]byte, 100), transport.AccessRemoteRead)
	gone, _ := pd.Register(make([]byte, 100), transport.AccessRemoteWrite)
	if err := gone.Deregister(); err != nil {
		t.Fatal(err)
	}
	if err := gone.Deregister(); !errors.Is(err, ErrDeregistered) {
		t.Errorf("second deregister: %v", err)
	}
	v := &memView{nic: n, pd: pd}
	vo := &memView{nic: n, pd: other}
	ok, rerr, lerr := transport.StatusOK, transport.StatusRemoteAccess, transport.StatusLocalProtection
	tests := []struct {
		name   string
		view   *memView
		key    uint32
		addr   uint64
		n      int
		access transport.Access
		want   transport.Status
		off    int
	}{
		{"whole region", v, rw.RKey(), rw.Addr(), 100, transport.AccessRemoteWrite, ok, 0},
		{"inner range", v, rw.RKey(), rw.Addr() + 10, 20, transport.AccessRemoteWrite, ok, 10},
		{"empty at end", v, rw.RKey(), rw.Addr() + 100, 0, transport.AccessRemoteWrite, ok, 100},
		{"local read", v, rw.LKey(), rw.Addr(), 1, 0, ok, 0},
		{"one past end", v, rw.RKey(), rw.Addr() + 1, 100, transport.AccessRemoteWrite, rerr, 0},
		{"before start", v, rw.RKey(), rw.Addr() - 1, 1, transport.AccessRemoteWrite, rerr, 0},
		{"huge length wraps", v, rw.RKey(), rw.Addr() + 50, 1 << 62, transport.AccessRemoteWrite, rerr, 0},
		{"address wraps", v, rw.RKey(), ^uint64(0), 2, transport.AccessRemoteWrite, rerr, 0},
		{"negative length", v, rw.RKey(), rw.Addr(), -1, transport.AccessRemoteWrite, rerr, 0},
		{"wrong tag", v, rw.RKey() ^ 1, rw.Addr(), 1, transport.AccessRemoteWrite, rerr, 0},
		{"key zero", v, 0, rw.Addr(), 1, transport.AccessRemoteWrite, rerr, 0},
		{"key past table", v, 99 << 8, rw.Addr(), 1, transport.AccessRemoteWrite, rerr, 0},
		{"other region's address", v, rw.RKey(), ro.Addr(), 1, transport.AccessRemoteWrite, rerr, 0},
		{"no remote read", v, rw.RKey(), rw.Addr(), 1, transport.AccessRemoteRead, rerr, 0},
		{"no remote write", v, ro.RKey(), ro.Addr(), 1, transport.AccessRemoteWrite, rerr, 0},
		{"no local write", v, ro.LKey(), ro.Addr(), 1, transport.AccessLocalWrite, lerr, 0},
		{"deregistered", v, gone.RKey(), gone.Addr(), 1, transport.AccessRemoteWrite, rerr, 0},
		{"other PD", vo, rw.RKey(), rw.Addr(), 1, transport.AccessRemoteWrite, rerr, 0},
		{"other PD local", vo, rw.LKey(), rw.Addr(), 1, 0, lerr, 0},
	}
	for _, tt := range tests {
		st := tt.view.Check(tt.key, tt.addr, tt.n, tt.access)
		if st != tt.want {
			t.Errorf("%s: status %v, want %v", tt.name, st, tt.want)
			continue
		}
		if st != ok {
			continue
		}
		if m, off, _ := tt.view.lookupRange(tt.key, tt.addr, tt.n, tt.access); m != rw || off != uint64(tt.off) {
			t.Errorf("%s: region offset %d, want %d", tt.name, off, tt.off)
		}
	}
	if _, err := pd.Register(nil, 0); !errors.Is(err, ErrEmptyRegion) {
		t.Errorf("empty region: %v", err)
	}
}

// TestMemoryViewForgetsDeregistered: a view remembers the region it last
// looked up (memView.last); once that region is deregistered, or its key
// names another view's domain, the remembered region grants nothing.
func TestMemoryViewForgetsDeregistered(t *testing.T) {
	n, err := New(Config{Name: "n", Addr: addrA, Ports: 1, Sched: sim.NewLoop(), Pool: packet.NewPool()})
	if err != nil {
		t.Fatal(err)
	}
	pd, other := n.AllocPD(), n.AllocPD()
	mr, _ := pd.Register(make([]byte, 100), transport.AccessRemoteWrite)
	v, vo := &memView{nic: n, pd: pd}, &memView{nic: n, pd: other}
	if _, _, ok := v.lookupRange(mr.key, mr.addr, 10, transport.AccessRemoteWrite); !ok {
		t.Fatal("a valid region refused")
	}
	if _, _, ok := vo.lookupRange(mr.key, mr.addr, 10, transport.AccessRemoteWrite); ok {
		t.Fatal("another domain's region granted")
	}
	if err := mr.Deregister(); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := v.lookupRange(mr.key, mr.addr, 10, transport.AccessRemoteWrite); ok {
		t.Error("a deregistered region granted through the view's memory of it")
	}
}
