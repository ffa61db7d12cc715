package softnic

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// label is what the reference model keeps per byte: the stream and the
// position in it, or stream 0 for zero.
type label struct{ stream, pos uint64 }

// TestContentMapModel checks the extent list against a byte-by-byte model
// under random writes, clears and out-of-order chunk placement: every
// byte's content agrees, the list stays sorted, disjoint and merged, and
// matches/zero answer as the model does.
func TestContentMapModel(t *testing.T) {
	const size = 300
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		var m contentMap
		model := make([]label, size)
		for op := 0; op < 40; op++ {
			a := uint64(r.IntN(size))
			n := uint64(r.IntN(size-int(a)) + 1)
			switch r.IntN(3) {
			case 0:
				m.clear(a, a+n)
				for i := a; i < a+n; i++ {
					model[i] = label{}
				}
			default:
				s := uint64(r.IntN(3) + 1)
				pos := uint64(r.IntN(50))
				m.set(a, n, s, pos)
				for i := a; i < a+n; i++ {
					model[i] = label{s, pos + i - a}
				}
			}
			checkMap(t, &m, model)
		}
	}
	// A message placed chunk by chunk in a random order ends as one
	// extent that matches.
	var m contentMap
	order := r.Perm(16)
	for _, k := range order {
		m.set(uint64(1000+k*64), 64, 7, uint64(k*64))
	}
	if len(m.ext) != 1 || !m.matches(1000, 1024, 7) || m.matches(1000, 1025, 7) || m.matches(1064, 64, 7) {
		t.Fatalf("out-of-order placement: %+v", m.ext)
	}
}

func checkMap(t *testing.T, m *contentMap, model []label) {
	t.Helper()
	got := make([]label, len(model))
	for i, e := range m.ext {
		if e.start >= e.end {
			t.Fatalf("empty extent %+v", e)
		}
		if i > 0 && (m.ext[i-1].end > e.start || m.ext[i-1].continues(&e)) {
			t.Fatalf("extents %+v and %+v overlap or should merge", m.ext[i-1], e)
		}
		for k := e.start; k < e.end; k++ {
			got[k] = label{e.stream, e.pos + k - e.start}
		}
	}
	for i := range model {
		if got[i] != model[i] {
			t.Fatalf("byte %d holds %+v, want %+v (extents %+v)", i, got[i], model[i], m.ext)
		}
	}
	for a := 0; a < len(model); a += 7 {
		for _, n := range []int{1, 5, 40} {
			if a+n > len(model) {
				continue
			}
			z, match := true, model[a].stream != 0 && model[a].pos == 0
			for k := a; k < a+n; k++ {
				z = z && model[k].stream == 0
				match = match && model[k] == label{model[a].stream, uint64(k - a)}
			}
			if m.zero(uint64(a), uint64(n)) != z {
				t.Fatalf("zero(%d, %d) = %v, want %v", a, n, !z, z)
			}
			if model[a].stream != 0 && m.matches(uint64(a), uint64(n), model[a].stream) != match {
				t.Fatalf("matches(%d, %d) = %v, want %v", a, n, !match, match)
			}
		}
	}
}

