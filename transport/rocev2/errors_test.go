package rocev2

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

func sendWR(id uint64, lkey uint32, addr uint64, n int) transport.WorkRequest {
	s, k := sgl(lkey, addr, n)
	return transport.WorkRequest{ID: id, Op: transport.OpSend, SGL: s, NumSGE: k}
}

func recvWR(id uint64, lkey uint32, addr uint64, n int) transport.WorkRequest {
	s, k := sgl(lkey, addr, n)
	return transport.WorkRequest{ID: id, SGL: s, NumSGE: k}
}

func TestRNRWaitsForReceive(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: Options{MinRNRTimer: 1}}) // 10us RNR timer
	h.dial()
	lkey, src := h.a.mem.add(0x1000, 3*4096, allAccess)
	rkey, dst := h.b.mem.add(0x1000, 3*4096, allAccess)
	fill(src, 2)
	h.a.postSend(sendWR(1, lkey, 0x1000, 3*4096))
	// No receive yet: the responder answers RNR NAKs until one is posted.
	h.loop.RunUntil(h.loop.Now() + 55*sim.Microsecond)
	if len(h.a.comps) != 0 {
		t.Fatalf("completed without a receive: %+v", h.a.comps)
	}
	r := h.b.conn.Stats()
	if r.RNRNAKsSent < 2 || h.a.conn.Stats().RNRNAKsReceived != r.RNRNAKsSent {
		t.Fatalf("RNR NAKs sent %d received %d, want several, all received", r.RNRNAKsSent, h.a.conn.Stats().RNRNAKsReceived)
	}
	h.b.postRecv(recvWR(7, rkey, 0x1000, 3*4096))
	h.runUntil(func() bool { return len(h.a.comps) == 1 && len(h.b.comps) == 1 }, sim.Second)
	if h.a.comps[0].Status != transport.StatusOK || h.b.comps[0] != (transport.Completion{ID: 7, Op: transport.OpRecv, Bytes: 3 * 4096}) {
		t.Fatalf("completions a=%+v b=%+v", h.a.comps, h.b.comps)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("data differs")
	}
}

func TestRNRRetryExceeded(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: Options{MinRNRTimer: 1, RNRRetry: 2}})
	h.dial()
	lkey, _ := h.a.mem.add(0x1000, 4096, allAccess)
	h.a.postSend(sendWR(1, lkey, 0x1000, 100))
	h.a.postSend(sendWR(2, lkey, 0x1000, 100))
	h.runUntil(func() bool { return len(h.a.comps) == 2 }, sim.Second)
	want := []transport.Completion{
		{ID: 1, Op: transport.OpSend, Status: transport.StatusRNRRetryExceeded},
		{ID: 2, Op: transport.OpSend, Status: transport.StatusFlushed},
	}
	if d := cmp.Diff(want, h.a.comps); d != "" {
		t.Fatalf("completions (-want +got):\n%s", d)
	}
	if got := h.a.conn.Stats().RNRNAKsReceived; got != 3 {
		t.Fatalf("%d RNR NAKs received, want 3 (the first and 2 retries)", got)
	}
	if h.a.conn.State() != transport.StateError {
		t.Fatalf("state %v, want error", h.a.conn.State())
	}
	if err := h.a.conn.PostSend(h.loop.Now(), &transport.WorkRequest{Op: transport.OpSend}); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("PostSend on an errored QP: %v, want ErrClosed", err)
	}
}

