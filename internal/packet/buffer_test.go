package packet

import (
	"testing"
	"unsafe"
)

func TestBufferPrependAndReuse(t *testing.T) {
	p := NewPool()
	b := p.Get(100)
	if !b.SetLen(4) {
		t.Fatal("SetLen failed")
	}
	copy(b.Data(), "data")
	copy(b.Prepend(3), "hdr")
	if got := string(b.Data()); got != "hdrdata" {
		t.Fatalf("Data() = %q", got)
	}
	b.Free()
	if p.Outstanding() != 0 {
		t.Fatalf("outstanding = %d", p.Outstanding())
	}
	b2 := p.Get(50)
	if b2 != b || b2.Len() != 0 || b2.Cap() != tinySize {
		t.Fatalf("buffer not reused clean: same=%v len=%d cap=%d", b2 == b, b2.Len(), b2.Cap())
	}
	big := p.Get(4096 + 100)
	if big.Cap() < 4196 {
		t.Fatalf("large cap %d", big.Cap())
	}
	if big.SetLen(big.Cap() + 1) {
		t.Fatal("SetLen past capacity accepted")
	}
	c := p.Copy(b2)
	if c == b2 || c.ID == b2.ID {
		t.Fatal("copy shares identity")
	}
}

func TestPoolNoAllocSteadyState(t *testing.T) {
	p := NewPool()
	p.Get(4000).Free()
	p.Get(64).Free()
	n := testing.AllocsPerRun(1000, func() {
		b := p.Get(4000)
		b.SetLen(4000)
		b.Prepend(28)
		a := p.Get(64)
		a.Free()
		b.Free()
	})
	if n != 0 {
		t.Fatalf("allocs per run = %v, want 0", n)
	}
}

// elidable returns a framed packet of n bytes: 92 bytes of headers, a
// zero payload under one synthetic run, a 4-byte trailer.
func elidable(p *Pool, n int) *Buffer {
	b := p.Get(n)
	b.SetLen(n)
	d := b.Data()
	for i := range d {
		d[i] = byte(i*7 + 1)
	}
	clear(d[92 : n-4])
	off, _ := b.Offset(d[92:])
	b.Synthetic = append(b.Synthetic, Run{Off: int32(off), Len: int32(n - 96), Stream: 42, Pos: 4096})
	b.Flow = FlowTag{Src: 1, DstAddr: 2, Valid: true, Dst: 3}
	b.Hop, b.Stamp = 5, 6
	return b
}

func TestElideExpand(t *testing.T) {
	p := NewPool()
	b := elidable(p, 4096+96)
	want := append([]byte(nil), b.Data()...)
	id := b.ID
	e := b.Elide(92, 4096)
	if e.Len() != len(want) || len(e.Data()) != 96 || e.Cap() > 512 {
		t.Fatalf("header-only packet: len %d, %d bytes held, cap %d", e.Len(), len(e.Data()), e.Cap())
	}
	if at, n := e.Hole(); at != 92 || n != 4096 {
		t.Fatalf("Hole() = %d, %d", at, n)
	}
	if e.ID != id || e.Hop != 5 || e.Stamp != 6 || !e.Flow.Valid || e.Flow.Dst != 3 {
		t.Fatalf("identity not kept: id %d/%d hop %d stamp %d flow %+v", e.ID, id, e.Hop, e.Stamp, e.Flow)
	}
	if got := e.AppendBytes(nil); string(got) != string(want) {
		t.Fatal("AppendBytes differs from the packet")
	}
	// Headers prepended in front keep the hole where it was.
	copy(e.Prepend(2), "ip")
	want = append([]byte("ip"), want...)
	c := p.Copy(e)
	if c.ID == e.ID || c.Len() != e.Len() || string(c.AppendBytes(nil)) != string(want) {
		t.Fatal("Copy of a header-only packet differs")
	}
	c.Free()
	x := e.Expand()
	if string(x.Data()) != string(want) || x.Len() != len(want) || x.ID != id {
		t.Fatal("Expand does not restore the packet")
	}
	if at, n := x.Hole(); at != 0 || n != 0 {
		t.Fatalf("expanded packet has a hole %d, %d", at, n)
	}
	// The run names the same bytes: 2+92 from the front.
	r := x.Synthetic[0]
	if off, _ := x.Offset(x.Data()[94:]); int(r.Off) != off || r.Len != 4096 || r.Stream != 42 || r.Pos != 4096 {
		t.Fatalf("run %+v, payload at %d", r, off)
	}
	x.Free()
	if p.Outstanding() != 0 {
		t.Fatalf("outstanding %d", p.Outstanding())
	}
	// The replacements took no ID: the next packet gets the next one.
	if n := p.Get(10); n.ID != id+2 { // id+1 was the copy
		t.Fatalf("next ID %d, want %d", n.ID, id+2)
	}
}

