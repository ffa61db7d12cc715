package metaroce

import (
	"math/rand/v2"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// FuzzConnReceive feeds arbitrary bytes to an established connection (as
// received, and with a valid CRC32C trailer appended so the fuzzer gets
// past the integrity check), then lets it transmit and run its timers.
// Nothing may panic, every bad packet must be counted, and the connection
// must still move a WRITE afterwards unless the input closed it.
func FuzzConnReceive(f *testing.F) {
	p := newPair(Options{Paths: 4}, 2, 100e9, 1024)
	p.pump(200, 2, 8192)
	// Seeds: real packets of every kind the pair exchanged.
	for _, e := range p.ends {
		b := make([]byte, 2048)
		for port := 0; port < 2; port++ {
			e.conn.OnTimer(p.now + 1e6)
			if n, _ := e.conn.Transmit(p.now, port, b); n > 0 {
				f.Add(append([]byte(nil), b[:n]...), false)
			}
		}
	}
	for _, t := range []wire.Type{wire.TypeWrite, wire.TypeSend, wire.TypeReadReq, wire.TypeReadResp} {
		d := make([]byte, wire.DataSize+16)
		wire.Data(d).Put(&wire.DataFields{Common: wire.Common{Type: t, DstConn: 2}, MsgLen: 16, Addr: addrRW, Key: keyRW})
		f.Add(d, true)
	}
	for _, t := range []wire.Type{wire.TypeAck, wire.TypeNak, wire.TypeProbe, wire.TypeClose, wire.TypeSyn, wire.TypeSynAck, wire.TypeEst} {
		d := make([]byte, wire.AckSize)
		wire.Header(d).Put(&wire.Common{Type: t, DstConn: 2})
		f.Add(d, true)
	}
	// A grant revision (SYN_ACK with REVISE) to an established dialer.
	rev := make([]byte, wire.SetupSize)
	wire.Setup(rev).Put(&wire.SetupFields{Common: wire.Common{Type: wire.TypeSynAck, Flags: wire.FlagRevise, DstConn: 2},
		SrcConn: 1, Paths: 4, Ports: 2, MTU: 1024, MsgWindow: 64, DSNWindow: 64, LineRate: 100000, FirstShare: 100})
	f.Add(rev, true)
	f.Fuzz(func(t *testing.T, data []byte, seal bool) {
		p := newPairRing(Options{Paths: 4}, 2, 100e9, 1024, 64)
		c := p.ends[1].conn
		if seal && len(data) >= wire.CommonSize {
			data = append(data, 0, 0, 0, 0)
			wire.Seal(data, len(data)-wire.TrailerSize)
		}
		before := c.Stats()
		c.Receive(p.now, data, transport.RxMeta{Port: 1, SrcPort: 50000})
		after := c.Stats()
		if after.PacketsReceived != before.PacketsReceived+1 {
			t.Fatalf("packet not counted")
		}
		// Let both ends react for a while: ACKs, NAKs, retransmissions.
		for i := 0; i < 200 && p.step(); i++ {
		}
		if p.ends[0].conn.State() != transport.StateEstablished || c.State() != transport.StateEstablished {
			return // the input closed the connection: fine
		}
		if !p.pumpFor(20, 1, 4096, 100000, 100*sim.Millisecond) {
			t.Fatalf("connection stuck after the input: a %+v\nb %+v", p.ends[0].conn.Stats(), c.Stats())
		}
	})
}

// TestForgedPackets mutates real packets (random bytes overwritten, CRC
// fixed up or not) and feeds each to a fresh connection: no panic, and the
// connection still moves data afterwards unless the packet closed it. It
// is FuzzConnReceive's property, run over a fixed, seeded sample, so every
// `go test` covers it.
func TestForgedPackets(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 100
	}
	p0 := newPair(Options{Paths: 4}, 2, 100e9, 1024)
	p0.pump(200, 2, 8192)
	var seeds [][]byte
	for _, e := range p0.ends {
		b := make([]byte, 2048)
		for port := 0; port < 2; port++ {
			e.conn.OnTimer(p0.now + 1e6)
			if k, _ := e.conn.Transmit(p0.now, port, b); k > 0 {
				seeds = append(seeds, append([]byte(nil), b[:k]...))
			}
		}
	}
	for _, ty := range []wire.Type{wire.TypeWrite, wire.TypeSend, wire.TypeReadReq, wire.TypeReadResp, wire.TypeAck, wire.TypeNak, wire.TypeProbe} {
		d := make([]byte, wire.DataSize+16)
		wire.Data(d).Put(&wire.DataFields{Common: wire.Common{Type: ty, DstConn: 2}, MsgLen: 16, Addr: addrRW, Key: keyRW})
		seeds = append(seeds, d)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < n; i++ {
		in := append([]byte(nil), seeds[r.IntN(len(seeds))]...)
		for k := r.IntN(6); k >= 0; k-- {
			in[r.IntN(len(in))] = byte(r.Uint32())
		}
		if len(in) > wire.CommonSize && r.IntN(2) == 0 {
			wire.Seal(in, len(in)-wire.TrailerSize)
		}
		p := newPairRing(Options{Paths: 4}, 2, 100e9, 1024, 64)
		c := p.ends[1].conn
		c.Receive(p.now, in, transport.RxMeta{Port: 1, SrcPort: 50000})
		for k := 0; k < 200 && p.step(); k++ {
		}
		if p.ends[0].conn.State() != transport.StateEstablished || c.State() != transport.StateEstablished {
			continue
		}
		if !p.pumpFor(20, 1, 4096, 100000, 100*sim.Millisecond) {
			t.Errorf("stuck after %x", in)
		}
	}
}