func TestRemoteAccessError(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   transport.Op
		rkey func(good uint32) uint32
		addr uint64
		n    int
	}{
		{"write bad rkey", transport.OpWrite, func(g uint32) uint32 { return g + 99 }, 0x5000, 10000},
		{"write out of range", transport.OpWrite, func(g uint32) uint32 { return g }, 0x5000 + 8192 - 100, 200},
		{"read bad rkey", transport.OpRead, func(g uint32) uint32 { return g + 99 }, 0x5000, 5000},
		{"read without permission", transport.OpRead, func(g uint32) uint32 { return g + 1 }, 0x7000, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{})
			h.dial()
			lkey, _ := h.a.mem.add(0x1000, 16384, allAccess)
			rkey, dst := h.b.mem.add(0x5000, 8192, allAccess)
			h.b.mem.add(0x7000, 4096, transport.AccessRemoteWrite) // key rkey+1: no remote read
			ok := writeWR(1, lkey, 0x1000, 4096, rkey, 0x5000)
			bad := writeWR(2, lkey, 0x1000, tc.n, tc.rkey(rkey), tc.addr)
			bad.Op = tc.op
			later := writeWR(3, lkey, 0x1000, 4096, rkey, 0x5000)
			h.b.postRecv(recvWR(50, rkey, 0x5000, 100))
			h.a.postSend(ok)
			h.a.postSend(bad)
			h.a.postSend(later)
			h.runUntil(func() bool { return len(h.a.comps) == 3 && len(h.b.comps) == 1 }, sim.Second)
			want := []transport.Completion{
				{ID: 1, Op: transport.OpWrite, Status: transport.StatusOK, Bytes: 4096},
				{ID: 2, Op: tc.op, Status: transport.StatusRemoteAccess},
				{ID: 3, Op: transport.OpWrite, Status: transport.StatusFlushed},
			}
			if d := cmp.Diff(want, h.a.comps); d != "" {
				t.Fatalf("requester completions (-want +got):\n%s", d)
			}
			if d := cmp.Diff([]transport.Completion{{ID: 50, Op: transport.OpRecv, Status: transport.StatusFlushed}}, h.b.comps); d != "" {
				t.Fatalf("responder completions (-want +got):\n%s", d)
			}
			if h.a.conn.State() != transport.StateError || h.b.conn.State() != transport.StateError {
				t.Fatalf("states a=%v b=%v, want both error", h.a.conn.State(), h.b.conn.State())
			}
			if h.b.conn.Stats().NAKsSent != 1 || h.a.conn.Stats().NAKsReceived != 1 {
				t.Fatalf("NAKs sent %d received %d, want 1", h.b.conn.Stats().NAKsSent, h.a.conn.Stats().NAKsReceived)
			}
			for i, v := range dst[4096:] {
				if v != 0 {
					t.Fatalf("refused request wrote byte %d", 4096+i)
				}
			}
		})
	}
}

func TestSendLongerThanReceive(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.dial()
	lkey, _ := h.a.mem.add(0x1000, 16384, allAccess)
	rkey, _ := h.b.mem.add(0x1000, 16384, allAccess)
	h.b.postRecv(recvWR(9, rkey, 0x1000, 5000))
	h.a.postSend(sendWR(1, lkey, 0x1000, 9000))
	h.runUntil(func() bool { return len(h.a.comps) == 1 && len(h.b.comps) == 1 }, sim.Second)
	if c := h.a.comps[0]; c.Status != transport.StatusRemoteInvalidRequest {
		t.Errorf("requester: %+v, want remote invalid request", c)
	}
	if c := h.b.comps[0]; c.ID != 9 || c.Status != transport.StatusLocalLength {
		t.Errorf("responder: %+v, want local length error", c)
	}
}

func TestLocalProtectionCompletesInOrder(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.dial()
	lkey, _ := h.a.mem.add(0x1000, 8192, allAccess)
	rkey, _ := h.b.mem.add(0x1000, 8192, allAccess)
	h.a.postSend(writeWR(1, lkey, 0x1000, 8192, rkey, 0x1000))
	h.a.postSend(writeWR(2, lkey, 0x1000, 9000, rkey, 0x1000)) // past the end of the local region
	h.a.postSend(writeWR(3, lkey, 0x1000, 10, rkey, 0x1000))
	h.runUntil(func() bool { return len(h.a.comps) == 3 }, sim.Second)
	want := []transport.Completion{
		{ID: 1, Op: transport.OpWrite, Status: transport.StatusOK, Bytes: 8192},
		{ID: 2, Op: transport.OpWrite, Status: transport.StatusLocalProtection},
		{ID: 3, Op: transport.OpWrite, Status: transport.StatusFlushed},
	}
	if d := cmp.Diff(want, h.a.comps); d != "" {
		t.Fatalf("completions (-want +got):\n%s", d)
	}
	if s := h.b.conn.Stats(); s.DataPackets != 0 || h.a.conn.Stats().DataPackets != 2 {
		t.Fatalf("the bad request was sent: a sent %d data packets", h.a.conn.Stats().DataPackets)
	}
}

