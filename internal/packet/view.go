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
	for _, r := range v.dirty {
		clear(e.buf[r[0]:r[1]])
	}
	// The packet sits where it sits in b's buffer, so its runs' offsets
	// are b's: the runs are b's slice itself, not a copy.
	e.off = b.off
	pre := copy(e.buf[e.off:], b.buf[b.off:b.holeAt])
	mid := e.off + pre + b.hole
	e.end = mid + copy(e.buf[mid:], b.buf[b.holeAt:b.end])
	v.dirty = [2][2]int{{e.off, e.off + pre}, {mid, e.end}}
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
