package softnic

import (
	"testing"

	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
)

func TestRoundRobinAcrossConns(t *testing.T) {
	p := newPair(t, 1, toyProtos)
	src1, dst1 := p.connect(t, 1<<16, transport.AccessLocalWrite|transport.AccessRemoteWrite, 0)
	src2, dst2 := p.connect(t, 1<<16, transport.AccessLocalWrite|transport.AccessRemoteWrite, 0)
	var order []uint16
	p.ab[0].tap = func(b []byte) {
		udp := header.UDP(header.IPv4(b).Payload())
		if udp.Payload()[0] == tWrite {
			order = append(order, udp.SrcPort())
		}
	}
	post := func(s *endpoint, d *endpoint, k int) {
		for i := 0; i < k; i++ {
			wr := transport.WorkRequest{ID: uint64(i), Op: transport.OpWrite, RemoteAddr: d.mr.Addr(), RKey: d.mr.RKey(), NumSGE: 1}
			wr.SGL[0] = s.mr.SGE(0, 4000)
			if err := s.c.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Hold the wire busy while both queue up, then let it go.
	p.ab[0].busy = true
	post(src1, dst1, 8)
	post(src2, dst2, 8)
	p.ab[0].busy = false
	p.ab[0].onIdle(p.loop.Now())
	p.loop.RunUntil(p.loop.Now() + sim.Millisecond)
	if len(order) != 16 {
		t.Fatalf("sent %d writes", len(order))
	}
	for i := 1; i < len(order); i++ {
		if order[i] == order[i-1] {
			t.Fatalf("not round-robin: %x", order)
		}
	}
}

func TestOnePacketPerIdle(t *testing.T) {
	p := newPair(t, 1, toyProtos)
	src, dst := p.connect(t, 1<<16, transport.AccessLocalWrite|transport.AccessRemoteWrite, 0)
	maxBusy, sent0 := 0, p.ab[0].sent
	p.ab[0].tap = func([]byte) {
		if p.ab[0].busy {
			maxBusy++
		}
	}
	for i := 0; i < 20; i++ {
		wr := transport.WorkRequest{ID: uint64(i), Op: transport.OpWrite, RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey(), NumSGE: 1}
		wr.SGL[0] = src.mr.SGE(0, 4000)
		src.c.PostSend(&wr)
	}
	p.loop.RunUntil(p.loop.Now() + sim.Millisecond)
	// The fake wire sets busy in Send before the tap: a second send while
	// busy would be the NIC pushing into a busy wire.
	if sent := p.ab[0].sent - sent0; sent < 20 || maxBusy != sent {
		t.Errorf("sent %d, with the wire marked busy at tap %d times", sent, maxBusy)
	}
}

// writeLoop posts one WRITE at a time and runs until it completes.
func writeLoop(tb testing.TB, p *pair, src, dst *endpoint, size int) func() {
	wr := transport.WorkRequest{ID: 1, Op: transport.OpWrite, RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey(), NumSGE: 1}
	wr.SGL[0] = src.mr.SGE(0, size)
	var wc [1]Completion
	return func() {
		if err := src.c.PostSend(&wr); err != nil {
			tb.Fatal(err)
		}
		for src.cq.Poll(wc[:]) == 0 {
			if !p.loop.Step() {
				tb.Fatal("loop ran dry before the completion")
			}
		}
	}
}

func TestNoAllocsPerPacket(t *testing.T) {
	for _, tc := range transportCases() {
		for _, mode := range []PayloadMode{PayloadBytes, PayloadSynthetic} {
			t.Run(tc.name+"/"+mode.String(), func(t *testing.T) { testNoAllocsPerPacket(t, tc, mode) })
		}
	}
}

func testNoAllocsPerPacket(t *testing.T, tc transportCase, mode PayloadMode) {
	p := newPair(t, 2, tc.protos)
	src, dst := p.connectMode(t, 4096, transport.AccessLocalWrite|transport.AccessRemoteWrite, tc.kind, mode)
	src.mr.Fill(0, 4000, 77)
	run := writeLoop(t, p, src, dst, 4000)
	for i := 0; i < 10; i++ {
		run()
	}
	before := p.a.Stats().TxPackets + p.b.Stats().TxPackets
	allocs := testing.AllocsPerRun(200, run)
	if allocs != 0 {
		t.Errorf("%v allocations per WRITE round trip, want 0", allocs)
	}
	if sent := p.a.Stats().TxPackets + p.b.Stats().TxPackets - before; sent < 400 {
		t.Errorf("only %d packets in 201 round trips", sent)
	}
	if !dst.mr.Matches(0, 4000, 77) {
		t.Error("the WRITEs did not place the source's content")
	}
}

// BenchmarkNICWriteRoundTrip measures one 4000-byte WRITE and its ACK
// through two NICs and fake wires: the NIC's and the transport's
// per-packet cost without a fabric, with real and synthetic payload.
func BenchmarkNICWriteRoundTrip(b *testing.B) {
	for _, tc := range transportCases() {
		for _, mode := range []PayloadMode{PayloadBytes, PayloadSynthetic} {
			b.Run(tc.name+"/"+mode.String(), func(b *testing.B) { benchNICWriteRoundTrip(b, tc, mode) })
		}
	}
}

func benchNICWriteRoundTrip(b *testing.B, tc transportCase, mode PayloadMode) {
	p := newPair(b, 1, tc.protos)
	src, dst := p.connectMode(b, 4096, transport.AccessLocalWrite|transport.AccessRemoteWrite, tc.kind, mode)
	src.mr.Fill(0, 4000, 77)
	run := writeLoop(b, p, src, dst, 4000)
	pk0 := p.a.Stats().TxPackets + p.b.Stats().TxPackets
	b.ReportAllocs()
	b.SetBytes(4000)
	for b.Loop() {
		run()
	}
	pk := p.a.Stats().TxPackets + p.b.Stats().TxPackets - pk0
	b.ReportMetric(float64(pk)/b.Elapsed().Seconds(), "pkts/s")
}

// TestControlAheadOfData checks the port scheduler's control class: an
// ACK owed on a port leaves ahead of the data other connections queue
// there. Host b sends bulk WRITEs to a on many connections, so its port's
// data round robin is long; a then WRITEs one packet to b, and the WRITE
// must complete within a round trip and a few packet times, not after a
// round of b's data round robin (conns packets: 32 x 0.33 us here).
func TestControlAheadOfData(t *testing.T) {
	const conns, depth = 32, 8
	for _, tc := range transportCases()[1:] { // the real transports (the toy has no control class)
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, 1, tc.protos)
			src, dst := p.connect(t, 1<<16, transport.AccessLocalWrite|transport.AccessRemoteWrite, tc.kind)
			rev := &pair{loop: p.loop, pool: p.pool, a: p.b, b: p.a, ab: p.ba, ba: p.ab}
			var bulk [][2]*endpoint
			for range conns {
				s, d := rev.connect(t, 1<<20, transport.AccessLocalWrite|transport.AccessRemoteWrite, tc.kind)
				bulk = append(bulk, [2]*endpoint{s, d})
			}
			post := func(s, d *endpoint, id uint64, size int) {
				wr := transport.WorkRequest{ID: id, Op: transport.OpWrite, RemoteAddr: d.mr.Addr(), RKey: d.mr.RKey(), NumSGE: 1}
				wr.SGL[0] = s.mr.SGE(0, size)
				if err := s.c.PostSend(&wr); err != nil {
					t.Fatal(err)
				}
			}
			for i := range depth {
				for _, e := range bulk {
					post(e[0], e[1], uint64(i), 128<<10)
				}
			}
			p.loop.RunUntil(p.loop.Now() + 20*sim.Microsecond)
			if p.ba[0].Idle() {
				t.Fatal("b's port is idle: the bulk WRITEs do not load it")
			}
			start := p.loop.Now()
			post(src, dst, 99, 4000)
			wc := p.waitCompletion(t, src.cq, sim.Millisecond)
			if wc.Status != transport.StatusOK {
				t.Fatalf("WRITE completed with %v", wc.Status)
			}
			// A round trip (two 1 us wires), the WRITE's and the ACK's
			// serialization, and the data packet b's port was sending
			// when the WRITE arrived, with one more packet of margin.
			pkt := sim.Time((4096 + transport.HeaderRoom + IPv4UDPSize) * 8 / 100) // ns at 100 Gbit/s
			if took, bound := p.loop.Now()-start, 2*sim.Microsecond+4*pkt; took > bound {
				t.Errorf("one-packet WRITE took %v behind %d bulk connections, want at most %v (the ACK waited behind their data)", took, conns, bound)
			}
		})
	}
}