func TestRetryExceeded(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: Options{Timeout: 8}})
	h.dial()
	lkey, _ := h.a.mem.add(0x1000, 8192, allAccess)
	rkey, _ := h.b.mem.add(0x1000, 8192, allAccess)
	h.filter = func(from *endpoint, pk *ib.Packet) verdict { return drop } // the path goes black
	h.a.postSend(writeWR(1, lkey, 0x1000, 8192, rkey, 0x1000))
	h.a.postSend(writeWR(2, lkey, 0x1000, 8192, rkey, 0x1000))
	start := h.loop.Now()
	h.runUntil(func() bool { return len(h.a.comps) == 2 }, sim.Second)
	want := []transport.Completion{
		{ID: 1, Op: transport.OpWrite, Status: transport.StatusRetryExceeded},
		{ID: 2, Op: transport.OpWrite, Status: transport.StatusFlushed},
	}
	if d := cmp.Diff(want, h.a.comps); d != "" {
		t.Fatalf("completions (-want +got):\n%s", d)
	}
	s := h.a.conn.Stats()
	if s.Timeouts != 8 {
		t.Fatalf("%d timeouts, want 8 (first try and retry_cnt 7)", s.Timeouts)
	}
	to := ackTimeoutUnit << 8
	if el := h.loop.Now() - start; el < 8*to || el > 8*to+10*sim.Microsecond {
		t.Fatalf("gave up after %v, want 8 x %v", el, to)
	}
}

func TestCloseFlushesAndClosesPeer(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.dial()
	lkey, _ := h.a.mem.add(0x1000, 1<<20, allAccess)
	rkey, _ := h.b.mem.add(0x1000, 1<<20, allAccess)
	h.b.postRecv(recvWR(5, rkey, 0x1000, 10))
	h.a.postSend(writeWR(1, lkey, 0x1000, 1<<20, rkey, 0x1000))
	h.loop.RunUntil(h.loop.Now() + 10*sim.Microsecond)
	h.a.conn.Close(h.loop.Now())
	h.a.after(h.loop.Now())
	if d := cmp.Diff([]transport.Completion{{ID: 1, Op: transport.OpWrite, Status: transport.StatusFlushed}}, h.a.comps); d != "" {
		t.Fatalf("completions (-want +got):\n%s", d)
	}
	h.runUntil(func() bool { return h.b.conn.State() == transport.StateClosed }, sim.Second)
	if d := cmp.Diff([]transport.Completion{{ID: 5, Op: transport.OpRecv, Status: transport.StatusFlushed}}, h.b.comps); d != "" {
		t.Fatalf("peer completions (-want +got):\n%s", d)
	}
	h.loop.RunUntil(h.loop.Now() + 100*sim.Microsecond)
	if h.a.conn.cm.waiting != 0 {
		t.Fatalf("DREQ still unanswered")
	}
	if _, ok := h.b.proto.accepted[h.b.conn.tid]; ok {
		t.Fatal("closed passive QP still in the REQ table")
	}
}

func TestSetupSurvivesLostCM(t *testing.T) {
	for _, lose := range []CMAttr{CMReq, CMRep, CMRTU} {
		t.Run(lose.String(), func(t *testing.T) {
			h := newHarness(t, harnessConfig{opts: Options{CMTimeout: 100 * sim.Microsecond}})
			lost := 0
			h.filter = func(from *endpoint, pk *ib.Packet) verdict {
				if pk.BTH.DestQP() == cmQPN && CMMessage(pk.Payload).Attr() == lose && lost < 2 {
					lost++
					return drop
				}
				return pass
			}
			h.dial()
			if lost != 2 {
				t.Fatalf("lost %d %v, want 2", lost, lose)
			}
			if n := h.a.conn.Stats().CMRetries + h.b.conn.Stats().CMRetries; n != 2 {
				t.Fatalf("%d CM retries, want 2", n)
			}
		})
	}
}

