package verbs_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/mrlab/mrlab/labs/uverbs/uverbstest"
	"github.com/mrlab/mrlab/verbs"
)

// side is one program's verbs objects.
type side struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
}

func open(t *testing.T, lab *uverbstest.Lab, host int, size int, access verbs.Access, tr verbs.Transport) *side {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dev, err := verbs.OpenEndpoint(ctx, lab.Endpoints[host])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	s := &side{dev: dev}
	if s.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.mr, err = s.pd.AllocMR(size, access); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = dev.CreateCQ(256); err != nil {
		t.Fatal(err)
	}
	if s.qp, err = dev.CreateQP(verbs.QPConfig{PD: s.pd, SendCQ: s.cq, RecvCQ: s.cq, Transport: tr}); err != nil {
		t.Fatal(err)
	}
	return s
}

// poll busy-polls cq for one completion.
func poll(t *testing.T, cq *verbs.CQ, limit time.Duration) verbs.WC {
	t.Helper()
	var wc [1]verbs.WC
	end := time.Now().Add(limit)
	for cq.Poll(wc[:]) == 0 {
		if time.Now().After(end) {
			t.Fatalf("no completion within %v", limit)
		}
		runtime.Gosched()
	}
	return wc[0]
}

// connectPair accepts on h1 port 18515 and connects h0 to it.
func connectPair(t *testing.T, lab *uverbstest.Lab, a, b *side) {
	t.Helper()
	connectPairOn(t, lab, a, b, 18515)
}

