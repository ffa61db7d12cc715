package softnic

import (
	"bytes"
	"testing"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// TestLazyZerosOnTheWire: MetaRoCE gathers synthetic payload with
// ReadLazy, which leaves its zeros unwritten, into buffers whose bytes are
// stale. Packets that travel header-only need none of them; every packet
// that leaves whole (a short one copied out, one whose runs are not one
// range) still carries zeros under its content runs, its CRC checks at
// the peer, and every WRITE lands exactly.
func TestLazyZerosOnTheWire(t *testing.T) {
	p := newPair(t, 1, transportCases()[2].protos)
	rw := transport.AccessLocalWrite | transport.AccessRemoteWrite | transport.AccessRemoteRead
	src, dst := p.connectMode(t, 64<<10, rw, transport.MetaRoCE, PayloadSynthetic)
	src.mr.Fill(0, 64<<10, 7)
	real := bytes.Repeat([]byte{0x5a}, 500)
	srcBytes, _ := src.pd.Register(real, rw)
	dstBytes, _ := dst.pd.Register(make([]byte, 4096), rw)

	// Stale bytes in every buffer the NIC builds packets in.
	var stale []*packet.Buffer
	for range 64 {
		b := p.pool.Get(IPv4UDPSize + p.a.mtu + transport.HeaderRoom)
		b.SetLen(IPv4UDPSize + p.a.mtu + transport.HeaderRoom)
		for i := range b.Data() {
			b.Data()[i] = 0xa5
		}
		stale = append(stale, b)
	}
	for _, b := range stale {
		b.Free()
	}

	var whole, elided int
	p.ab[0].seen = func(b *packet.Buffer) {
		if _, n := b.Hole(); n > 0 {
			elided++
			return
		}
		if len(b.Synthetic) == 0 {
			return
		}
		whole++
		base, _ := b.Offset(b.Data())
		for _, r := range b.Synthetic {
			s, e := int(r.Off)-base, min(int(r.Off+r.Len)-base, b.Len())
			if i := bytes.IndexFunc(b.Data()[s:e], func(r rune) bool { return r != 0 }); i >= 0 {
				t.Errorf("packet %d: byte %d under a content run is not zero", b.ID, s+i)
				return
			}
		}
	}
	write := func(name string, to *MR, sges ...transport.SGE) {
		t.Helper()
		wr := transport.WorkRequest{ID: 1, Op: transport.OpWrite, RemoteAddr: to.Addr(), RKey: to.RKey(), NumSGE: len(sges)}
		copy(wr.SGL[:], sges)
		if err := src.c.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		if wc := p.waitCompletion(t, src.cq, 100*sim.Millisecond); wc.Status != transport.StatusOK {
			t.Fatalf("%s: completion %+v", name, wc)
		}
	}

	// Short: copied out of its buffer.
	write("300 bytes", dst.mr, src.mr.SGE(0, 300))
	// Full packets and a 700-byte last chunk: header-only.
	write("3 packets and 700 bytes", dst.mr, src.mr.SGE(0, 3*4096+700))
	if !dst.mr.Matches(0, 3*4096+700, 7) {
		t.Fatalf("synthetic WRITE differs at byte %d", dst.mr.FirstDiff(0, 3*4096+700, 7))
	}
	// Content, real bytes, content: two ranges of runs, sent whole.
	write("mixed", dstBytes, src.mr.SGE(0, 1000), srcBytes.SGE(0, 500), src.mr.SGE(1000, 1000))
	want := make([]byte, 2000)
	fill(want, 7)
	want = append(append(append([]byte(nil), want[:1000]...), real...), want[1000:]...)
	if got := dstBytes.Bytes()[:2500]; !bytes.Equal(got, want) {
		t.Fatalf("mixed WRITE: first difference at byte %d", firstDiffBytes(got, want))
	}
	if whole < 2 || elided < 3 {
		t.Errorf("%d packets with content sent whole, %d header-only: the test misses a case", whole, elided)
	}
	if s := dst.c.TransportStats(); s.ChecksumDrops != 0 || s.Retransmits != 0 {
		t.Errorf("receiver dropped %d packets on their CRC, sender retransmitted %d", s.ChecksumDrops, src.c.TransportStats().Retransmits)
	}
}

func firstDiffBytes(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestReadLazy: ReadLazy writes nothing where it records content in the
// packet being built; ZeroSpan then writes the zeros of every run in its
// slice outside the span it reports (its caller reads them) and leaves
// the span and all other bytes alone; finishTx's txZeros writes the span.
func TestReadLazy(t *testing.T) {
	nic, err := New(Config{Name: "n", Addr: addrA, Ports: 1, Sched: sim.NewLoop(), Pool: packet.NewPool()})
	if err != nil {
		t.Fatal(err)
	}
	pd := nic.AllocPD()
	rw := transport.AccessLocalWrite | transport.AccessRemoteWrite | transport.AccessRemoteRead
	syn, _ := pd.RegisterSynthetic(10000, rw)
	syn.Fill(0, 6000, 42)
	v := &memView{nic: nic, pd: pd}
	pool := packet.NewPool()
	for _, tc := range []struct {
		name   string
		reads  [][2]int // at, n
		slice  int      // b is Data()[:slice]
		at, n  int
		zeroed [][2]int // written by ZeroSpan
	}{
		{"one run", [][2]int{{64, 1500}}, 2000, 64, 1500, nil},
		{"two runs apart", [][2]int{{10, 100}, {200, 300}}, 2000, 200, 300, [][2]int{{10, 110}}},
		{"run past the slice", [][2]int{{64, 1500}}, 100, 64, 36, nil},
		{"run past the slice, one before", [][2]int{{10, 20}, {64, 1500}}, 100, 64, 36, [][2]int{{10, 30}}},
		{"runs all past the slice", [][2]int{{64, 1500}}, 50, 0, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := pool.Get(2100)
			b.SetLen(2100)
			d := b.Data()
			for i := range d {
				d[i] = 0xa5
			}
			nic.dmaTx, nic.txLazy, nic.txAsked = b, false, false
			for _, r := range tc.reads {
				if st := v.ReadLazy(d[r[0]:r[0]+r[1]], syn.LKey(), syn.Addr(), 0); st != transport.StatusOK {
					t.Fatal(st)
				}
			}
			if !bytes.Equal(d, bytes.Repeat([]byte{0xa5}, len(d))) {
				t.Fatal("ReadLazy wrote into the packet")
			}
			at, n := v.ZeroSpan(d[:tc.slice])
			if at != tc.at || n != tc.n {
				t.Fatalf("ZeroSpan = (%d, %d), want (%d, %d)", at, n, tc.at, tc.n)
			}
			want := bytes.Repeat([]byte{0xa5}, len(d))
			for _, z := range tc.zeroed {
				clear(want[z[0]:z[1]])
			}
			if i := firstDiffBytes(d, want); i < len(d) {
				t.Fatalf("after ZeroSpan byte %d is %#x, want %#x", i, d[i], want[i])
			}
			// The packet goes out whole: the span's zeros are written,
			// and nothing past the slice (the caller's to write).
			nic.txZeros(b, len(d))
			clear(want[at : at+n])
			if i := firstDiffBytes(d, want); i < len(d) {
				t.Fatalf("after txZeros byte %d is %#x, want %#x", i, d[i], want[i])
			}
			nic.dmaTx = nil
			b.Free()
		})
	}
}
