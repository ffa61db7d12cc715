package metaroce

import (
	"encoding/hex"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

func TestHangHunt(t *testing.T) {
	if os.Getenv("HANGHUNT") == "" {
		t.Skip()
	}
	p0 := newPair(Options{Paths: 4}, 2, 100e9, 1024)
	p0.pump(200, 2, 8192)
	var seeds [][]byte
	for _, e := range p0.ends {
		b := make([]byte, 2048)
		for port := 0; port < 2; port++ {
			e.conn.OnTimer(p0.now + 1e6)
			if n, _ := e.conn.Transmit(p0.now, port, b); n > 0 {
				seeds = append(seeds, append([]byte(nil), b[:n]...))
			}
		}
	}
	for _, ty := range []wire.Type{wire.TypeWrite, wire.TypeSend, wire.TypeReadReq, wire.TypeReadResp, wire.TypeAck, wire.TypeNak, wire.TypeProbe} {
		d := make([]byte, wire.DataSize+16)
		wire.Data(d).Put(&wire.DataFields{Common: wire.Common{Type: ty, DstConn: 2}, MsgLen: 16, Addr: addrRW, Key: keyRW})
		seeds = append(seeds, d)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		in := append([]byte(nil), seeds[r.IntN(len(seeds))]...)
		for k := r.IntN(6); k >= 0; k-- {
			if len(in) > 0 {
				in[r.IntN(len(in))] = byte(r.Uint32())
			}
		}
		if len(in) > wire.CommonSize && r.IntN(2) == 0 {
			in = in[:len(in)-wire.TrailerSize]
			in = append(in, 0, 0, 0, 0)
			wire.Seal(in, len(in)-4)
		}
		done := make(chan bool)
		go func() {
			p := newPairRing(Options{Paths: 4}, 2, 100e9, 1024, 64)
			c := p.ends[1].conn
			c.Receive(p.now, in, transport.RxMeta{Port: 1, SrcPort: 50000})
			for i := 0; i < 200 && p.step(); i++ {
			}
			if p.ends[0].conn.State() == transport.StateEstablished && c.State() == transport.StateEstablished {
				if !p.pumpFor(20, 1, 4096, 100000, 100*sim.Millisecond) {
					t.Errorf("stuck: %s", hex.EncodeToString(in))
				}
			}
			done <- true
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("hang on %s\n%s", hex.EncodeToString(in), buf[:n])
		}
	}
}