// TestPortStateToTransports: a NIC tells its connections when a port's
// link goes down or comes back (the wire's idle callback, which the fabric
// runs on both), and a connection opened while a port is down hears of
// it when it is created.
func TestPortStateToTransports(t *testing.T) {
	p := newPair(t, 2, toyProtos)
	src, _ := p.connect(t, 1<<16, transport.AccessLocalWrite|transport.AccessRemoteWrite, 0)
	tc := src.c.tc.(*toyConn)
	if tc.told != 0 {
		t.Fatalf("told %d times with every port up, want never", tc.told)
	}
	w := p.ab[1]
	w.down = true
	w.onIdle(p.loop.Now())
	if tc.told != 1 || tc.portsUp != 0b01 {
		t.Fatalf("after port 1 went down: told %d times, ports up %#b; want once, 0b01", tc.told, tc.portsUp)
	}
	src2, _ := p.connect(t, 1<<16, transport.AccessLocalWrite|transport.AccessRemoteWrite, 0)
	if tc2 := src2.c.tc.(*toyConn); tc2.told != 1 || tc2.portsUp != 0b01 {
		t.Errorf("a connection dialed while port 1 was down: told %d times, ports up %#b; want once, 0b01", tc2.told, tc2.portsUp)
	}
	w.down = false
	w.onIdle(p.loop.Now())
	if tc.told != 2 || tc.portsUp != 0b11 {
		t.Errorf("after port 1 came back: told %d times, ports up %#b; want twice, 0b11", tc.told, tc.portsUp)
	}
}

