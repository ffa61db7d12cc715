package packet

import "testing"

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
	if b2 != b || b2.Len() != 0 || b2.Cap() != smallSize {
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
