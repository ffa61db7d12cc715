package metaroce

import (
	"errors"
	"testing"

	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

func TestDemux(t *testing.T) {
	p := NewProtocol(Options{})
	syn := func(nonce uint64) []byte {
		b := make([]byte, wire.SetupSize+wire.TrailerSize)
		wire.Setup(b).Put(&wire.SetupFields{Common: wire.Common{Type: wire.TypeSyn}, SrcConn: 7, Nonce: nonce,
			Paths: 16, Ports: 1, MTU: 4096, MsgWindow: 64, DSNWindow: 64})
		wire.Seal(b, wire.SetupSize)
		return b
	}
	// Accept one SYN so that its repeat is not a new connection.
	cfg := transport.Config{LocalID: 40, Ports: 1, LineRate: 100e9, Memory: newTestMemory(0), Complete: func(transport.Completion) {}}
	if _, err := p.Accept(0, cfg, syn(99), transport.RxMeta{}); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, wire.AckSize+wire.TrailerSize)
	wire.Ack(ack).Put(&wire.AckFields{Common: wire.Common{Type: wire.TypeAck, DstConn: 1234}})
	wire.Seal(ack, wire.AckSize)
	v2 := append([]byte(nil), ack...)
	v2[0] = (wire.Version+1)<<4 | byte(wire.TypeAck)
	tests := []struct {
		name    string
		payload []byte
		id      uint32
		setup   bool
		err     error
	}{
		{"new SYN", syn(5), 0, true, nil},
		{"repeated SYN", syn(99), 40, false, nil},
		{"ACK", ack, 1234, false, nil},
		{"short", ack[:10], 0, false, wire.ErrShort},
		{"short SYN", syn(5)[:30], 0, false, wire.ErrLength},
		{"another version", v2, 0, false, wire.ErrVersion},
	}
	for _, tc := range tests {
		id, setup, err := p.Demux(tc.payload)
		if id != tc.id || setup != tc.setup || !errors.Is(err, tc.err) {
			t.Errorf("%s: Demux = %d, %v, %v; want %d, %v, %v", tc.name, id, setup, err, tc.id, tc.setup, tc.err)
		}
	}
	if _, err := p.Accept(0, cfg, ack, transport.RxMeta{}); !errors.Is(err, ErrNotSetup) {
		t.Errorf("Accept of an ACK: %v", err)
	}
	bad := cfg
	bad.Ports = 0
	if _, err := p.Dial(0, bad); err == nil {
		t.Error("Dial with 0 ports succeeded")
	}
	if _, err := NewProtocol(Options{Paths: 300}).Dial(0, cfg); err == nil {
		t.Error("Dial with 300 paths succeeded")
	}
}

// TestPostErrors: immediate refusals are errors, not completions.
func TestPostErrors(t *testing.T) {
	p := newPair(Options{SendQueue: 2, RecvQueue: 1}, 1, 100e9, 4096)
	c := p.ends[0].conn
	tests := []struct {
		name string
		wr   transport.WorkRequest
		want error
	}{
		{"no opcode", transport.WorkRequest{}, transport.ErrBadRequest},
		{"RECV as send", transport.WorkRequest{Op: transport.OpRecv}, transport.ErrBadRequest},
		{"too many SGEs", transport.WorkRequest{Op: transport.OpWrite, NumSGE: 5}, transport.ErrBadRequest},
		{"READ with no sink", transport.WorkRequest{Op: transport.OpRead}, transport.ErrBadRequest},
		{"address wraps", transport.WorkRequest{Op: transport.OpWrite, RemoteAddr: ^uint64(0), NumSGE: 1,
			SGL: [4]transport.SGE{{Addr: addrRW, Len: 10, LKey: keyRW}}}, transport.ErrBadRequest},
	}
	for _, tc := range tests {
		if err := c.PostSend(p.now, &tc.wr); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	for i := 0; i < 2; i++ {
		if err := c.PostSend(p.now, write(uint64(i), 0, addrRW, addrRW, 10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.PostSend(p.now, write(3, 0, addrRW, addrRW, 10)); !errors.Is(err, transport.ErrQueueFull) {
		t.Errorf("third post on a 2-deep queue: %v", err)
	}
	if err := c.PostRecv(p.now, recvWR(1, addrRcv, 10)); err != nil {
		t.Fatal(err)
	}
	if err := c.PostRecv(p.now, recvWR(2, addrRcv, 10)); !errors.Is(err, transport.ErrQueueFull) {
		t.Errorf("second receive on a 1-deep queue: %v", err)
	}
	c.Close(p.now)
	if err := c.PostRecv(p.now, recvWR(3, addrRcv, 10)); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("PostRecv after Close: %v", err)
	}
}

// TestStaleAckIgnored: an old ACK overtaken by newer ones (its cumulative
// ACK is below what the sender already has) acknowledges nothing.
func TestStaleAckIgnored(t *testing.T) {
	p := newPair(Options{Paths: 1}, 1, 100e9, 4096)
	a := p.ends[0].conn
	p.pump(40, 4, 64<<10)
	ph := &a.s.paths[0]
	if ph.sb.una == 0 || ph.sb.una == ph.sb.nxt {
		t.Fatalf("want acked and outstanding PSNs on path 0: una %d nxt %d", ph.sb.una, ph.sb.nxt)
	}
	una, inflight := ph.sb.una, ph.sb.inflight
	b := make([]byte, wire.AckSize+wire.TrailerSize)
	wire.Ack(b).Put(&wire.AckFields{Common: wire.Common{Type: wire.TypeAck, DstConn: a.id, PSN: una - 5}, RateHint: wire.NoRateHint})
	wire.Seal(b, wire.AckSize)
	a.Receive(p.now, b, transport.RxMeta{})
	if ph.sb.una != una || ph.sb.inflight != inflight {
		t.Errorf("stale ACK moved una %d -> %d, in flight %d -> %d", una, ph.sb.una, inflight, ph.sb.inflight)
	}
}
