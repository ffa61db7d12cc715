package rocev2

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

// lossy drops every packet (both directions, CM included) with probability
// p, from a seeded stream.
func lossy(p float64, seed uint64) func(*endpoint, *ib.Packet) verdict {
	r := sim.NewRand(seed, "loss")
	return func(*endpoint, *ib.Packet) verdict {
		if r.Float64() < p {
			return drop
		}
		return pass
	}
}

// workload is a random mix of WRITEs, SENDs and READs from one side, each
// with its own non-overlapping slice of memory so every byte can be
// checked afterwards.
type workload struct {
	from, to *endpoint
	src      []byte // from's source for WRITE/SEND
	rdst     []byte // from's destination for READ
	wdst     []byte // to's destination for WRITE
	sdst     []byte // to's receive buffers
	rsrc     []byte // to's READ source
	ops      []wlOp
	lkeyS    uint32
	lkeyR    uint32
	rkeyW    uint32
	rkeyR    uint32
	rkeyS    uint32
	nrecv    int
}

type wlOp struct {
	op  transport.Op
	off int
	n   int
	imm uint32
}

const wlSize = 1 << 20

func newWorkload(from, to *endpoint, base uint64, seed uint64, count int) *workload {
	w := &workload{from: from, to: to}
	w.lkeyS, w.src = from.mem.add(base, wlSize, allAccess)
	w.lkeyR, w.rdst = from.mem.add(base+wlSize, wlSize, allAccess)
	w.rkeyW, w.wdst = to.mem.add(base+2*wlSize, wlSize, allAccess)
	w.rkeyS, w.sdst = to.mem.add(base+3*wlSize, wlSize, allAccess)
	w.rkeyR, w.rsrc = to.mem.add(base+4*wlSize, wlSize, allAccess)
	fill(w.src, byte(seed))
	fill(w.rsrc, byte(seed)+77)
	r := rand.New(rand.NewPCG(seed, 99))
	off := 0
	for i := 0; i < count; i++ {
		n := r.IntN(24 * 1024)
		if r.IntN(8) == 0 {
			n = r.IntN(3) // tiny and zero-length messages
		}
		if off+n > wlSize {
			break
		}
		ops := []transport.Op{transport.OpWrite, transport.OpWriteImm, transport.OpSend, transport.OpSendImm, transport.OpRead}
		w.ops = append(w.ops, wlOp{op: ops[r.IntN(len(ops))], off: off, n: n, imm: r.Uint32()})
		off += n
	}
	return w
}

func (w *workload) post() {
	for i, o := range w.ops {
		if o.op == transport.OpSend || o.op == transport.OpSendImm || o.op == transport.OpWriteImm {
			s, k := sgl(w.rkeyS, uint64(3*wlSize)+w.base()+uint64(o.off), o.n)
			w.to.postRecv(transport.WorkRequest{ID: uint64(1000 + i), SGL: s, NumSGE: k})
			w.nrecv++
		}
	}
	for i, o := range w.ops {
		wr := transport.WorkRequest{ID: uint64(i + 1), Op: o.op, Imm: o.imm}
		switch o.op {
		case transport.OpRead:
			wr.SGL, wr.NumSGE = sgl(w.lkeyR, w.base()+wlSize+uint64(o.off), o.n)
			wr.RemoteAddr, wr.RKey = w.base()+4*wlSize+uint64(o.off), w.rkeyR
		default:
			// Split the source over two SGEs to exercise gathering.
			h := o.n / 3
			wr.SGL[0] = transport.SGE{Addr: w.base() + uint64(o.off), Len: uint32(h), LKey: w.lkeyS}
			wr.SGL[1] = transport.SGE{Addr: w.base() + uint64(o.off+h), Len: uint32(o.n - h), LKey: w.lkeyS}
			wr.NumSGE = 2
			wr.RemoteAddr, wr.RKey = w.base()+2*wlSize+uint64(o.off), w.rkeyW
		}
		w.from.postSend(wr)
	}
}

func (w *workload) base() uint64 { return w.from.mem.regions[w.lkeyS].base }