// connectPairOn accepts on h1's port and connects h0 to it.
func connectPairOn(t *testing.T, lab *uverbstest.Lab, a, b *side, port uint16) {
	t.Helper()
	ln, err := b.dev.Listen(b.pd, port, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	acc := make(chan error, 1)
	go func() { acc <- ln.Accept(ctx, b.qp) }()
	if err := a.qp.Connect(ctx, netip.AddrPortFrom(b.dev.Addr(), port)); err != nil {
		t.Fatal(err)
	}
	if err := <-acc; err != nil {
		t.Fatal(err)
	}
	if a.qp.State() != verbs.QPEstablished || b.qp.State() != verbs.QPEstablished {
		t.Fatalf("states %v / %v", a.qp.State(), b.qp.State())
	}
}

func TestWriteSendRecv(t *testing.T) {
	for _, tr := range []verbs.Transport{verbs.MetaRoCE, verbs.RoCEv2} {
		t.Run(tr.String(), func(t *testing.T) {
			lab := uverbstest.Start(t, uverbstest.Options{})
			a := open(t, lab, 0, 1<<20, verbs.AccessLocalWrite, tr)
			b := open(t, lab, 1, 1<<20, verbs.AccessLocalWrite|verbs.AccessRemoteWrite, verbs.TransportDefault)
			// A receive posted before the connection exists is in place
			// for its first message.
			if err := b.qp.PostRecv(verbs.RecvWR{ID: 7, SGL: []verbs.SGE{b.mr.SGE(512<<10, 64)}}); err != nil {
				t.Fatal(err)
			}
			connectPair(t, lab, a, b)
			src := a.mr.Bytes()
			for i := range src {
				src[i] = byte(i*7 + 1)
			}
			if err := a.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpWrite, SGL: []verbs.SGE{a.mr.SGE(0, 256<<10)},
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
			if wc := poll(t, a.cq, 5*time.Second); wc.Status != verbs.StatusSuccess || wc.Op != verbs.OpWrite || wc.ID != 1 || wc.Bytes != 256<<10 {
				t.Fatalf("WRITE completion %+v", wc)
			}
			if !bytes.Equal(b.mr.Bytes()[:256<<10], src[:256<<10]) {
				t.Fatal("WRITE: the peer's memory does not hold the bytes written")
			}
			msg := a.mr.Bytes()[900<<10:]
			binary.LittleEndian.PutUint64(msg, 0xfeedface)
			if err := a.qp.PostSend(verbs.SendWR{ID: 2, Op: verbs.OpSendImm, Imm: 99, SGL: []verbs.SGE{a.mr.SGE(900<<10, 8)}}); err != nil {
				t.Fatal(err)
			}
			got := map[verbs.Opcode]verbs.WC{}
			got[poll(t, a.cq, 5*time.Second).Op] = verbs.WC{}
			wc := poll(t, b.cq, 5*time.Second)
			if wc.Status != verbs.StatusSuccess || wc.ID != 7 || wc.Bytes != 8 || !wc.HasImm || wc.Imm != 99 || wc.QP != b.qp.Num() {
				t.Fatalf("receive completion %+v", wc)
			}
			if v := binary.LittleEndian.Uint64(b.mr.Bytes()[512<<10:]); v != 0xfeedface {
				t.Fatalf("SEND placed %#x", v)
			}
			if s := a.dev.Stats(); s.Posted != 2 || s.Polled != 2 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// TestBadKeysAndRanges: wrong keys and SGEs outside a region complete with
// the verbs error statuses. A remote access error is fatal to the QP, as
// on an RC QP (IB: the responder NAKs and both ends go to ERROR), so each
// case runs on a fresh pair and the next request after it is flushed.
func TestBadKeysAndRanges(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{})
	cases := []struct {
		name string
		wr   func(a, b *side) verbs.SendWR
		want verbs.Status
	}{
		{"bad lkey", func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: []verbs.SGE{{Addr: a.mr.Addr(), Length: 64, LKey: a.mr.LKey() ^ 0x5500}},
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		}, verbs.StatusLocalProtection},
		{"SGE past the region", func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: []verbs.SGE{a.mr.SGE(64<<10-8, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		}, verbs.StatusLocalProtection},
		{"bad rkey", func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x5500}
		}, verbs.StatusRemoteAccess},
		{"remote range past the region", func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr() + 64<<10 - 8, RKey: b.mr.RKey()}
		}, verbs.StatusRemoteAccess},
		{"peer's region read without remote read access", func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpRead, SGL: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		}, verbs.StatusRemoteAccess},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := open(t, lab, 0, 64<<10, verbs.AccessLocalWrite, verbs.MetaRoCE)
			b := open(t, lab, 1, 64<<10, verbs.AccessLocalWrite|verbs.AccessRemoteWrite, verbs.TransportDefault)
			connectPairOn(t, lab, a, b, uint16(18515+i))
			wr := c.wr(a, b)
			wr.ID = uint64(100 + i)
			if err := a.qp.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			if wc := poll(t, a.cq, 5*time.Second); wc.ID != wr.ID || wc.Status != c.want {
				t.Errorf("completion %+v, want status %v", wc, c.want)
			}
			// A good WRITE next: it works after a local error; after a
			// remote access error the QP is in ERROR and flushes it.
			next := verbs.SendWR{ID: 200, Op: verbs.OpWrite, SGL: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
			want := verbs.StatusSuccess
			if c.want == verbs.StatusRemoteAccess {
				want = verbs.StatusFlushed
			}
			if err := a.qp.PostSend(next); err != nil {
				if want == verbs.StatusFlushed {
					return // refused at post: the QP is in ERROR
				}
				t.Fatal(err)
			}
			if wc := poll(t, a.cq, 5*time.Second); wc.ID != next.ID || wc.Status != want {
				t.Errorf("the next WRITE: completion %+v, want status %v", wc, want)
			}
		})
	}
	a := open(t, lab, 0, 4096, verbs.AccessLocalWrite, verbs.MetaRoCE)
	if err := a.qp.PostSend(verbs.SendWR{Op: verbs.Opcode(9)}); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("bad opcode: %v", err)
	}
}

// TestIsolation: a process reaches only its own regions. Another process's
// lkey on the same host, or the rkey of a region another process on the
// peer host registered, is refused like a wrong key (each request on a
// fresh pair: a remote access error ends its QP).
func TestIsolation(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{})
	other0 := open(t, lab, 0, 64<<10, verbs.AccessLocalWrite, verbs.MetaRoCE)
	other1 := open(t, lab, 1, 64<<10, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead, verbs.TransportDefault)
	secret := other1.mr.Bytes()
	copy(secret, "other process's bytes")
	var touched []*side
	for i, mk := range []func(a, b *side) verbs.SendWR{
		func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: []verbs.SGE{other0.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		},
		func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: other1.mr.Addr(), RKey: other1.mr.RKey()}
		},
		func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpRead, SGL: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: other1.mr.Addr(), RKey: other1.mr.RKey()}
		},
	} {
		a := open(t, lab, 0, 64<<10, verbs.AccessLocalWrite, verbs.MetaRoCE)
		b := open(t, lab, 1, 64<<10, verbs.AccessLocalWrite|verbs.AccessRemoteWrite, verbs.TransportDefault)
		connectPairOn(t, lab, a, b, uint16(18515+i))
		touched = append(touched, a)
		wr := mk(a, b)
		wr.ID = uint64(i)
		if err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		want := verbs.StatusRemoteAccess
		if i == 0 {
			want = verbs.StatusLocalProtection
		}
		if wc := poll(t, a.cq, 5*time.Second); wc.Status != want {
			t.Errorf("request %d (%v): %+v, want %v", i, wr.Op, wc, want)
		}
	}
	if !bytes.HasPrefix(secret, []byte("other process's bytes")) {
		t.Error("a request crossed into another process's memory")
	}
	for _, a := range touched {
		if !bytes.Equal(a.mr.Bytes()[:64], make([]byte, 64)) {
			t.Error("a READ brought another process's bytes back")
		}
	}
}

