package packet

// A NIC builds each packet in a buffer big enough for a full one, because
// it learns only afterwards whether the payload was synthetic; a
// synthetic one then moves to a tiny buffer as a header-only packet
// (Elide), and a short control packet to a small one, and the big buffer
// is done with after carrying a few header bytes. Build lends one big
// buffer for that again and again, instead of a trip through the free
// list (Get, Free) each time.

// Build returns an empty buffer for building a packet of up to size
// bytes, as Get does: a new ID, the size class Get would give, full
// headroom, no runs or flow tag. The pool lends the same buffer again
// once it is released (Release, or Elide, which releases the buffer it
// copies out of). A buffer from Build that is not released (sent as it
// is, or freed) is an ordinary buffer of the pool: the next Build lends
// another. So a buffer is never lent twice.
func (p *Pool) Build(size int) *Buffer {
	b := p.build
	if b != nil && !p.buildLent && len(b.buf) == Headroom+buildClass(size) {
		b.clean()
		p.outstanding++
	} else {
		if b != nil && !p.buildLent {
			p.stash(b) // idle, of another class
		}
		b = p.get(size)
		p.build = b
		if buildClass(size) == 0 {
			p.build = nil // tiny to small: not worth lending
		}
	}
	p.buildLent = true
	p.nextID++
	b.ID = p.nextID
	return b
}

// Release ends the use of b: the pool keeps a buffer from Build for the
// next Build, and frees any other (Free). b must not be used after.
func (b *Buffer) Release() {
	if p := b.pool; b == p.build && p.buildLent {
		if b.Timer.Armed() {
			panic("packet: Release of a buffer with an armed timer")
		}
		p.buildLent = false
		p.outstanding--
		return
	}
	b.Free()
}

// buildClass returns the buffer size (without headroom) of the class
// Build lends for size bytes: the medium or large class, or 0 for sizes
// that get a tiny, short or small buffer (never lent).
func buildClass(size int) int {
	switch {
	case size <= smallSize:
		return 0
	case size <= mediumSize:
		return mediumSize
	}
	return MaxSize
}
