package packet

import "testing"

// TestBuildLends: Build lends one buffer again once it is released
// (Release, or Elide out of it), with a new ID each time as Get would
// draw; a buffer from Build that is kept or freed is never lent again
// while someone holds it; the pool's outstanding count stays right.
func TestBuildLends(t *testing.T) {
	pool := NewPool()
	ref := NewPool()
	b := pool.Build(4096 + 100)
	if r := ref.Get(4096 + 100); b.ID != r.ID || len(b.buf) != len(r.buf) {
		t.Fatalf("Build gave ID %d and %d bytes, Get %d and %d", b.ID, len(b.buf), r.ID, len(r.buf))
	}
	b.SetLen(3000)
	b.Synthetic = append(b.Synthetic, Run{Off: Headroom + 60, Len: 2900})
	h := b.Elide(60, 2900) // releases b
	c := pool.Build(4096 + 100)
	if c != b {
		t.Fatal("Build did not lend the buffer Elide released")
	}
	if c.ID != h.ID+1 || len(c.Synthetic) != 0 || c.Len() != 0 {
		t.Fatalf("lent again: ID %d (want %d), %d runs, length %d", c.ID, h.ID+1, len(c.Synthetic), c.Len())
	}
	// c is kept (sent as it is): the next Build must give another buffer.
	d := pool.Build(4096 + 100)
	if d == c {
		t.Fatal("Build lent a buffer its holder had not released")
	}
	d.Release()
	if e := pool.Build(4096 + 100); e != d {
		t.Fatal("Build did not lend the buffer Release returned")
	} else {
		e.Release()
	}
	c.Free() // an ordinary buffer now: to the free list
	if g := pool.Get(4096 + 100); g != c {
		t.Fatal("a kept buffer from Build did not go to the free list")
	} else {
		g.Free()
	}
	// A size Build does not lend for.
	s := pool.Build(100)
	if s2 := pool.Build(100); s2 == s {
		t.Fatal("Build lent a small buffer twice")
	} else {
		s2.Release()
	}
	s.Release()
	h.Free()
	if pool.Outstanding() != 0 {
		t.Errorf("%d buffers outstanding", pool.Outstanding())
	}
	if a := testing.AllocsPerRun(100, func() {
		x := pool.Build(4096 + 100)
		x.Release()
	}); a != 0 {
		t.Errorf("Build and Release allocate %.1f times", a)
	}
}