func TestTrimIntoHolePanics(t *testing.T) {
	p := NewPool()
	e := elidable(p, 200).Elide(92, 104)
	e.TrimFront(92) // up to the hole is fine
	defer func() {
		err, _ := recover().(error)
		if err == nil || err.Error() != "packet: trim 1 bytes into an elided payload" {
			t.Fatalf("TrimFront into the elided bytes: panic %v", err)
		}
	}()
	e.TrimFront(1)
}

// TestPrependPastHeadroomPanics: Prepend past the headroom panics with
// what it was asked and what there was.
func TestPrependPastHeadroomPanics(t *testing.T) {
	b := NewPool().Get(1000)
	b.Prepend(Headroom) // all of it is fine
	defer func() {
		err, _ := recover().(error)
		if err == nil || err.Error() != "packet: prepend 1 bytes with 0 headroom" {
			t.Fatalf("Prepend past the headroom: panic %v", err)
		}
	}()
	b.Prepend(1)
}

func TestElideNoAllocSteadyState(t *testing.T) {
	p := NewPool()
	elidable(p, 4192).Elide(92, 4096).Expand().Free()
	n := testing.AllocsPerRun(1000, func() {
		b := p.Get(4192)
		b.SetLen(4192)
		b.Synthetic = append(b.Synthetic, Run{Off: 300, Len: 4096})
		e := b.Elide(92, 4096)
		e.Prepend(28)
		e.Expand().Free()
	})
	if n != 0 {
		t.Fatalf("allocs per run = %v, want 0", n)
	}
}

// FuzzElide: eliding any zero range and expanding again gives back the
// packet, with its runs on the same bytes.
func FuzzElide(f *testing.F) {
	f.Add([]byte("0123456789abcdef"), uint16(4), uint16(8), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, at, n uint16, pre uint8) {
		if len(data) == 0 || len(data) > MaxSize {
			return
		}
		a, k := int(at)%len(data), int(n)
		if k == 0 || a+k > len(data) {
			return
		}
		p := NewPool()
		b := p.Get(len(data))
		b.SetLen(len(data))
		copy(b.Data(), data)
		clear(b.Data()[a : a+k])
		want := append([]byte(nil), b.Data()...)
		off, _ := b.Offset(b.Data()[a:])
		b.Synthetic = append(b.Synthetic, Run{Off: int32(off), Len: int32(k), Stream: 9})
		e := b.Elide(a, k)
		if e.Len() != len(want) || string(e.AppendBytes(nil)) != string(want) {
			t.Fatalf("header-only packet differs")
		}
		h := int(pre) % (e.off + 1) // all the headroom e's class has
		e.Prepend(h)
		x := e.Expand()
		if got := x.Data()[h:]; string(got) != string(want) {
			t.Fatalf("expanded packet differs")
		}
		if o, _ := x.Offset(x.Data()[h+a:]); len(x.Synthetic) != 1 || int(x.Synthetic[0].Off) != o {
			t.Fatalf("run moved: %+v, payload at %d", x.Synthetic, o)
		}
		x.Free()
		if p.Outstanding() != 0 {
			t.Fatalf("outstanding %d", p.Outstanding())
		}
	})
}

