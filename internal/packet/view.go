package packet

// A header-only packet (Elide) reaches its receiver as its headers and a
// count of zeros; the receiver reads it as bytes. Expand gives it its bytes
// in a new buffer of the pool, which costs a pool buffer per packet, a 4
// KiB clear and a copy into memory that is cold by then. Show gives them
// in one buffer the pool keeps for the purpose, whose bytes stay zero
// except where the last packet shown wrote its headers and trailer: those
// few bytes are cleared at the next Show, not the whole payload.

// view is a pool's buffer for Show: dirty are the byte ranges of buf the
// last packet shown wrote; inUse is set from Show to Unshow.
type view struct {
	b     Buffer
	dirty [2][2]int
	inUse bool
}

// Show returns b's packet with all its bytes (its elided payload as
// zeros), as Expand does, but in a buffer the pool lends instead of a new
// one, and b stays as it is (its owner still frees it). The buffer has b's
// ID, flow tag, scratch fields and runs (b's slice, read-only); it is
// valid until Unshow, and its borrower must not free, keep, arm or change
// it. Show returns nil if b holds all
// its bytes, or if the pool's buffer is lent (Unshow not called yet: a
// receive inside a receive); use b, or Expand, then.
func (p *Pool) Show(b *Buffer) *Buffer {
	if b.hole == 0 {
		return nil
	}
	v := p.view
	if v == nil {
		v = &view{}
		v.b.buf = make([]byte, Headroom+MaxSize)
		p.view = v
	}
	if v.inUse || b.off+b.Len() > len(v.b.buf) {
		return nil
	}
	v.inUse = true
	e := &v.b
	// The packet sits where it sits in b's buffer, so its runs' offsets
	// are b's: the runs are b's slice itself, not a copy. It writes the
	// ranges w; the last packet's bytes are cleared unless w writes over
	// exactly them (consecutive packets of one size: the usual case).
	mid := b.holeAt + b.hole
	w := [2][2]int{{b.off, b.holeAt}, {mid, mid + b.end - b.holeAt}}
	if w != v.dirty {
		for _, r := range v.dirty {
			clear(e.buf[r[0]:r[1]])
		}
		v.dirty = w
	}
	e.off = b.off
	copy(e.buf[b.off:b.holeAt], b.buf[b.off:b.holeAt])
	e.end = w[1][1]
	copy(e.buf[mid:e.end], b.buf[b.holeAt:b.end])
	e.ID, e.Hop, e.Stamp, e.Flow = b.ID, b.Hop, b.Stamp, b.Flow
	e.Synthetic = b.Synthetic
	return e
}

// Unshow ends the loan of Show's buffer.
func (p *Pool) Unshow() {
	if p.view != nil {
		p.view.inUse = false
	}
}