// TestIdlePortsInTurn: a connection paced below its NIC's line rate finds
// its ports idle whenever its next packet may go, and the idle port kicked
// first takes it (a MetaRoCE packet goes on that port's plane). Kicked
// from port 0 every time, port 0 took most of such a connection's packets
// (an 8-to-1 incast on 8 planes: 27% more bytes on the receiver's plane 0
// than on its plane 7); kicked from the port after its previous packet's,
// the ports take them in turn.
func TestIdlePortsInTurn(t *testing.T) {
	const ports = 8
	protos := func() []transport.Protocol {
		// The receiver hands out half its capacity: the sender paces at
		// 4 ports' worth over 8 idle ports.
		return []transport.Protocol{metaroce.NewProtocol(metaroce.Options{HintUtilization: 0.5})}
	}
	p := newPair(t, ports, protos)
	src, dst := p.connect(t, 1<<20, transport.AccessLocalWrite|transport.AccessRemoteWrite, transport.MetaRoCE)
	wr := transport.WorkRequest{ID: 1, Op: transport.OpWrite, RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey(), NumSGE: 1}
	wr.SGL[0] = src.mr.SGE(0, len(src.buf))
	if err := src.c.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	if wc := p.waitCompletion(t, src.cq, 10*sim.Millisecond); wc.Status != transport.StatusOK {
		t.Fatalf("%+v", wc)
	}
	cs := src.c.Stats()
	lo, hi, sum := cs.PortTxPackets[0], cs.PortTxPackets[0], uint64(0)
	for _, n := range cs.PortTxPackets[:ports] {
		lo, hi, sum = min(lo, n), max(hi, n), sum+n
	}
	// 256 data packets: 32 a port; allow 10% of the mean either way.
	if mean := float64(sum) / ports; float64(hi) > 1.1*mean || float64(lo) < 0.9*mean {
		t.Errorf("packets per port %v: not spread evenly over idle ports (mean %.1f)", cs.PortTxPackets[:ports], mean)
	}
}
