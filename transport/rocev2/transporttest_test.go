package rocev2_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// These tests run RoCEv2 through the shared in-memory harness (package
// transporttest), using only the exported API, as a NIC would.

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*13) ^ seed
	}
}

// runUntil steps the loop until cond holds or limit passes.
func runUntil(t *testing.T, n *transporttest.Net, limit sim.Time, cond func() bool) {
	t.Helper()
	end := n.Loop.Now() + limit
	for !cond() {
		if next := n.Loop.Next(); next == sim.Never || next > end {
			t.Fatalf("not done by %v", end)
		}
		n.Loop.Step()
	}
}

// TestOnePathPerQP opens 8 QPs across a 4-plane net: each QP keeps to one
// port and one UDP source port for its whole life, the passive end uses the
// port its REQ came in on, and the QPs spread over more than one port.
func TestOnePathPerQP(t *testing.T) {
	n := transporttest.New(sim.NewLoop(), transporttest.Config{Seed: 1, Ports: 4})
	a := n.AddHost("a", rocev2.NewProtocol(rocev2.Options{}))
	b := n.AddHost("b", rocev2.NewProtocol(rocev2.Options{}))
	type path struct {
		port  int
		sport uint16
	}
	paths := map[string]map[path]int{}
	usedPorts := map[int]bool{}
	n.Filter = func(p *transporttest.Packet) transporttest.Verdict {
		qp := p.Conn.T.(*rocev2.Conn)
		key := fmt.Sprintf("%s/%#x", p.From.Name, qp.QPN())
		if paths[key] == nil {
			paths[key] = map[path]int{}
		}
		paths[key][path{p.Port, p.Meta.SrcPort}]++
		if p.Port != qp.Port() || p.Meta.SrcPort != qp.SourcePort() || p.Meta.SrcPort&0xC000 != 0xC000 {
			t.Errorf("%s sent on port %d sport %#x, want port %d sport %#x", key, p.Port, p.Meta.SrcPort, qp.Port(), qp.SourcePort())
		}
		usedPorts[p.Port] = true
		return transporttest.Pass
	}
	const size = 256 << 10
	src := make([]byte, size)
	fill(src, 1)
	a.Mem.Register(1, 0x1000, src, transport.AccessLocalWrite)
	var conns []*transporttest.Conn
	for i := 0; i < 8; i++ {
		c, err := n.Connect(a, b, sim.Second)
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, size)
		b.Mem.Register(uint32(100+i), 0x10_0000, dst, transport.AccessRemoteWrite)
		wr := transport.WorkRequest{ID: 1, Op: transport.OpWrite, NumSGE: 1, RemoteAddr: 0x10_0000, RKey: uint32(100 + i)}
		wr.SGL[0] = transport.SGE{Addr: 0x1000, Len: size, LKey: 1}
		if err := c.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	runUntil(t, n, sim.Second, func() bool {
		for _, c := range conns {
			if len(c.Completions) == 0 {
				return false
			}
		}
		return true
	})
	for i, c := range conns {
		if c.Completions[0].Status != transport.StatusOK {
			t.Errorf("QP %d: %+v", i, c.Completions[0])
		}
		r, _ := b.Mem.Region(uint32(100 + i))
		if !bytes.Equal(r.Buf, src) {
			t.Errorf("QP %d: data differs", i)
		}
	}
	for key, ps := range paths {
		if len(ps) != 1 {
			t.Errorf("%s used %d paths: %v", key, len(ps), ps)
		}
	}
	if len(paths) != 16 {
		t.Errorf("%d QP ends seen sending, want 16", len(paths))
	}
	if len(usedPorts) < 2 {
		t.Errorf("8 QPs all on ports %v: QPs do not spread over planes", usedPorts)
	}
	for i, c := range conns {
		a, p := c.T.(*rocev2.Conn), c.Remote.T.(*rocev2.Conn)
		if a.Port() != p.Port() {
			t.Errorf("QP %d: active end on port %d, passive on %d", i, a.Port(), p.Port())
		}
	}
}