// A tiny packet (a header-only one, a short ACK) is one allocation: its
// bytes live in the Buffer, next to the fields every hop reads.
func TestTinyPacketOneAllocation(t *testing.T) {
	p := NewPool()
	if n := testing.AllocsPerRun(100, func() { p.Get(tinySize) }); n != 1 {
		t.Errorf("a new tiny buffer takes %v allocations, want 1", n)
	}
	b := p.Get(tinySize)
	if off, ok := b.Offset(b.Tail()[:1]); !ok || off != tinyHeadroom || b.Cap() != tinySize {
		t.Errorf("tiny buffer: offset %d (%v), cap %d", off, ok, b.Cap())
	}
	// The Go allocator's size classes near it are 320, 352 and 384 bytes.
	if n := unsafe.Sizeof(tinyBuffer{}); n > 352 {
		t.Errorf("a tiny buffer is %d bytes, want at most 352 (an allocation of 352)", n)
	}
	// The NIC prepends UDP and IPv4 to a packet the transport wrote.
	if tinyHeadroom < 28 {
		t.Errorf("tiny headroom %d: no room for UDP and IPv4 (28 bytes)", tinyHeadroom)
	}
	b.Prepend(tinyHeadroom)
	b.Free()
	// The short class (tiny < size <= 256) likewise, in the 480-byte
	// allocation class, not a Buffer and a separate 640-byte slice.
	if n := testing.AllocsPerRun(100, func() { p.Get(tinySize + 1) }); n != 1 {
		t.Errorf("a new short buffer takes %v allocations, want 1", n)
	}
	s := p.Get(shortSize)
	if off, ok := s.Offset(s.Tail()[:1]); !ok || off != tinyHeadroom || s.Cap() != shortSize {
		t.Errorf("short buffer: offset %d (%v), cap %d", off, ok, s.Cap())
	}
	if n := unsafe.Sizeof(shortBuffer{}); n > 480 {
		t.Errorf("a short buffer is %d bytes, want at most 480 (an allocation of 480)", n)
	}
	s.Prepend(tinyHeadroom)
	s.Free()
	if got := p.Get(shortSize + 1); got.Cap() != smallSize {
		t.Errorf("a %d-byte packet got a buffer of %d, want the small class's %d", shortSize+1, got.Cap(), smallSize)
	}
}

// TestBalance: free buffers pile up in the pool packets are freed into
// (one-way traffic between partitions); Balance hands half the difference
// of each class to the emptiest pool, whose Gets then reuse them, and
// leaves pools within balanceSlack alone.
func TestBalance(t *testing.T) {
	a, b := NewPool(), NewPool()
	var bufs []*Buffer
	for range 200 {
		x := b.Get(64) // made by b's partition, freed by a's
		x.Rehome(a)
		bufs = append(bufs, x)
	}
	for _, x := range bufs {
		x.Free()
	}
	if a.FreeCount() != 200 || b.FreeCount() != 0 {
		t.Fatalf("before: %d and %d free", a.FreeCount(), b.FreeCount())
	}
	Balance([]*Pool{a, b})
	if a.FreeCount() != 100 || b.FreeCount() != 100 {
		t.Fatalf("after: %d and %d free, want 100 and 100", a.FreeCount(), b.FreeCount())
	}
	allocated := b.Allocated()
	x := b.Get(64)
	if b.Allocated() != allocated {
		t.Errorf("a Get after Balance allocated: %d -> %d", allocated, b.Allocated())
	}
	x.Free()
	if b.FreeCount() != 100 || a.FreeCount() != 100 {
		t.Errorf("a moved buffer went back to the wrong pool: %d and %d free", a.FreeCount(), b.FreeCount())
	}
	c := NewPool()
	var held []*Buffer
	for range balanceSlack {
		held = append(held, c.Get(64))
	}
	for _, x := range held {
		x.Free()
	}
	Balance([]*Pool{c, NewPool()})
	if c.FreeCount() != balanceSlack {
		t.Errorf("a difference of %d moved buffers: %d left", balanceSlack, c.FreeCount())
	}
}