// TestZeroLengthSendImm: a SEND_IMM with no data carries its immediate
// (the examples return credits that way).
func TestZeroLengthSendImm(t *testing.T) {
	for _, tr := range []verbs.Transport{verbs.MetaRoCE, verbs.RoCEv2} {
		t.Run(tr.String(), func(t *testing.T) {
			lab := uverbstest.Start(t, uverbstest.Options{})
			a := open(t, lab, 0, 4096, verbs.AccessLocalWrite, tr)
			b := open(t, lab, 1, 4096, verbs.AccessLocalWrite, verbs.TransportDefault)
			if err := b.qp.PostRecv(verbs.RecvWR{ID: 5}); err != nil {
				t.Fatal(err)
			}
			connectPair(t, lab, a, b)
			if err := a.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpSendImm, Imm: 0xabc}); err != nil {
				t.Fatal(err)
			}
			if wc := poll(t, a.cq, 5*time.Second); wc.Status != verbs.StatusSuccess {
				t.Fatalf("send %+v", wc)
			}
			if wc := poll(t, b.cq, 5*time.Second); wc.Status != verbs.StatusSuccess || wc.ID != 5 || !wc.HasImm || wc.Imm != 0xabc || wc.Bytes != 0 {
				t.Fatalf("receive %+v", wc)
			}
		})
	}
}