// TestIncastWithECN: four senders WRITE to one receiver through a shared
// downlink that marks CE above 64 KB. The receiver's QPs send CNPs, every
// sender's DCQCN cuts its rate, and every transfer completes intact.
func TestIncastWithECN(t *testing.T) {
	n := transporttest.New(sim.NewLoop(), transporttest.Config{Seed: 3, LinkRate: 25e9, ECNThreshold: 64 << 10})
	recv := n.AddHost("r", rocev2.NewProtocol(rocev2.Options{}))
	const size = 8 << 20
	var conns []*transporttest.Conn
	var srcs [][]byte
	for i := 0; i < 4; i++ {
		h := n.AddHost(fmt.Sprintf("s%d", i), rocev2.NewProtocol(rocev2.Options{}))
		src := make([]byte, size)
		fill(src, byte(i))
		h.Mem.Register(1, 0x1000, src, transport.AccessLocalWrite)
		recv.Mem.Register(uint32(10+i), uint64(i)<<32, make([]byte, size), transport.AccessRemoteWrite)
		c, err := n.Connect(h, recv, sim.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns, srcs = append(conns, c), append(srcs, src)
	}
	for i, c := range conns {
		wr := transport.WorkRequest{ID: 7, Op: transport.OpWrite, NumSGE: 1, RemoteAddr: uint64(i) << 32, RKey: uint32(10 + i)}
		wr.SGL[0] = transport.SGE{Addr: 0x1000, Len: size, LKey: 1}
		if err := c.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	runUntil(t, n, 10*sim.Second, func() bool {
		for _, c := range conns {
			if len(c.Completions) == 0 {
				return false
			}
		}
		return true
	})
	for i, c := range conns {
		st := c.T.(*rocev2.Conn).Stats()
		if c.Completions[0].Status != transport.StatusOK {
			t.Fatalf("sender %d: %+v", i, c.Completions[0])
		}
		r, _ := recv.Mem.Region(uint32(10 + i))
		if !bytes.Equal(r.Buf, srcs[i]) {
			t.Fatalf("sender %d: data differs", i)
		}
		if st.CNPsReceived == 0 || st.RateCuts == 0 {
			t.Errorf("sender %d: %d CNPs, %d rate cuts: DCQCN never engaged", i, st.CNPsReceived, st.RateCuts)
		}
		t.Logf("sender %d: %d CNPs, %d cuts, %d retransmitted", i, st.CNPsReceived, st.RateCuts, st.Retransmitted)
	}
	if n.Stats.Marked == 0 {
		t.Fatal("the bottleneck never marked CE")
	}
}

// TestReorderingIsLossToGoBackN breaks the path's FIFO order on purpose:
// RoCE cannot place out-of-order packets, so every reordering costs a NAK
// and a rewind, but data still arrives exactly once.
func TestReorderingIsLossToGoBackN(t *testing.T) {
	n := transporttest.New(sim.NewLoop(), transporttest.Config{Seed: 5, Reorder: 0.02, PathMTU: 1024})
	a := n.AddHost("a", rocev2.NewProtocol(rocev2.Options{Timeout: 8}))
	b := n.AddHost("b", rocev2.NewProtocol(rocev2.Options{Timeout: 8}))
	c, err := n.Connect(a, b, sim.Second)
	if err != nil {
		t.Fatal(err)
	}
	const msgs, size = 50, 3000
	src := make([]byte, msgs*size)
	fill(src, 9)
	dst := make([]byte, msgs*size)
	a.Mem.Register(1, 0, src, transport.AccessLocalWrite)
	b.Mem.Register(2, 0, dst, transport.AccessLocalWrite)
	for i := 0; i < msgs; i++ {
		r := transport.WorkRequest{ID: uint64(i), NumSGE: 1}
		r.SGL[0] = transport.SGE{Addr: uint64(i * size), Len: size, LKey: 2}
		if err := c.Remote.PostRecv(&r); err != nil {
			t.Fatal(err)
		}
		s := transport.WorkRequest{ID: uint64(i), Op: transport.OpSend, NumSGE: 1}
		s.SGL[0] = transport.SGE{Addr: uint64(i * size), Len: size, LKey: 1}
		if err := c.PostSend(&s); err != nil {
			t.Fatal(err)
		}
	}
	runUntil(t, n, 10*sim.Second, func() bool { return len(c.Remote.Completions) == msgs && len(c.Completions) == msgs })
	for i, rc := range c.Remote.Completions {
		if rc.ID != uint64(i) || rc.Status != transport.StatusOK || rc.Bytes != size {
			t.Fatalf("receive %d: %+v", i, rc)
		}
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("data differs")
	}
	st := c.T.(*rocev2.Conn).Stats()
	if n.Stats.Reordered == 0 || st.Rewinds == 0 {
		t.Fatalf("%d packets reordered, %d rewinds: want both", n.Stats.Reordered, st.Rewinds)
	}
}
