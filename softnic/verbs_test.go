package softnic

import (
	"bytes"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/transport/rocev2"
)

func TestWriteRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		wr   func(dst *MR) (addr uint64, rkey uint32)
	}{
		{"wrong rkey", func(m *MR) (uint64, uint32) { return m.Addr(), m.RKey() + 1 }},
		{"past the end", func(m *MR) (uint64, uint32) { return m.Addr() + uint64(m.Len()) - 100, m.RKey() }},
		{"before the start", func(m *MR) (uint64, uint32) { return m.Addr() - 1, m.RKey() }},
	} {
		for _, tc := range transportCases() {
			t.Run(tc.name+"/"+tt.name, func(t *testing.T) {
				p := newPair(t, 1, tc.protos)
				src, dst := p.connect(t, 4096, transport.AccessLocalWrite|transport.AccessRemoteWrite, tc.kind)
				for i := range src.buf {
					src.buf[i] = 0xab
				}
				addr, rkey := tt.wr(dst.mr)
				wr := transport.WorkRequest{ID: 1, Op: transport.OpWrite, RemoteAddr: addr, RKey: rkey, NumSGE: 1}
				wr.SGL[0] = src.mr.SGE(0, 1000)
				if err := src.c.PostSend(&wr); err != nil {
					t.Fatal(err)
				}
				wc := p.waitCompletion(t, src.cq, sim.Millisecond)
				if wc.Status != transport.StatusRemoteAccess {
					t.Errorf("sender completion %v, want %v", wc.Status, transport.StatusRemoteAccess)
				}
				if !bytes.Equal(dst.buf, make([]byte, len(dst.buf))) {
					t.Error("refused WRITE changed destination memory")
				}
				if got := dst.c.Stats().AccessErrors; got == 0 {
					t.Error("receiver did not count the refusal")
				}
				if got := p.b.Stats().AccessErrors; got == 0 {
					t.Error("receiving NIC did not count the refusal")
				}
			})
		}
	}
}

func TestSendWaitsForRecv(t *testing.T) {
	for _, tc := range transportCases() {
		t.Run(tc.name, func(t *testing.T) { testSendWaitsForRecv(t, tc) })
	}
}

func testSendWaitsForRecv(t *testing.T, tc transportCase) {
	p := newPair(t, 1, tc.protos)
	src, dst := p.connect(t, 4096, transport.AccessLocalWrite|transport.AccessRemoteWrite, tc.kind)
	copy(src.buf, "hello, receiver")
	wr := transport.WorkRequest{ID: 5, Op: transport.OpSend, NumSGE: 1}
	wr.SGL[0] = src.mr.SGE(0, 15)
	if err := src.c.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	p.loop.RunUntil(p.loop.Now() + 100*sim.Microsecond)
	if src.cq.Len() != 0 || dst.cq.Len() != 0 {
		t.Fatalf("SEND completed with no receive posted")
	}
	// The receiver refused it as receiver-not-ready (and the sender backs
	// off and retries).
	switch c := src.c.Transport().(type) {
	case *rocev2.Conn:
		if n := c.Stats().RNRNAKsReceived; n == 0 {
			t.Error("no RNR NAK received")
		}
	case *metaroce.Conn:
		if n := c.Stats().RNRNaksReceived; n == 0 {
			t.Error("no RNR NAK received")
		}
	case *toyConn:
		if c.retryAt == 0 {
			t.Error("toy sender not backing off after RNR")
		}
	}
	rwr := transport.WorkRequest{ID: 9, Op: transport.OpRecv, NumSGE: 1}
	rwr.SGL[0] = dst.mr.SGE(100, 64)
	if err := dst.c.PostRecv(&rwr); err != nil {
		t.Fatal(err)
	}
	rc := p.waitCompletion(t, dst.cq, 10*sim.Millisecond)
	if rc.ID != 9 || rc.Op != transport.OpRecv || rc.Status != transport.StatusOK || rc.Bytes != 15 || rc.Conn != dst.c {
		t.Errorf("receive completion %+v", rc)
	}
	sc := p.waitCompletion(t, src.cq, 10*sim.Millisecond)
	if sc.ID != 5 || sc.Status != transport.StatusOK {
		t.Errorf("send completion %+v", sc)
	}
	if got := string(dst.buf[100:115]); got != "hello, receiver" {
		t.Errorf("received %q", got)
	}
}

func TestReadAndNotify(t *testing.T) {
	for _, tc := range transportCases() {
		t.Run(tc.name, func(t *testing.T) { testReadAndNotify(t, tc) })
	}
}

func testReadAndNotify(t *testing.T, tc transportCase) {
	p := newPair(t, 1, tc.protos)
	src, dst := p.connect(t, 4096, transport.AccessLocalWrite|transport.AccessRemoteRead, tc.kind)
	copy(dst.buf[200:], "remote bytes")
	var seen []Completion
	src.cq.OnCompletion(func() {
		var wc [4]Completion
		for k := src.cq.Poll(wc[:]); k > 0; k = src.cq.Poll(wc[:]) {
			seen = append(seen, wc[:k]...)
		}
	})
	wr := transport.WorkRequest{ID: 3, Op: transport.OpRead, RemoteAddr: dst.mr.Addr() + 200, RKey: dst.mr.RKey(), NumSGE: 2}
	wr.SGL[0] = src.mr.SGE(0, 6)
	wr.SGL[1] = src.mr.SGE(50, 6)
	if err := src.c.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	p.loop.RunUntil(p.loop.Now() + sim.Millisecond)
	if len(seen) != 1 || seen[0].Status != transport.StatusOK || seen[0].Op != transport.OpRead {
		t.Fatalf("completions seen by the callback: %+v", seen)
	}
	if got := string(src.buf[0:6]) + string(src.buf[50:56]); got != "remote bytes" {
		t.Errorf("READ gathered %q", got)
	}
}

func TestCQOverrun(t *testing.T) {
	p := newPair(t, 1, toyProtos)
	cq := p.a.CreateCQ(2)
	for i := 0; i < 3; i++ {
		cq.push(Completion{Completion: transport.Completion{ID: uint64(i)}})
	}
	if cq.Overruns() != 1 || p.a.Stats().CQOverruns != 1 {
		t.Errorf("overruns %d, NIC %d", cq.Overruns(), p.a.Stats().CQOverruns)
	}
	var wc [4]Completion
	if k := cq.Poll(wc[:]); k != 2 || wc[0].ID != 0 || wc[1].ID != 1 {
		t.Errorf("polled %d: %+v", k, wc[:k])
	}
	// Wrap-around keeps order.
	for i := 10; i < 12; i++ {
		cq.push(Completion{Completion: transport.Completion{ID: uint64(i)}})
	}
	if k := cq.Poll(wc[:1]); k != 1 || wc[0].ID != 10 {
		t.Errorf("after wrap: %+v", wc[0])
	}
	cq.push(Completion{Completion: transport.Completion{ID: 12}})
	if k := cq.Poll(wc[:]); k != 2 || wc[0].ID != 11 || wc[1].ID != 12 {
		t.Errorf("after wrap: %d %+v", k, wc[:k])
	}
}
