package metaroce

import (
	"fmt"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// Memory layout used by the tests: every host registers
//
//	key 1: 1 MiB at 0x10000, local+remote write+remote read (source/target)
//	key 2: 64 KiB at 0x200000, remote read only
//	key 3: 1 MiB at 0x400000, local write (receive buffers, READ sinks)
const (
	keyRW   = 1
	addrRW  = 0x10000
	keyRO   = 2
	addrRO  = 0x200000
	keyRecv = 3
	addrRcv = 0x400000
	bigSize = 1 << 20
)

type lab struct {
	t    *testing.T
	net  *transporttest.Net
	a, b *transporttest.Host
	ca   *transporttest.Conn // a's end
	cb   *transporttest.Conn // b's end
	tr   *transporttest.TraceLog
}

// newLab connects two hosts. opts apply to both protocols.
func newLab(t *testing.T, cfg transporttest.Config, opts Options) *lab {
	t.Helper()
	n := transporttest.New(sim.NewLoop(), cfg)
	tr := &transporttest.TraceLog{}
	n.Trace = tr
	l := &lab{t: t, net: n, tr: tr}
	l.a = n.AddHost("a", NewProtocol(opts))
	l.b = n.AddHost("b", NewProtocol(opts))
	for _, h := range []*transporttest.Host{l.a, l.b} {
		registerMem(h)
	}
	c, err := n.Connect(l.a, l.b, 10*sim.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	l.ca, l.cb = c, c.Remote
	return l
}

func registerMem(h *transporttest.Host) {
	buf := make([]byte, bigSize)
	for i := range buf {
		buf[i] = byte(i*7 + h.Index*13)
	}
	h.Mem.Register(keyRW, addrRW, buf, transport.AccessLocalWrite|transport.AccessRemoteWrite|transport.AccessRemoteRead)
	h.Mem.Register(keyRO, addrRO, make([]byte, 64<<10), transport.AccessRemoteRead)
	h.Mem.Register(keyRecv, addrRcv, make([]byte, bigSize), transport.AccessLocalWrite)
}

func mem(h *transporttest.Host, key uint32, addr uint64, n int) []byte {
	b, st := h.Mem.Resolve(key, addr, n, 0)
	if st != transport.StatusOK {
		panic(fmt.Sprintf("test memory %d@%#x+%d: %v", key, addr, n, st))
	}
	return b
}

func metaConn(c *transporttest.Conn) *Conn { return c.T.(*Conn) }

// run advances the lab's clock by d.
func (l *lab) run(d sim.Time) { l.net.Loop.RunUntil(l.net.Loop.Now() + d) }

// runUntil runs until cond holds or limit passes; it reports whether cond
// held.
func (l *lab) runUntil(limit sim.Time, cond func() bool) bool {
	end := l.net.Loop.Now() + limit
	for !cond() {
		next := l.net.Loop.Next()
		if next == sim.Never || next > end {
			l.net.Loop.RunUntil(end)
			return cond()
		}
		l.net.Loop.RunUntil(next)
	}
	return true
}

func write(id uint64, stream uint16, src, dst uint64, n int) *transport.WorkRequest {
	wr := &transport.WorkRequest{ID: id, Op: transport.OpWrite, Stream: stream, RemoteAddr: dst, RKey: keyRW, NumSGE: 1}
	wr.SGL[0] = transport.SGE{Addr: src, Len: uint32(n), LKey: keyRW}
	return wr
}

func (l *lab) dumpTrace() {
	for _, s := range l.tr.Lines {
		l.t.Log(s)
	}
}

// countType counts packets of a type a filter saw.
func pktType(p *transporttest.Packet) wire.Type { return wire.Header(p.Payload).Type() }
