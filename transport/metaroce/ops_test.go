package metaroce

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
	"github.com/mrlab/mrlab/transport/transporttest"
)

func recvWR(id uint64, addr uint64, n int) *transport.WorkRequest {
	wr := &transport.WorkRequest{ID: id, NumSGE: 1}
	wr.SGL[0] = transport.SGE{Addr: addr, Len: uint32(n), LKey: keyRecv}
	return wr
}

func send(id uint64, stream uint16, src uint64, n int) *transport.WorkRequest {
	wr := &transport.WorkRequest{ID: id, Op: transport.OpSend, Stream: stream, NumSGE: 1}
	wr.SGL[0] = transport.SGE{Addr: src, Len: uint32(n), LKey: keyRW}
	return wr
}

var ignoreBytes = cmpopts.IgnoreFields(transport.Completion{}, "Bytes")

// TestProtectionErrors: requests the target must refuse are NAKed, nothing
// is written, and both ends report the error; a remote access error leaves
// both ends in error (as an RC QP), an invalid request does not.
func TestProtectionErrors(t *testing.T) {
	const target = addrRW + 0x80000
	tests := []struct {
		name       string
		wr         *transport.WorkRequest
		recv       *transport.WorkRequest // posted at the target first
		wantSender transport.Status
		wantTarget []transport.Completion
	}{
		{
			name:       "bad rkey",
			wr:         &transport.WorkRequest{ID: 1, Op: transport.OpWrite, RemoteAddr: target, RKey: 42},
			wantSender: transport.StatusRemoteAccess,
			wantTarget: []transport.Completion{{Op: transport.OpWrite, Status: transport.StatusRemoteAccess}},
		},
		{
			name:       "past the end of the region",
			wr:         &transport.WorkRequest{ID: 1, Op: transport.OpWrite, RemoteAddr: addrRW + bigSize - 10000, RKey: keyRW},
			wantSender: transport.StatusRemoteAccess,
			wantTarget: []transport.Completion{{Op: transport.OpWrite, Status: transport.StatusRemoteAccess}},
		},
		{
			name:       "read-only region",
			wr:         &transport.WorkRequest{ID: 1, Op: transport.OpWrite, RemoteAddr: addrRO, RKey: keyRO},
			wantSender: transport.StatusRemoteAccess,
			wantTarget: []transport.Completion{{Op: transport.OpWrite, Status: transport.StatusRemoteAccess}},
		},
		{
			name:       "READ without remote-read permission",
			wr:         &transport.WorkRequest{ID: 1, Op: transport.OpRead, RemoteAddr: addrRcv, RKey: keyRecv},
			wantSender: transport.StatusRemoteAccess,
			wantTarget: []transport.Completion{{Op: transport.OpRead, Status: transport.StatusRemoteAccess}},
		},
		{
			name:       "WRITE_IMM with a bad rkey reports on its receive",
			wr:         &transport.WorkRequest{ID: 1, Op: transport.OpWriteImm, RemoteAddr: target, RKey: 42, Imm: 5},
			recv:       &transport.WorkRequest{ID: 9},
			wantSender: transport.StatusRemoteAccess,
			wantTarget: []transport.Completion{{ID: 9, Op: transport.OpRecv, Status: transport.StatusRemoteAccess}},
		},
		{
			name:       "SEND longer than its receive",
			wr:         &transport.WorkRequest{ID: 1, Op: transport.OpSend},
			recv:       recvWR(9, addrRcv, 1000),
			wantSender: transport.StatusRemoteInvalidRequest,
			wantTarget: []transport.Completion{{ID: 9, Op: transport.OpRecv, Status: transport.StatusLocalLength}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t, transporttest.Config{Seed: 9}, Options{})
			before := bytes.Clone(mem(l.b, keyRW, addrRW, bigSize))
			if tc.recv != nil {
				if err := l.cb.PostRecv(tc.recv); err != nil {
					t.Fatal(err)
				}
			}
			wr := *tc.wr
			wr.NumSGE = 1
			wr.SGL[0] = transport.SGE{Addr: addrRW, Len: 20000, LKey: keyRW}
			if wr.Op == transport.OpRead {
				wr.SGL[0].LKey, wr.SGL[0].Addr = keyRecv, addrRcv
			}
			if err := l.ca.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if !l.runUntil(10*sim.Millisecond, func() bool { return len(l.ca.Completions) == 1 }) {
				t.Fatal("no completion")
			}
			l.run(sim.Millisecond)
			want := []transport.Completion{{ID: 1, Op: wr.Op, Status: tc.wantSender}}
			if diff := cmp.Diff(want, l.ca.Completions); diff != "" {
				t.Errorf("initiator completions (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantTarget, l.cb.Completions, ignoreBytes); diff != "" {
				t.Errorf("target completions (-want +got):\n%s", diff)
			}
			if !bytes.Equal(before, mem(l.b, keyRW, addrRW, bigSize)) {
				t.Error("the refused request wrote target memory")
			}
			if got := mem(l.b, keyRecv, addrRcv, 1000); tc.wantSender == transport.StatusRemoteInvalidRequest && !bytes.Equal(got, make([]byte, 1000)) {
				t.Error("the refused SEND wrote its receive buffer")
			}
			if st := metaConn(l.cb).Stats(); st.ProtectionNaksSent != 1 || st.NaksSent == 0 {
				t.Errorf("target stats: %d protection NAKs, %d NAKs sent", st.ProtectionNaksSent, st.NaksSent)
			}
			if tc.wantSender == transport.StatusRemoteAccess {
				// Fatal at both ends, as in RC: a guess costs a handshake.
				if sa, sb := l.ca.T.State(), l.cb.T.State(); sa != transport.StateError || sb != transport.StateError {
					t.Errorf("after a remote access error: initiator %v, target %v, want both in error", sa, sb)
				}
				if err := l.ca.PostSend(write(2, 0, addrRW, addrRW+0x90000, 100)); err == nil {
					t.Error("initiator took a request after a remote access error")
				}
				return
			}
			// Other refusals leave the connection good.
			if err := l.ca.PostSend(write(2, 0, addrRW, addrRW+0x90000, 100)); err != nil {
				t.Fatal(err)
			}
			if !l.runUntil(10*sim.Millisecond, func() bool { return len(l.ca.Completions) == 2 }) ||
				l.ca.Completions[1].Status != transport.StatusOK {
				t.Errorf("connection unusable after the error: %+v", l.ca.Completions)
			}
		})
	}
}