// TestReadAndScatterGather: a WRITE gathers from two SGEs, a READ
// scatters the peer's bytes into three, a SEND lands across two receive
// SGEs.
func TestReadAndScatterGather(t *testing.T) {
	for _, tr := range []verbs.Transport{verbs.MetaRoCE, verbs.RoCEv2} {
		t.Run(tr.String(), func(t *testing.T) {
			lab := uverbstest.Start(t, uverbstest.Options{})
			a := open(t, lab, 0, 64<<10, verbs.AccessLocalWrite, tr)
			b := open(t, lab, 1, 64<<10, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead, verbs.TransportDefault)
			if err := b.qp.PostRecv(verbs.RecvWR{ID: 9, SGL: []verbs.SGE{b.mr.SGE(40000, 100), b.mr.SGE(50000, 100)}}); err != nil {
				t.Fatal(err)
			}
			connectPair(t, lab, a, b)
			src := a.mr.Bytes()
			for i := range src {
				src[i] = byte(i % 251)
			}
			// WRITE: 1000 bytes at 0 and 500 at 8000 land back to back.
			if err := a.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpWrite, SGL: []verbs.SGE{a.mr.SGE(0, 1000), a.mr.SGE(8000, 500)},
				RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
			if wc := poll(t, a.cq, 5*time.Second); wc.Status != verbs.StatusSuccess || wc.Bytes != 1500 {
				t.Fatalf("WRITE %+v", wc)
			}
			want := append(append([]byte(nil), src[:1000]...), src[8000:8500]...)
			if !bytes.Equal(b.mr.Bytes()[100:1600], want) {
				t.Fatal("gathered WRITE placed the wrong bytes")
			}
			// READ 1500 bytes back into three places.
			peer := b.mr.Bytes()
			for i := 20000; i < 21500; i++ {
				peer[i] = byte(i * 3)
			}
			if err := a.qp.PostSend(verbs.SendWR{ID: 2, Op: verbs.OpRead, SGL: []verbs.SGE{a.mr.SGE(30000, 700), a.mr.SGE(32000, 300), a.mr.SGE(34000, 500)},
				RemoteAddr: b.mr.Addr() + 20000, RKey: b.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
			if wc := poll(t, a.cq, 5*time.Second); wc.Status != verbs.StatusSuccess || wc.Op != verbs.OpRead {
				t.Fatalf("READ %+v", wc)
			}
			got := append(append(append([]byte(nil), src[30000:30700]...), src[32000:32300]...), src[34000:34500]...)
			if !bytes.Equal(got, peer[20000:21500]) {
				t.Fatal("READ scattered the wrong bytes")
			}
			// SEND of 150 bytes fills the first receive SGE and half the second.
			if err := a.qp.PostSend(verbs.SendWR{ID: 3, Op: verbs.OpSend, SGL: []verbs.SGE{a.mr.SGE(60000, 150)}}); err != nil {
				t.Fatal(err)
			}
			poll(t, a.cq, 5*time.Second)
			if wc := poll(t, b.cq, 5*time.Second); wc.Status != verbs.StatusSuccess || wc.ID != 9 || wc.Bytes != 150 {
				t.Fatalf("receive %+v", wc)
			}
			if !bytes.Equal(peer[40000:40100], src[60000:60100]) || !bytes.Equal(peer[50000:50050], src[60100:60150]) {
				t.Fatal("SEND scattered the wrong bytes")
			}
		})
	}
}

// TestTiming: a stopwatch over an interval reports the lab's clock and
// the wall clock, which agree when the lab keeps real time.
func TestTiming(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{})
	dev, err := verbs.OpenEndpoint(context.Background(), lab.Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	sw, err := dev.StartTiming()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	tm, err := sw.Stop()
	if err != nil {
		t.Fatal(err)
	}
	t.Log(tm)
	if tm.WallTime < 50*time.Millisecond || tm.LabTime <= 0 || tm.Limit != 0.01 || tm.String() == "" {
		t.Errorf("timing %+v", tm)
	}
	if _, err := sw.Stop(); !errors.Is(err, verbs.ErrNotFound) {
		t.Errorf("stopping twice: %v", err)
	}
}

// TestSendBeforeAccept: a SEND that reaches a connection still waiting in
// the listener's backlog is refused (RNR) until the server's Accept binds
// it to a QP with a receive posted. With the transport's default rnr_retry
// it fails once the server is late by more than the retries' back-off
// (about 5 ms); with SetRNRRetry(RNRRetryForever), as perftest and mrlab
// perf set it, it completes when the server accepts, 50 ms later.
func TestSendBeforeAccept(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{})
	for i, c := range []struct {
		name    string
		forever bool
		want    verbs.Status
	}{{"default rnr_retry", false, verbs.StatusRNRRetryExceeded}, {"rnr_retry forever", true, verbs.StatusSuccess}} {
		t.Run(c.name, func(t *testing.T) {
			a := open(t, lab, 0, 4096, verbs.AccessLocalWrite, verbs.TransportDefault)
			b := open(t, lab, 1, 4096, verbs.AccessLocalWrite, verbs.TransportDefault)
			if err := a.qp.SetRNRRetry(verbs.RNRRetryForever + 1); !errors.Is(err, verbs.ErrInvalid) {
				t.Errorf("rnr_retry 8: %v, want ErrInvalid", err)
			}
			if c.forever {
				if err := a.qp.SetRNRRetry(verbs.RNRRetryForever); err != nil {
					t.Fatal(err)
				}
			}
			port := uint16(18600 + i)
			ln, err := b.dev.Listen(b.pd, port, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := a.qp.Connect(ctx, netip.AddrPortFrom(b.dev.Addr(), port)); err != nil {
				t.Fatal(err)
			}
			if err := a.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpSend, SGL: []verbs.SGE{a.mr.SGE(0, 8)}}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // the server, late to accept
			if !c.forever {
				// The connection failed and left the backlog: no
				// Accept would find it.
				if wc := poll(t, a.cq, 5*time.Second); wc.Status != c.want {
					t.Errorf("the SEND completed with %v, want %v", wc.Status, c.want)
				}
				return
			}
			if err := b.qp.PostRecv(verbs.RecvWR{ID: 2, SGL: []verbs.SGE{b.mr.SGE(0, 64)}}); err != nil {
				t.Fatal(err)
			}
			if err := ln.Accept(ctx, b.qp); err != nil {
				t.Fatal(err)
			}
			if wc := poll(t, a.cq, 5*time.Second); wc.Status != c.want {
				t.Errorf("the SEND completed with %v, want %v", wc.Status, c.want)
			}
			if wc := poll(t, b.cq, 5*time.Second); wc.Status != verbs.StatusSuccess || wc.ID != 2 {
				t.Errorf("the receive completed %+v", wc)
			}
		})
	}
}
