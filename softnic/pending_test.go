package softnic

import (
	"testing"
	"unsafe"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
)

// askCounts counts a NIC's asks of MetaRoCE connections that came back
// empty.
type askCounts struct {
	ctlAsks, ctlRefused int // TransmitControl
	rxOnlyRefused       int // Transmit of the receiving end
	dataSent            int
}

// countingProto wraps MetaRoCE so that its connections count asks.
type countingProto struct {
	*metaroce.Protocol
	n *askCounts
}

func (p countingProto) Dial(now sim.Time, cfg transport.Config) (transport.Conn, error) {
	c, err := p.Protocol.Dial(now, cfg)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c.(*metaroce.Conn), n: p.n}, nil
}

func (p countingProto) Accept(now sim.Time, cfg transport.Config, payload []byte, rx transport.RxMeta) (transport.Conn, error) {
	c, err := p.Protocol.Accept(now, cfg, payload, rx)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c.(*metaroce.Conn), n: p.n, rxOnly: true}, nil
}

// countingConn is a MetaRoCE connection (every interface it implements
// promoted) whose transmits are counted.
type countingConn struct {
	*metaroce.Conn
	n      *askCounts
	rxOnly bool // the accepted end: the test's WRITEs go the other way
}

func (c *countingConn) TransmitControl(now sim.Time, port int, b []byte) (int, transport.TxMeta) {
	k, meta := c.Conn.TransmitControl(now, port, b)
	c.n.ctlAsks++
	if k == 0 {
		c.n.ctlRefused++
	}
	return k, meta
}

func (c *countingConn) Transmit(now sim.Time, port int, b []byte) (int, transport.TxMeta) {
	k, meta := c.Conn.Transmit(now, port, b)
	switch {
	case k > 1000:
		c.n.dataSent++
	case k == 0 && c.rxOnly:
		c.n.rxOnlyRefused++
	}
	return k, meta
}

// TestNoEmptyAsks: the NIC asks a MetaRoCE connection for control only
// when it has some (transport.ControlPender), and never asks a connection
// that only receives for data (transport.TransmitPender). Without them,
// a one-way stream of WRITEs drew an empty TransmitControl per event and
// an empty Transmit per arrival at the receiver (at 128 hosts, 96,657
// and about 50,000 asks a run, about 200 instructions each).
func TestNoEmptyAsks(t *testing.T) {
	var n askCounts
	protos := func() []transport.Protocol {
		return []transport.Protocol{countingProto{Protocol: metaroce.NewProtocol(metaroce.Options{}), n: &n}}
	}
	p := newPair(t, 2, protos)
	src, dst := p.connectMode(t, 1<<20, transport.AccessLocalWrite|transport.AccessRemoteWrite, transport.MetaRoCE, PayloadSynthetic)
	n = askCounts{}
	for i := range 4 {
		wr := transport.WorkRequest{ID: uint64(i), Op: transport.OpWrite, RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey(), NumSGE: 1}
		wr.SGL[0] = src.mr.SGE(0, 256<<10)
		if err := src.c.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		if wc := p.waitCompletion(t, src.cq, sim.Millisecond); wc.Status != transport.StatusOK {
			t.Fatalf("WRITE completed with %v", wc.Status)
		}
	}
	t.Logf("%+v", n)
	if n.dataSent < 256 || n.ctlAsks < n.dataSent/16 {
		t.Fatalf("%d data packets, %d control asks: the WRITEs did not run as expected", n.dataSent, n.ctlAsks)
	}
	if n.ctlRefused != 0 || n.rxOnlyRefused != 0 {
		t.Errorf("%d of %d TransmitControl asks came back empty, and %d Transmit asks of the receive-only end; want none (%d data packets)",
			n.ctlRefused, n.ctlAsks, n.rxOnlyRefused, n.dataSent)
	}
}

// TestConnSize guards a NIC connection's size: 352 bytes, an allocator
// size class (the next is 384). The transport's pending answers take one
// interface field (pender), not one per answer, to stay in it.
func TestConnSize(t *testing.T) {
	if n := unsafe.Sizeof(Conn{}); n > 352 {
		t.Errorf("softnic.Conn is %d bytes, want at most 352", n)
	}
}
