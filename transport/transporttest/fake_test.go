package transporttest

import (
	"encoding/binary"
	"errors"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// fakeProto is a minimal unreliable datagram transport used to test the
// harness itself. Packet layout: dst id (4), kind (1), src id (4), seq (4).
type fakeProto struct{}

const (
	fakeSetup  = 1
	fakeAccept = 2
	fakeData   = 3
	fakeHdr    = 13
)

func (fakeProto) Kind() transport.Kind { return 0 }
func (fakeProto) UDPPort() uint16      { return 9999 }
func (fakeProto) Demux(p []byte) (uint32, bool, error) {
	if len(p) < fakeHdr {
		return 0, false, errors.New("short")
	}
	id := binary.BigEndian.Uint32(p)
	return id, id == 0, nil
}
func (fakeProto) Dial(now sim.Time, cfg transport.Config) (transport.Conn, error) {
	return &fakeConn{cfg: cfg, state: transport.StateConnecting, sendSetup: true}, nil
}
func (fakeProto) Accept(now sim.Time, cfg transport.Config, p []byte, rx transport.RxMeta) (transport.Conn, error) {
	return &fakeConn{cfg: cfg, state: transport.StateEstablished, peer: binary.BigEndian.Uint32(p[5:]), sendAccept: true}, nil
}

type fakeItem struct {
	port  int
	sport uint16
	size  int
}

type fakeRecv struct {
	at    sim.Time
	seq   uint32
	port  int
	sport uint16
	ce    bool
}

type fakeConn struct {
	cfg                   transport.Config
	state                 transport.State
	peer                  uint32
	sendSetup, sendAccept bool
	queue                 []fakeItem
	seq                   uint32
	got                   []fakeRecv
}

func (c *fakeConn) PostSend(now sim.Time, wr *transport.WorkRequest) error { return nil }
func (c *fakeConn) PostRecv(now sim.Time, wr *transport.WorkRequest) error { return nil }
func (c *fakeConn) Receive(now sim.Time, p []byte, rx transport.RxMeta) {
	switch p[4] {
	case fakeAccept:
		c.peer = binary.BigEndian.Uint32(p[5:])
		c.state = transport.StateEstablished
	case fakeData:
		c.got = append(c.got, fakeRecv{now, binary.BigEndian.Uint32(p[9:]), rx.Port, rx.SrcPort, rx.CE})
	}
}
func (c *fakeConn) Transmit(now sim.Time, port int, b []byte) (int, transport.TxMeta) {
	put := func(dst uint32, kind byte, seq uint32, size int) int {
		binary.BigEndian.PutUint32(b, dst)
		b[4] = kind
		binary.BigEndian.PutUint32(b[5:], c.cfg.LocalID)
		binary.BigEndian.PutUint32(b[9:], seq)
		return max(size, fakeHdr)
	}
	if c.sendSetup {
		c.sendSetup = false
		return put(0, fakeSetup, 0, 0), transport.TxMeta{SrcPort: 50000}
	}
	if c.sendAccept {
		c.sendAccept = false
		return put(c.peer, fakeAccept, 0, 0), transport.TxMeta{SrcPort: 50000}
	}
	if c.state != transport.StateEstablished {
		return 0, transport.TxMeta{}
	}
	for i, it := range c.queue {
		if it.port != port {
			continue
		}
		c.queue = append(c.queue[:i], c.queue[i+1:]...)
		c.seq++
		return put(c.peer, fakeData, c.seq, it.size), transport.TxMeta{SrcPort: it.sport, ECT: true}
	}
	return 0, transport.TxMeta{}
}
func (c *fakeConn) Deadline() sim.Time     { return sim.Never }
func (c *fakeConn) OnTimer(now sim.Time)   {}
func (c *fakeConn) Close(now sim.Time)     { c.state = transport.StateClosed }
func (c *fakeConn) State() transport.State { return c.state }
func (c *fakeConn) LocalID() uint32        { return c.cfg.LocalID }

// ReportStats reports no figures: the fake keeps none.
func (c *fakeConn) ReportStats(s *transport.Stats) { *s = transport.Stats{Paths: s.Paths[:0]} }