// TestDMAMixedRegions moves content between every pair of region kinds
// through a packet and checks it arrives exactly, with bytes generated
// where a byte region receives a synthetic stream.
func TestDMAMixedRegions(t *testing.T) {
	nic, err := New(Config{Name: "n", Addr: addrA, Ports: 1, Sched: sim.NewLoop(), Pool: packet.NewPool()})
	if err != nil {
		t.Fatal(err)
	}
	pd := nic.AllocPD()
	const n = 5000
	rw := transport.AccessLocalWrite | transport.AccessRemoteWrite | transport.AccessRemoteRead
	mk := map[bool]func() *MR{
		false: func() *MR { mr, _ := pd.Register(make([]byte, n), rw); return mr },
		true:  func() *MR { mr, _ := pd.RegisterSynthetic(n, rw); return mr },
	}
	pool := packet.NewPool()
	v := &memView{nic: nic, pd: pd}
	for _, srcSyn := range []bool{false, true} {
		for _, dstSyn := range []bool{false, true} {
			src, dst := mk[srcSyn](), mk[dstSyn]()
			src.Fill(100, 3000, 42)
			// Two packets carry 100..1600 and 1600..3100, gathered at
			// odd offsets of the payload, placed in reverse order.
			var pkts [2]*packet.Buffer
			for i := range pkts {
				b := pool.Get(2000)
				b.SetLen(1600)
				nic.dmaTx = b
				if st := v.Read(b.Data()[13:13+1500], src.LKey(), src.Addr()+100+uint64(i*1500), 0); st != transport.StatusOK {
					t.Fatal(st)
				}
				nic.dmaTx = nil
				b.Prepend(28) // headers go on without moving the runs
				b.TrimFront(28)
				pkts[i] = b
			}
			for i := 1; i >= 0; i-- {
				nic.dmaRx = pkts[i]
				if st := v.Write(dst.RKey(), dst.Addr()+200+uint64(i*1500), pkts[i].Data()[13:13+1500], rw); st != transport.StatusOK {
					t.Fatal(st)
				}
				nic.dmaRx = nil
				pkts[i].Free()
			}
			if !srcSyn && dstSyn {
				// Real bytes cannot be named in a synthetic region:
				// they are counted and never match.
				if dst.Matches(200, 3000, 42) || nic.Stats().SyntheticOpaque != 2 {
					t.Errorf("bytes into a synthetic region: matches %v, stats %+v", dst.Matches(200, 3000, 42), nic.Stats())
				}
				continue
			}
			if !dst.Matches(200, 3000, 42) || !dst.IsZero(0, 200) || !dst.IsZero(3200, n-3200) || dst.Matches(200, 3000, 43) {
				t.Errorf("synthetic src %v, dst %v: content not moved exactly", srcSyn, dstSyn)
			}
			if srcSyn && dst.Matches(201, 2999, 42) {
				t.Errorf("a range starting mid-stream matches")
			}
		}
	}
	if s := nic.Stats(); s.SyntheticOpaque != 2 || s.SyntheticMaterialized != 0 {
		t.Errorf("stats %+v", s)
	}
}

// In synthetic payload mode a MetaRoCE data packet leaves the NIC
// header-only: its headers and CRC in a small buffer, its payload as a
// length (packet.Buffer.Elide); in bytes mode, and with RoCEv2 (whose
// ICRC the NIC computes over every byte), every packet holds its bytes.
// Either way the WRITE arrives whole.
func TestSyntheticDataSentHeaderOnly(t *testing.T) {
	for _, tc := range transportCases()[1:] {
		for _, mode := range []PayloadMode{PayloadBytes, PayloadSynthetic} {
			t.Run(fmt.Sprintf("%s/%v", tc.name, mode), func(t *testing.T) {
				p := newPair(t, 1, tc.protos)
				const size = 64 << 10
				src, dst := p.connectMode(t, size, transport.AccessLocalWrite|transport.AccessRemoteWrite, tc.kind, mode)
				src.mr.Fill(0, size, 7)
				var big, headerOnly, held int
				p.ab[0].seen = func(b *packet.Buffer) {
					if b.Len() < 4096 {
						return
					}
					big++
					if _, n := b.Hole(); n > 0 {
						headerOnly++
						held = max(held, len(b.Data()))
					}
				}
				wr := transport.WorkRequest{ID: 1, Op: transport.OpWrite, RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey(), NumSGE: 1}
				wr.SGL[0] = src.mr.SGE(0, size)
				if err := src.c.PostSend(&wr); err != nil {
					t.Fatal(err)
				}
				if wc := p.waitCompletion(t, src.cq, 100*sim.Millisecond); wc.Status != transport.StatusOK {
					t.Fatalf("completion %+v", wc)
				}
				if !dst.mr.Matches(0, size, 7) {
					t.Fatalf("destination differs at byte %d", dst.mr.FirstDiff(0, size, 7))
				}
				want := 0
				if mode == PayloadSynthetic && tc.kind == transport.MetaRoCE {
					want = big
				}
				if big < size/4096 || headerOnly != want || held > 128 {
					t.Errorf("%d data packets, %d header-only (want %d), holding up to %d bytes", big, headerOnly, want, held)
				}
			})
		}
	}
}