func TestLostRTUImpliedByData(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: Options{CMTimeout: sim.Millisecond}})
	h.filter = func(from *endpoint, pk *ib.Packet) verdict {
		if pk.BTH.DestQP() == cmQPN && CMMessage(pk.Payload).Attr() == CMRTU {
			return drop
		}
		return pass
	}
	tc, err := h.a.proto.Dial(0, h.a.config())
	if err != nil {
		t.Fatal(err)
	}
	h.a.conn = tc.(*Conn)
	lkey, _ := h.a.mem.add(0x1000, 4096, allAccess)
	rkey, _ := h.b.mem.add(0x1000, 4096, allAccess)
	h.a.postSend(writeWR(1, lkey, 0x1000, 4096, rkey, 0x1000)) // posted while connecting
	h.a.after(0)
	h.runUntil(func() bool { return len(h.a.comps) == 1 }, sim.Second)
	if h.b.conn.State() != transport.StateEstablished || h.loop.Now() > sim.Millisecond {
		t.Fatalf("passive side %v at %v: the first WRITE should have established it before the REP retry", h.b.conn.State(), h.loop.Now())
	}
}

func TestConnectTimesOut(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: Options{CMTimeout: 10 * sim.Microsecond, CMRetries: 3}})
	h.filter = func(*endpoint, *ib.Packet) verdict { return drop }
	tc, _ := h.a.proto.Dial(0, h.a.config())
	h.a.conn = tc.(*Conn)
	lkey, _ := h.a.mem.add(0x1000, 4096, allAccess)
	h.a.postSend(writeWR(1, lkey, 0x1000, 10, 1, 0))
	h.a.after(0)
	h.runUntil(func() bool { return h.a.conn.State() == transport.StateError }, sim.Second)
	if got := h.a.conn.Stats().CMSent; got != 4 {
		t.Fatalf("%d REQs sent, want 4", got)
	}
	if len(h.a.comps) != 1 || h.a.comps[0].Status != transport.StatusRetryExceeded {
		t.Fatalf("completions %+v", h.a.comps)
	}
}

func TestBadConfigAndOptions(t *testing.T) {
	good := transport.Config{LocalID: 1, Ports: 1, Memory: &testMem{}}
	for _, tc := range []struct {
		name string
		opts Options
		cfg  func(c *transport.Config)
	}{
		{"local id 0", Options{}, func(c *transport.Config) { c.LocalID = 0 }},
		{"local id too big", Options{}, func(c *transport.Config) { c.LocalID = 1 << 24 }},
		{"no ports", Options{}, func(c *transport.Config) { c.Ports = 0 }},
		{"odd mtu", Options{}, func(c *transport.Config) { c.PathMTU = 1500 }},
		{"no memory", Options{}, func(c *transport.Config) { c.Memory = nil }},
		{"pinned port missing", Options{PinPort: true, Port: 3}, func(*transport.Config) {}},
		{"config port missing", Options{}, func(c *transport.Config) { c.PinPort, c.Port = true, 1 }},
		{"timeout exponent", Options{Timeout: 32}, func(*transport.Config) {}},
		{"retry count", Options{RetryCount: 8}, func(*transport.Config) {}},
		{"bad dcqcn", Options{DCQCN: DCQCN{G: 2}}, func(*transport.Config) {}},
	} {
		cfg := good
		tc.cfg(&cfg)
		if _, err := NewProtocol(tc.opts).Dial(0, cfg); err == nil {
			t.Errorf("%s: Dial accepted it", tc.name)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
	if _, err := NewProtocol(Options{}).Dial(0, good); err != nil {
		t.Fatalf("good config refused: %v", err)
	}
	// A pinned QP uses the port it was given, whatever its random draw.
	for port := 0; port < 4; port++ {
		cfg := good
		cfg.Ports, cfg.PinPort, cfg.Port = 4, true, port
		cfg.Rand = sim.NewRand(1, "pin")
		c, err := NewProtocol(Options{}).Dial(0, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.(*Conn).Port(); got != port {
			t.Errorf("pinned to port %d, the QP uses %d", port, got)
		}
	}
}