// TestLocalProtection: a bad local buffer fails at once, in stream order,
// without sending anything.
func TestLocalProtection(t *testing.T) {
	l := newLab(t, transporttest.Config{Seed: 10}, Options{})
	if err := l.ca.PostSend(write(1, 4, addrRW, addrRW+0x80000, 100000)); err != nil {
		t.Fatal(err)
	}
	bad := write(2, 4, addrRW, addrRW+0x90000, 100)
	bad.SGL[0].LKey = 77
	if err := l.ca.PostSend(bad); err != nil {
		t.Fatal(err)
	}
	l.run(sim.Millisecond)
	want := []transport.Completion{
		{ID: 1, Op: transport.OpWrite, Stream: 4, Bytes: 100000},
		{ID: 2, Op: transport.OpWrite, Stream: 4, Status: transport.StatusLocalProtection},
	}
	if diff := cmp.Diff(want, l.ca.Completions); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestRNR: a SEND with no receive posted is refused with RNR NAKs and
// retried; it completes, with its bytes, once the receive is posted.
func TestRNR(t *testing.T) {
	l := newLab(t, transporttest.Config{Seed: 11}, Options{})
	const n = 30000
	if err := l.ca.PostSend(send(1, 2, addrRW+5, n)); err != nil {
		t.Fatal(err)
	}
	l.run(100 * sim.Microsecond)
	if len(l.ca.Completions) != 0 {
		t.Fatalf("SEND completed with no receive posted: %+v", l.ca.Completions)
	}
	st := metaConn(l.ca).Stats()
	if st.RNRNaksReceived == 0 {
		t.Fatal("no RNR NAK")
	}
	if err := l.cb.PostRecv(recvWR(50, addrRcv, 65536)); err != nil {
		t.Fatal(err)
	}
	if !l.runUntil(10*sim.Millisecond, func() bool { return len(l.ca.Completions) == 1 && len(l.cb.Completions) == 1 }) {
		l.dumpTrace()
		t.Fatal("SEND did not complete after the receive was posted")
	}
	if diff := cmp.Diff([]transport.Completion{{ID: 1, Op: transport.OpSend, Stream: 2, Bytes: n}}, l.ca.Completions); diff != "" {
		t.Errorf("sender (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]transport.Completion{{ID: 50, Op: transport.OpRecv, Stream: 2, Bytes: n}}, l.cb.Completions); diff != "" {
		t.Errorf("receiver (-want +got):\n%s", diff)
	}
	if !bytes.Equal(mem(l.a, keyRW, addrRW+5, n), mem(l.b, keyRecv, addrRcv, n)) {
		t.Error("SEND bytes differ")
	}
	if len(l.tr.Grep("RNR")) == 0 {
		t.Error("RNR not in the trace")
	}
}

// TestRNRExceeded: a receive that never comes fails the SEND with
// StatusRNRRetryExceeded (and, as in RC, the connection).
func TestRNRExceeded(t *testing.T) {
	l := newLab(t, transporttest.Config{Seed: 12}, Options{RNRRetries: 3})
	if err := l.ca.PostSend(send(1, 0, addrRW, 100)); err != nil {
		t.Fatal(err)
	}
	if err := l.ca.PostSend(write(2, 1, addrRW, addrRW+0x80000, 100)); err != nil {
		t.Fatal(err)
	}
	if !l.runUntil(50*sim.Millisecond, func() bool { return len(l.ca.Completions) == 2 }) {
		t.Fatal("no completion")
	}
	// The WRITE on another stream is not held up by the SEND.
	want := []transport.Completion{
		{ID: 2, Op: transport.OpWrite, Stream: 1, Bytes: 100},
		{ID: 1, Op: transport.OpSend, Status: transport.StatusRNRRetryExceeded},
	}
	if diff := cmp.Diff(want, l.ca.Completions); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if s := l.ca.T.State(); s != transport.StateError {
		t.Errorf("state %v, want error", s)
	}
}

// TestRead: a READ into three sink elements.
func TestRead(t *testing.T) {
	l := newLab(t, transporttest.Config{Seed: 13, Ports: 2}, Options{})
	const n = 50000
	wr := &transport.WorkRequest{ID: 3, Op: transport.OpRead, Stream: 1, RemoteAddr: addrRW + 777, RKey: keyRW, NumSGE: 3}
	wr.SGL[0] = transport.SGE{Addr: addrRcv, Len: 10000, LKey: keyRecv}
	wr.SGL[1] = transport.SGE{Addr: addrRcv + 20000, Len: 5, LKey: keyRecv}
	wr.SGL[2] = transport.SGE{Addr: addrRcv + 30000, Len: n - 10005, LKey: keyRecv}
	if err := l.ca.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	if !l.runUntil(10*sim.Millisecond, func() bool { return len(l.ca.Completions) == 1 }) {
		t.Fatal("READ did not complete")
	}
	if diff := cmp.Diff([]transport.Completion{{ID: 3, Op: transport.OpRead, Stream: 1, Bytes: n}}, l.ca.Completions); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	src := mem(l.b, keyRW, addrRW+777, n)
	got := append(append(bytes.Clone(mem(l.a, keyRecv, addrRcv, 10000)), mem(l.a, keyRecv, addrRcv+20000, 5)...),
		mem(l.a, keyRecv, addrRcv+30000, n-10005)...)
	if !bytes.Equal(src, got) {
		t.Error("READ bytes differ")
	}
	if len(l.cb.Completions) != 0 {
		t.Errorf("the responder completed something: %+v", l.cb.Completions)
	}
}

// TestStreamIndependence: a long WRITE on stream 1 is held up by losses;
// a SEND behind it on stream 1 completes only after it, while a SEND on
// stream 2, posted later, completes first — at both ends.
func TestStreamIndependence(t *testing.T) {
	l := newLab(t, transporttest.Config{Seed: 14}, Options{})
	for i := 0; i < 3; i++ {
		if err := l.cb.PostRecv(recvWR(uint64(100+i), addrRcv+uint64(i)*4096, 4096)); err != nil {
			t.Fatal(err)
		}
	}
	// Lose a chunk of the WRITE until the first completion, at most 8
	// times, so it finishes late whatever the loss recovery's speed.
	drops := 0
	l.net.Filter = func(p *transporttest.Packet) transporttest.Verdict {
		if d, ok := dataOf(p); ok && p.From == l.a && d.DSN == 5 && drops < 8 && len(l.ca.Completions) == 0 {
			drops++
			return transporttest.Drop
		}
		return transporttest.Pass
	}
	post := func(wr *transport.WorkRequest) {
		if err := l.ca.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	post(write(1, 1, addrRW, addrRW+0x80000, 200000))
	post(send(2, 1, addrRW, 100))
	post(send(3, 2, addrRW, 200))
	if !l.runUntil(20*sim.Millisecond, func() bool { return len(l.ca.Completions) == 3 && len(l.cb.Completions) == 2 }) {
		t.Fatalf("completions %+v / %+v", l.ca.Completions, l.cb.Completions)
	}
	ids := func(cs []transport.Completion) []uint64 {
		var r []uint64
		for _, c := range cs {
			r = append(r, c.ID)
		}
		return r
	}
	if diff := cmp.Diff([]uint64{3, 1, 2}, ids(l.ca.Completions)); diff != "" {
		t.Errorf("initiator order (-want +got):\n%s", diff)
	}
	// Receives are taken in post order (100 by ID 2, 101 by ID 3) but
	// complete per stream: stream 2's first.
	want := []transport.Completion{
		{ID: 101, Op: transport.OpRecv, Stream: 2, Bytes: 200},
		{ID: 100, Op: transport.OpRecv, Stream: 1, Bytes: 100},
	}
	if diff := cmp.Diff(want, l.cb.Completions); diff != "" {
		t.Errorf("target order (-want +got):\n%s", diff)
	}
}

// TestHandshakeLoss: the first SYN, SYN_ACK and EST are all lost; setup
// still completes and data flows.
func TestHandshakeLoss(t *testing.T) {
	n := transporttest.New(sim.NewLoop(), transporttest.Config{Seed: 15, Ports: 2})
	tr := &transporttest.TraceLog{}
	n.Trace = tr
	a := n.AddHost("a", NewProtocol(Options{}))
	b := n.AddHost("b", NewProtocol(Options{}))
	registerMem(a)
	registerMem(b)
	lost := map[wire.Type]bool{}
	n.Filter = func(p *transporttest.Packet) transporttest.Verdict {
		t := pktType(p)
		if (t == wire.TypeSyn || t == wire.TypeSynAck || t == wire.TypeEst) && !lost[t] {
			lost[t] = true
			return transporttest.Drop
		}
		return transporttest.Pass
	}
	c, err := n.Connect(a, b, 10*sim.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Conns()) != 1 {
		t.Errorf("b opened %d connections for one dial", len(b.Conns()))
	}
	if err := c.PostSend(write(1, 0, addrRW, addrRW+0x80000, 10000)); err != nil {
		t.Fatal(err)
	}
	n.Loop.RunUntil(n.Loop.Now() + 5*sim.Millisecond)
	if len(c.Completions) != 1 || c.Completions[0].Status != transport.StatusOK {
		t.Errorf("completions %+v", c.Completions)
	}
	if len(tr.Grep("SYN retry")) == 0 || len(tr.Grep("SYN_ACK retry")) == 0 {
		t.Errorf("no retries traced: %q", tr.Lines)
	}
}

// TestClose: closing flushes what is queued at both ends and tears down.
func TestClose(t *testing.T) {
	l := newLab(t, transporttest.Config{Seed: 16}, Options{})
	if err := l.cb.PostRecv(recvWR(7, addrRcv, 100)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := l.ca.PostSend(write(uint64(i+1), 0, addrRW, addrRW+0x80000, 500000)); err != nil {
			t.Fatal(err)
		}
	}
	l.run(2 * sim.Microsecond)
	l.ca.Close()
	if err := l.ca.PostSend(write(9, 0, addrRW, addrRW, 1)); err != transport.ErrClosed {
		t.Errorf("PostSend after Close: %v", err)
	}
	l.run(sim.Millisecond)
	for _, wc := range l.ca.Completions {
		if wc.Status != transport.StatusFlushed {
			t.Errorf("initiator completion %+v", wc)
		}
	}
	if len(l.ca.Completions) != 3 {
		t.Errorf("%d initiator completions, want 3", len(l.ca.Completions))
	}
	if diff := cmp.Diff([]transport.Completion{{ID: 7, Op: transport.OpRecv, Status: transport.StatusFlushed}}, l.cb.Completions); diff != "" {
		t.Errorf("target (-want +got):\n%s", diff)
	}
	if l.ca.T.State() != transport.StateClosed || l.cb.T.State() != transport.StateClosed {
		t.Errorf("states %v, %v", l.ca.T.State(), l.cb.T.State())
	}
	if d := l.ca.T.Deadline(); d != sim.Never {
		t.Errorf("closed connection still has a deadline at %v", d)
	}
}

// TestDeterministic: the same seed gives the same trace and completion
// times; another seed does not.
func TestDeterministic(t *testing.T) {
	run := func(seed uint64) ([]string, []sim.Time) {
		l := newLab(t, transporttest.Config{Seed: seed, Ports: 2, Loss: 0.02, PathSkew: 2 * sim.Microsecond}, Options{})
		var times []sim.Time
		l.ca.OnComplete = func(c *transporttest.Conn, wc transport.Completion) { times = append(times, c.Host.Now()) }
		for i := 0; i < 10; i++ {
			if err := l.ca.PostSend(write(uint64(i+1), uint16(i%3), addrRW, addrRW+0x80000+uint64(i)*50000, 50000)); err != nil {
				t.Fatal(err)
			}
		}
		l.run(5 * sim.Millisecond)
		return l.tr.Lines, times
	}
	t1, c1 := run(21)
	t2, c2 := run(21)
	if diff := cmp.Diff(t1, t2); diff != "" {
		t.Errorf("same seed, different traces:\n%s", diff)
	}
	if diff := cmp.Diff(c1, c2); diff != "" {
		t.Errorf("same seed, different completion times:\n%s", diff)
	}
	if t3, _ := run(22); cmp.Equal(t1, t3) {
		t.Error("different seeds, identical traces")
	}
}

// TestGiveUp: the ways a connection ends in error — setup never answered,
// a chunk that never gets through, every path dead — each complete what
// was posted (the culprit with StatusRetryExceeded) and leave no deadline.
func TestGiveUp(t *testing.T) {
	t.Run("SYN unanswered", func(t *testing.T) {
		n := transporttest.New(sim.NewLoop(), transporttest.Config{Seed: 17, Ports: 2})
		a := n.AddHost("a", NewProtocol(Options{MaxRetries: 3}))
		b := n.AddHost("b", NewProtocol(Options{}))
		registerMem(a)
		n.Filter = func(p *transporttest.Packet) transporttest.Verdict { return transporttest.Drop }
		c, err := a.Dial(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.PostSend(write(1, 0, addrRW, addrRW, 10)); err != nil {
			t.Fatal(err)
		}
		n.Loop.RunUntil(100 * sim.Millisecond)
		if c.T.State() != transport.StateError {
			t.Errorf("state %v, want error", c.T.State())
		}
		if diff := cmp.Diff([]transport.Completion{{ID: 1, Op: transport.OpWrite, Status: transport.StatusFlushed}}, c.Completions); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if d := c.T.Deadline(); d != sim.Never {
			t.Errorf("deadline %v after giving up", d)
		}
	})
	t.Run("chunk never delivered", func(t *testing.T) {
		l := newLab(t, transporttest.Config{Seed: 18, Ports: 2}, Options{MaxRetries: 4})
		l.net.Filter = func(p *transporttest.Packet) transporttest.Verdict {
			if d, ok := dataOf(p); ok && p.From == l.a && d.DSN == 3 {
				return transporttest.Drop
			}
			return transporttest.Pass
		}
		if err := l.ca.PostSend(write(1, 0, addrRW, addrRW+0x80000, 100000)); err != nil {
			t.Fatal(err)
		}
		if err := l.ca.PostSend(write(2, 1, addrRW, addrRW+0x80000, 10)); err != nil {
			t.Fatal(err)
		}
		if !l.runUntil(100*sim.Millisecond, func() bool { return len(l.ca.Completions) == 2 }) {
			t.Fatalf("completions %+v", l.ca.Completions)
		}
		want := []transport.Completion{
			{ID: 2, Op: transport.OpWrite, Stream: 1, Bytes: 10},
			{ID: 1, Op: transport.OpWrite, Status: transport.StatusRetryExceeded},
		}
		if diff := cmp.Diff(want, l.ca.Completions); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		l.run(10 * sim.Millisecond)
		if l.ca.T.State() != transport.StateError || l.cb.T.State() != transport.StateClosed {
			t.Errorf("states %v / %v, want error / closed (the peer is told)", l.ca.T.State(), l.cb.T.State())
		}
	})
	t.Run("every path dead", func(t *testing.T) {
		l := newLab(t, transporttest.Config{Seed: 19, Ports: 2}, Options{AllFailedTimeout: 3 * sim.Millisecond})
		l.net.SetPlaneUp(0, false)
		l.net.SetPlaneUp(1, false)
		if err := l.ca.PostSend(write(1, 0, addrRW, addrRW+0x80000, 100000)); err != nil {
			t.Fatal(err)
		}
		if !l.runUntil(100*sim.Millisecond, func() bool { return len(l.ca.Completions) == 1 }) {
			t.Fatal("no completion")
		}
		if wc := l.ca.Completions[0]; wc.Status != transport.StatusFlushed && wc.Status != transport.StatusRetryExceeded {
			t.Errorf("completion %+v", wc)
		}
		if l.ca.T.State() != transport.StateError {
			t.Errorf("state %v, want error", l.ca.T.State())
		}
		if len(l.tr.Grep("all 16 paths failed")) != 1 {
			t.Errorf("trace: %q", l.tr.Grep("failed"))
		}
	})
}