// TestZeroSpan: the DMA engine tells a transport which bytes of a packet
// are zeros standing for content (transport.ZeroSpanner), so it can
// checksum them without reading them: in a packet being built, the last
// contiguous range of runs Read recorded (bytes it zeroed); in a packet
// being received, the payload that travelled header-only. Bytes read from
// a byte region, zeros no run describes and packets that arrived whole
// report none.
func TestZeroSpan(t *testing.T) {
	nic, err := New(Config{Name: "n", Addr: addrA, Ports: 1, Sched: sim.NewLoop(), Pool: packet.NewPool()})
	if err != nil {
		t.Fatal(err)
	}
	pd := nic.AllocPD()
	rw := transport.AccessLocalWrite | transport.AccessRemoteWrite | transport.AccessRemoteRead
	syn, _ := pd.RegisterSynthetic(10000, rw)
	syn.Fill(0, 3000, 42)
	syn.Fill(3000, 3000, 43)
	byt, _ := pd.Register(make([]byte, 10000), rw)
	v := &memView{nic: nic, pd: pd}
	pool := packet.NewPool()
	type read struct {
		mr       *MR
		at, addr int
		n        int
	}
	for _, tc := range []struct {
		name  string
		reads []read
		slice [2]int // of Data()
		at, n int
	}{
		{"one run", []read{{syn, 64, 0, 1500}}, [2]int{0, 2000}, 64, 1500},
		{"two streams back to back", []read{{syn, 64, 2000, 2000}}, [2]int{0, 2100}, 64, 2000},
		{"clipped to the slice", []read{{syn, 64, 0, 1500}}, [2]int{0, 100}, 64, 36},
		{"slice inside the run", []read{{syn, 64, 0, 1500}}, [2]int{100, 200}, 0, 100},
		{"slice past the run", []read{{syn, 64, 0, 1500}}, [2]int{1564, 1600}, 0, 0},
		{"byte region", []read{{byt, 64, 0, 1500}}, [2]int{0, 2000}, 0, 0},
		{"zeros no run describes", []read{{syn, 64, 7000, 1500}}, [2]int{0, 2000}, 0, 0},
		{"two reads apart: the last", []read{{syn, 10, 0, 100}, {syn, 200, 100, 300}}, [2]int{0, 2000}, 200, 300},
		{"two reads touching: one span", []read{{syn, 10, 0, 100}, {syn, 110, 100, 300}}, [2]int{0, 2000}, 10, 400},
	} {
		b := pool.Get(2100)
		b.SetLen(2100)
		nic.dmaTx = b
		for _, r := range tc.reads {
			if st := v.Read(b.Data()[r.at:r.at+r.n], r.mr.LKey(), r.mr.Addr()+uint64(r.addr), 0); st != transport.StatusOK {
				t.Fatal(st)
			}
		}
		at, n := v.ZeroSpan(b.Data()[tc.slice[0]:tc.slice[1]])
		nic.dmaTx = nil
		if at != tc.at || n != tc.n {
			t.Errorf("%s: ZeroSpan = (%d, %d), want (%d, %d)", tc.name, at, n, tc.at, tc.n)
		}
		for i, x := range b.Data()[tc.slice[0]+at : tc.slice[0]+at+n] {
			if x != 0 {
				t.Fatalf("%s: byte %d of the span is %#x", tc.name, at+i, x)
			}
		}
		// The packet travels with that span elided, if it has one, and
		// arrives: the span seen from byte 5 on is the hole.
		want := [2]int{0, 0}
		if n > 0 {
			b = b.Elide(tc.slice[0]+at, n)
			want = [2]int{tc.slice[0] + at - 5, n}
		}
		b, shown := nic.showRx(b)
		nic.dmaRx = shown
		at, n = v.ZeroSpan(shown.Data()[5:])
		nic.dmaRx = nil
		if [2]int{at, n} != want {
			t.Errorf("%s: received: ZeroSpan = (%d, %d), want %v", tc.name, at, n, want)
		}
		if shown != b {
			nic.pool.Unshow()
		}
		b.Free()
	}
}

// TestContentMapFirst: first (with its shortcuts for the first and past
// the last extent) finds the first extent ending after a, as a scan does,
// at every a of random maps, before, inside, between and past extents.
func TestContentMapFirst(t *testing.T) {
	const size = 200
	r := rand.New(rand.NewPCG(5, 6))
	for round := 0; round < 300; round++ {
		var m contentMap
		for range r.IntN(8) {
			a := uint64(r.IntN(size))
			m.set(a, uint64(r.IntN(size-int(a))+1), uint64(r.IntN(3)+1), uint64(r.IntN(50)))
		}
		for a := uint64(0); a <= size+1; a++ {
			want := len(m.ext)
			for i, e := range m.ext {
				if e.end > a {
					want = i
					break
				}
			}
			if got := m.first(a); got != want {
				t.Fatalf("first(%d) = %d, want %d (extents %+v)", a, got, want, m.ext)
			}
		}
	}
}
