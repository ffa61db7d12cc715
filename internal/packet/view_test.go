package packet

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestShowMatchesExpand shows header-only packets of random lengths and
// hole positions one after another in the pool's lent buffer and checks
// each against Expand of a copy: the same bytes (the elided ones zeros,
// whatever the packet shown before wrote there) and runs (at the same
// place in the packet), and the packet's ID, flow tag and scratch fields.
// Every other packet has the last one's layout with other bytes (Show
// then writes over the last packet's bytes instead of clearing them).
func TestShowMatchesExpand(t *testing.T) {
	pool := NewPool()
	rng := rand.New(rand.NewPCG(3, 4))
	var n, hole, at int
	for i := range 500 {
		if i%2 == 0 {
			n = 40 + rng.IntN(MaxSize-40)
			hole = 1 + rng.IntN(n-20)
			at = rng.IntN(n - hole + 1)
		}
		b := pool.Get(n)
		b.SetLen(n)
		d := b.Data()
		for j := range d {
			d[j] = byte(1 + rng.IntN(255))
		}
		clear(d[at : at+hole])
		base, _ := b.Offset(d)
		b.Synthetic = append(b.Synthetic, Run{Off: int32(base + at), Len: int32(hole), Stream: uint64(i)})
		b.Hop, b.Stamp, b.Flow = i, 7, FlowTag{Src: uint32(i), Valid: true}
		h := b.Elide(at, hole)

		v := pool.Show(h)
		if v == nil {
			t.Fatalf("packet %d: Show of a header-only packet gave nil", i)
		}
		if pool.Show(h) != nil {
			t.Fatalf("packet %d: Show lent its buffer twice", i)
		}
		e := pool.Copy(h).Expand()
		if !bytes.Equal(v.Data(), e.Data()) {
			t.Fatalf("packet %d (%d bytes, hole %d at %d): shown bytes differ from expanded", i, n, hole, at)
		}
		if v.ID != h.ID || v.Hop != h.Hop || v.Stamp != h.Stamp || v.Flow != h.Flow {
			t.Fatalf("packet %d: shown fields %d %d %d %+v, the packet's %d %d %d %+v", i, v.ID, v.Hop, v.Stamp, v.Flow, h.ID, h.Hop, h.Stamp, h.Flow)
		}
		vb, _ := v.Offset(v.Data())
		eb, _ := e.Offset(e.Data())
		if len(v.Synthetic) != 1 || len(e.Synthetic) != 1 || v.Synthetic[0].Off-int32(vb) != e.Synthetic[0].Off-int32(eb) || v.Synthetic[0].Len != e.Synthetic[0].Len {
			t.Fatalf("packet %d: shown runs %v (base %d), expanded %v (base %d)", i, v.Synthetic, vb, e.Synthetic, eb)
		}
		pool.Unshow()
		e.Free()
		h.Free()
	}
	whole := pool.Get(100)
	whole.SetLen(100)
	if pool.Show(whole) != nil {
		t.Error("Show of a packet holding all its bytes lent the buffer")
	}
	whole.Free()
	if pool.Outstanding() != 0 {
		t.Errorf("%d buffers outstanding: Show must not take any from the pool", pool.Outstanding())
	}
}

// TestShowNoAllocs: showing a packet allocates nothing once the lent
// buffer exists and its runs slice has grown.
func TestShowNoAllocs(t *testing.T) {
	pool := NewPool()
	b := pool.Get(4096)
	b.SetLen(4096)
	b.Synthetic = append(b.Synthetic, Run{Off: Headroom + 100, Len: 3900})
	h := b.Elide(100, 3900)
	pool.Show(h)
	pool.Unshow()
	if a := testing.AllocsPerRun(100, func() {
		pool.Show(h)
		pool.Unshow()
	}); a != 0 {
		t.Errorf("Show allocates %.1f times per packet", a)
	}
}