// check verifies completions (all OK, in posting order, exactly once) and
// every byte moved.
func (w *workload) check(t *testing.T, label string) {
	t.Helper()
	var sends, recvs []transport.Completion
	for _, c := range w.from.comps {
		if c.Op != transport.OpRecv && c.Op != transport.OpRecvImm {
			sends = append(sends, c)
		}
	}
	for _, c := range w.to.comps {
		if c.Op == transport.OpRecv || c.Op == transport.OpRecvImm {
			recvs = append(recvs, c)
		}
	}
	if len(sends) != len(w.ops) {
		t.Fatalf("%s: %d send completions, want %d", label, len(sends), len(w.ops))
	}
	ri := 0
	for i, o := range w.ops {
		c := sends[i]
		if c.ID != uint64(i+1) || c.Status != transport.StatusOK || c.Op != o.op || int(c.Bytes) != o.n {
			t.Fatalf("%s: completion %d = %+v, want id %d %v OK %d bytes", label, i, c, i+1, o.op, o.n)
		}
		switch o.op {
		case transport.OpRead:
			if !bytes.Equal(w.rdst[o.off:o.off+o.n], w.rsrc[o.off:o.off+o.n]) {
				t.Fatalf("%s: READ %d data differs", label, i)
			}
		case transport.OpWrite, transport.OpWriteImm:
			if !bytes.Equal(w.wdst[o.off:o.off+o.n], w.src[o.off:o.off+o.n]) {
				t.Fatalf("%s: WRITE %d data differs", label, i)
			}
		case transport.OpSend, transport.OpSendImm:
			if !bytes.Equal(w.sdst[o.off:o.off+o.n], w.src[o.off:o.off+o.n]) {
				t.Fatalf("%s: SEND %d data differs", label, i)
			}
		}
		if o.op == transport.OpSend || o.op == transport.OpSendImm || o.op == transport.OpWriteImm {
			if ri >= len(recvs) {
				t.Fatalf("%s: missing receive completion for op %d", label, i)
			}
			rc := recvs[ri]
			ri++
			wantOp, hasImm := transport.OpRecv, false
			if o.op != transport.OpSend {
				wantOp, hasImm = transport.OpRecvImm, true
			}
			if rc.ID != uint64(1000+i) || rc.Status != transport.StatusOK || rc.Op != wantOp || int(rc.Bytes) != o.n ||
				rc.HasImm != hasImm || (hasImm && rc.Imm != o.imm) {
				t.Fatalf("%s: receive completion for op %d = %+v", label, i, rc)
			}
		}
	}
	if ri != len(recvs) {
		t.Fatalf("%s: %d receive completions, want %d (exactly once)", label, len(recvs), ri)
	}
}

// TestRandomLossIntegrity runs random WRITE/SEND/READ mixes in both
// directions through random loss and checks that every message arrives
// exactly once, in order and intact. The last case adds duplication and
// CE marks (DCQCN pacing) at 10% loss with 256-byte MTUs, two READs in
// flight and frequent ACKs.
func TestRandomLossIntegrity(t *testing.T) {
	seeds := 16
	if testing.Short() {
		seeds = 4
	}
	for _, tc := range []struct {
		name    string
		mtu     int
		loss    float64
		dup, ce float64
		opts    Options
		maxOps  int
	}{
		{"1% loss", 1024, 0.01, 0, 0, Options{}, 40},
		{"5% loss", 1024, 0.05, 0, 0, Options{}, 40},
		{"10% loss dup ce", 256, 0.10, 0.01, 0.05, Options{MaxReads: 2, AckEvery: 3, Window: 40}, 30},
	} {
		for seed := uint64(1); seed <= uint64(seeds); seed++ {
			label := fmt.Sprintf("%s seed %d", tc.name, seed)
			tc.opts.AckTimeout, tc.opts.CMTimeout = 100*sim.Microsecond, 50*sim.Microsecond
			h := newHarness(t, harnessConfig{mtu: tc.mtu, noTrace: true, opts: tc.opts})
			r := sim.NewRand(seed, "impairments")
			h.filter = func(*endpoint, *ib.Packet) verdict {
				switch x := r.Float64(); {
				case x < tc.loss:
					return drop
				case x < tc.loss+tc.dup:
					return duplicate
				case x < tc.loss+tc.dup+tc.ce:
					return markCE
				}
				return pass
			}
			h.dial()
			ab := newWorkload(h.a, h.b, 0x10_0000_0000, seed, tc.maxOps)
			ba := newWorkload(h.b, h.a, 0x20_0000_0000, seed+1000, tc.maxOps)
			ab.post()
			ba.post()
			h.runUntil(func() bool {
				return h.a.nComp == len(ab.ops)+ba.nrecv && h.b.nComp == len(ba.ops)+ab.nrecv
			}, 100*sim.Second)
			ab.check(t, label+" a->b")
			ba.check(t, label+" b->a")
			if h.icrcBad != 0 {
				t.Fatalf("%s: %d ICRC failures", label, h.icrcBad)
			}
			if s := h.a.conn.Stats(); s.Rewinds == 0 {
				t.Fatalf("%s: no go-back-N at all: the loss did not bite (%+v)", label, s)
			}
		}
	}
}

