package softnic

import "slices"

// A synthetic region stores no bytes: its content is a list of extents,
// each saying that a range of the region holds a content stream (see
// pattern.go) from some position on. A range no extent covers is zero.
// The list is kept sorted, non-overlapping and merged (two touching
// extents that continue the same stream are one), so a message that
// arrived in any order, each chunk exactly at its offset with the content
// that belongs there, ends as exactly one extent, and a check of it is
// one comparison.
//
// Memory per region is one extent per run of differing content: a hole
// left by a packet still in flight costs an extent until it is filled.

// opaqueStream marks content that a synthetic region cannot name: real
// bytes that were not zero were placed into it. It never matches a check.
const opaqueStream = ^uint64(0)

// extent is a range [start, end) of a region holding stream from pos on.
type extent struct {
	start, end  uint64
	stream, pos uint64
}

// continues reports whether e2, starting where e ends, carries on e's
// stream without a seam.
func (e *extent) continues(e2 *extent) bool {
	return e.end == e2.start && e.stream == e2.stream && e.stream != opaqueStream &&
		e.pos+(e.end-e.start) == e2.pos
}

// contentMap is a synthetic region's content. The zero value is a region
// of zeros.
type contentMap struct {
	ext []extent
}

// first returns the index of the first extent that ends after a.
//
// Most regions hold one extent or a few, and most lookups fall in the
// first (a send reading its source) or past the last (a receive placing
// the next chunk in order): those are answered before the search.
func (m *contentMap) first(a uint64) int {
	n := len(m.ext)
	if n == 0 || m.ext[n-1].end <= a {
		return n
	}
	if m.ext[0].end > a {
		return 0
	}
	i, _ := slices.BinarySearchFunc(m.ext, a, func(e extent, a uint64) int {
		if e.end <= a {
			return -1
		}
		return 1
	})
	return i
}

// clear makes [a, b) zero and returns the index where an extent starting
// at a would go.
func (m *contentMap) clear(a, b uint64) int {
	i := m.first(a)
	for i < len(m.ext) && m.ext[i].start < b {
		e := &m.ext[i]
		switch {
		case e.start < a && e.end > b:
			// [a, b) is inside e: split it.
			right := extent{start: b, end: e.end, stream: e.stream, pos: e.pos + (b - e.start)}
			e.end = a
			m.ext = slices.Insert(m.ext, i+1, right)
			return i + 1
		case e.start < a:
			e.end = a
			i++
		case e.end > b:
			e.pos += b - e.start
			e.start = b
			return i
		default:
			m.ext = slices.Delete(m.ext, i, i+1)
		}
	}
	return i
}

// set makes [a, a+n) hold stream from pos on.
func (m *contentMap) set(a, n, stream, pos uint64) {
	if n == 0 {
		return
	}
	i := m.clear(a, a+n)
	e := extent{start: a, end: a + n, stream: stream, pos: pos}
	if i > 0 && m.ext[i-1].continues(&e) {
		m.ext[i-1].end = e.end
		if i < len(m.ext) && m.ext[i-1].continues(&m.ext[i]) {
			m.ext[i-1].end = m.ext[i].end
			m.ext = slices.Delete(m.ext, i, i+1)
		}
		return
	}
	if i < len(m.ext) && e.continues(&m.ext[i]) {
		m.ext[i].start, m.ext[i].pos = e.start, e.pos
		return
	}
	m.ext = slices.Insert(m.ext, i, e)
}

// matches reports whether [a, a+n) holds stream from position 0 on.
func (m *contentMap) matches(a, n, stream uint64) bool {
	if n == 0 {
		return true
	}
	i := m.first(a)
	if i == len(m.ext) {
		return false
	}
	e := &m.ext[i]
	return e.start <= a && e.end >= a+n && e.stream == stream && stream != opaqueStream && e.pos+(a-e.start) == 0
}

// zero reports whether [a, a+n) is all zero.
func (m *contentMap) zero(a, n uint64) bool {
	i := m.first(a)
	return i == len(m.ext) || m.ext[i].start >= a+n
}

// each calls fn for every extent piece within [a, a+n), in order, with
// the piece's offset from a; ranges between pieces are zero.
func (m *contentMap) each(a, n uint64, fn func(off, n, stream, pos uint64)) {
	b := a + n
	for i := m.first(a); i < len(m.ext) && m.ext[i].start < b; i++ {
		e := &m.ext[i]
		s, t := max(e.start, a), min(e.end, b)
		fn(s-a, t-s, e.stream, e.pos+(s-e.start))
	}
}