// goodput runs one long WRITE with random loss p on both directions and
// returns its goodput in bits per second, and the requester's stats.
func goodput(t *testing.T, p float64, seed uint64, hc harnessConfig, size int) (float64, ConnStats) {
	t.Helper()
	hc.noTrace = true
	h := newHarness(t, hc)
	h.dial()
	lkey, src := h.a.mem.add(0x1000, size, allAccess)
	rkey, dst := h.b.mem.add(0x4000_0000, size, allAccess)
	fill(src, 5)
	h.filter = lossy(p, seed)
	start := h.loop.Now()
	h.a.postSend(writeWR(1, lkey, 0x1000, size, rkey, 0x4000_0000))
	h.runUntil(func() bool { return len(h.a.comps) == 1 }, 100*sim.Second)
	if c := h.a.comps[0]; c.Status != transport.StatusOK || !bytes.Equal(src, dst) {
		t.Fatalf("loss %g seed %d: transfer failed: %+v", p, seed, c)
	}
	el := h.loop.Now() - start
	return float64(size) * 8 / el.Seconds(), h.a.conn.Stats()
}

// TestGoodputCollapsesWithLoss measures a long WRITE at 100 Gb/s over a
// 10us round trip, the kind of path RoCE runs on, with random loss in both
// directions, and compares it with the go-back-N model of
// shared/research/protocol.md section 3: each loss costs the W packets in
// flight behind it, so goodput <= (1-p)/(1+pW) of loss-free, and lost NAKs
// and lost retransmissions cost a whole ACK timeout on top.
func TestGoodputCollapsesWithLoss(t *testing.T) {
	hc := harnessConfig{rate: 100e9, delay: 5 * sim.Microsecond, opts: Options{Timeout: 8}}
	const size = 16 << 20
	base, _ := goodput(t, 0, 1, hc, size)
	// W: packets sent between a lost packet and its NAK's arrival: the
	// next packet's serialization, two propagation delays, the NAK's
	// serialization, in units of one data packet's serialization.
	pkt := float64(4096 + 12 + 16 + 4 + ipUDPOverhead)
	ser := pkt * 8 / hc.rate
	nak := float64(ib.BTHSize+ib.AETHSize+ib.ICRCSize+ipUDPOverhead) * 8 / hc.rate
	w := (ser + 2*hc.delay.Seconds() + nak) / ser
	seeds := 4
	if testing.Short() {
		seeds = 2
	}
	for _, p := range []float64{0.001, 0.01, 0.05} {
		var sum float64
		var timeouts, rewinds uint64
		for seed := uint64(1); seed <= uint64(seeds); seed++ {
			g, s := goodput(t, p, seed, hc, size)
			sum += g
			timeouts += s.Timeouts
			rewinds += s.Rewinds
		}
		ratio := sum / float64(seeds) / base
		model := (1 - p) / (1 + p*w)
		t.Logf("loss %5.1f%%: goodput %.3f of loss-free (%.1f Gb/s; loss-free %.1f Gb/s); GBN model without timeouts %.3f (W=%.1f); %d rewinds, %d timeouts over %d runs",
			p*100, ratio, ratio*base/1e9, base/1e9, model, w, rewinds, timeouts, seeds)
		// The bound is an expectation: assert it where enough losses happen
		// for the average to mean something.
		if losses := p * float64(seeds*size/4096); losses >= 50 && ratio > model*1.02 {
			t.Errorf("loss %g: goodput ratio %.3f above the go-back-N bound %.3f", p, ratio, model)
		}
		if p >= 0.01 && ratio > 0.99*0.9 {
			t.Errorf("loss %g: goodput ratio %.3f is not far below 0.99", p, ratio)
		}
		if ratio <= 0 || math.IsNaN(ratio) {
			t.Errorf("loss %g: no goodput", p)
		}
	}
}
