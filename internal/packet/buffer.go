// Package packet holds mrlab's packet buffers: byte slices with headroom so
// headers are prepended without copying, an embedded timer so a packet can
// be scheduled (propagation, jitter) without allocating, and a free list so
// steady-state forwarding allocates nothing.
package packet

import (
	"fmt"
	"unsafe"

	"github.com/mrlab/mrlab/internal/sim"
)

// Headroom is the room reserved in front of a packet for headers prepended
// later (UDP, IPv4, and a capture's link-layer header). 128 bytes covers the
// largest stack mrlab builds with room to spare. Tiny buffers (header-only
// and short control packets) have tinyHeadroom.
const Headroom = 128

// MaxSize is the largest packet (IPv4 header included) a buffer holds. It
// matches a 9000-byte jumbo MTU plus slack; the MetaRoCE default of 4096-byte
// payloads fits the small-jumbo class.
const MaxSize = 9216

// Size classes: control packets (ACKs, probes) are small and many, so they
// get small buffers; data packets of a 4096-byte path MTU (the RDMA
// default) with their headers fit the medium class, so they do not carry
// a jumbo frame's worth of memory each (half the memory, and half the
// cache footprint, of packets in flight).
//
// The tiny class holds header-only packets (Elide) and short control
// packets in the same allocation as the Buffer itself: a switch reads a
// packet's fields and its IPv4 header together, so they share cache
// lines instead of costing a miss each, and each takes about half the
// memory of a separate small buffer. The short class does the same for
// control packets up to 256 bytes (ACKs with SACK records).
const (
	tinySize   = 128
	shortSize  = 256
	smallSize  = 512
	mediumSize = 4096 + 256
)

// tinyHeadroom is the tiny and short classes' headroom, smaller than
// Headroom: the only headers prepended to them are a NIC's UDP and IPv4
// ones (28 bytes; Prepend panics past it). With 32 a tiny buffer, its
// Buffer fields included, takes a 352-byte allocation (384 with 64, 448
// with Headroom) and a short one 480 (512): one per packet in flight, and
// a 1,024-host run holds about 40,000 (TestTinyPacketOneAllocation).
const tinyHeadroom = 32

// tinyBuffer is a Buffer with its bytes inline.
type tinyBuffer struct {
	Buffer
	bytes [tinyHeadroom + tinySize]byte
}

// shortBuffer is the short class's Buffer with its bytes inline: control
// packets longer than tiny (a MetaRoCE ACK with a further SACK record is
// 144 bytes) in one 512-byte allocation, where a small buffer is two
// (its Buffer and 640 bytes: 832).
type shortBuffer struct {
	Buffer
	bytes [tinyHeadroom + shortSize]byte
}

// Buffer is one packet. Data() is the packet from its first byte (the IPv4
// header once framed). The zero value is not usable; get buffers from a Pool.
//
// A header-only packet (Elide) stands for a packet whose payload is a run
// of zero bytes that exist in no buffer: a NIC in synthetic payload mode
// sends its headers, trailer and content runs, and the length it would
// have. Len and every header's length fields count the elided bytes; Data
// returns the bytes that exist, and Hole says where the zeros go. What
// needs the whole packet's bytes uses AppendBytes or Expand.
//
// A Buffer is owned by exactly one component at a time; the fabric passes
// ownership along with the pointer, and whoever drops or consumes the packet
// calls Free.
type Buffer struct {
	buf      []byte
	off, end int
	pool     *Pool
	// hole zero bytes are elided just before buf[holeAt] (0: none).
	hole, holeAt int

	// Timer lets the current owner schedule this packet (e.g. its arrival at
	// the far end of a link) without an allocation.
	Timer sim.Timer

	// ID is a per-pool serial number, stable for the life of the packet
	// (copies made by a duplicating link get a new one). Traces use it.
	ID uint64
	// Hop is scratch space for the current owner (a link stores the egress
	// port here, a NIC the connection).
	Hop int
	// Stamp is scratch time for the current owner (enqueue time, send time).
	Stamp sim.Time

	// Flow is the fabric's note on the packet's headers, made once when
	// it enters the fabric; see FlowTag.
	Flow FlowTag

	// Synthetic describes payload bytes that stand for memory content
	// without holding it (a NIC's synthetic payload mode): each run says
	// which content stream a range of the buffer carries. Bytes outside
	// every run are the packet's real bytes. Get empties it; Copy carries
	// it along. In a header-only packet the offsets count the elided
	// bytes as if they were there.
	Synthetic []Run
}

// FlowTag is what the fabric learned from a packet's IPv4 and UDP headers
// when it entered: that they are valid, the 5-tuple (what ECMP hashes)
// and the destination host. Switches trust it instead of validating and
// parsing at every hop. Who changes the addresses, protocol or ports must
// clear it.
type FlowTag struct {
	Src, DstAddr uint32
	SPort, DPort uint16
	Proto        uint8
	Valid        bool
	Dst          int32 // the fabric's host index, -1 for none
}

// Run is a range of a packet that carries synthetic content: Len bytes
// from position Pos of the content stream Stream. Off is the range's
// start in the buffer (see Buffer.Offset), so runs stay put when headers
// are prepended or trimmed.
type Run struct {
	Off, Len int32
	Stream   uint64
	Pos      uint64
}

// Offset returns where s starts in b's buffer, counted so that Prepend
// and TrimFront do not move it, and whether s lies within the buffer at
// all. It is how a component that was handed a slice of the packet (a
// transport writing a payload) names a range of it.
func (b *Buffer) Offset(s []byte) (int, bool) {
	if len(s) == 0 || len(b.buf) == 0 {
		return 0, false
	}
	d := uintptr(unsafe.Pointer(unsafe.SliceData(s))) - uintptr(unsafe.Pointer(unsafe.SliceData(b.buf)))
	if d > uintptr(len(b.buf)) || uintptr(len(s)) > uintptr(len(b.buf))-d {
		return 0, false
	}
	return int(d), true
}

// Data returns the packet bytes: of a header-only packet, the bytes that
// exist (see Hole).
func (b *Buffer) Data() []byte { return b.buf[b.off:b.end] }

// Len returns the packet length, elided bytes included.
func (b *Buffer) Len() int { return b.end - b.off + b.hole }

// Hole reports the zero bytes a header-only packet elides: n of them
// belong before Data()[at]. n is 0 for a packet that holds all its bytes.
func (b *Buffer) Hole() (at, n int) {
	if b.hole == 0 {
		return 0, 0
	}
	return b.holeAt - b.off, b.hole
}

// AppendBytes appends the whole packet to dst, zeros for elided bytes.
func (b *Buffer) AppendBytes(dst []byte) []byte {
	if b.hole == 0 {
		return append(dst, b.Data()...)
	}
	dst = append(dst, b.buf[b.off:b.holeAt]...)
	dst = append(dst, make([]byte, b.hole)...)
	return append(dst, b.buf[b.holeAt:b.end]...)
}

// Prepend grows the packet by n bytes at the front and returns them.
// It panics if the headroom is exhausted: that is a programming error, never
// an input-driven condition.
func (b *Buffer) Prepend(n int) []byte {
	if n > b.off {
		panic(prependError{n, b.off})
	}
	b.off -= n
	return b.buf[b.off : b.off+n]
}

// TrimFront removes n bytes from the front (a header that has been read).
// It panics if n reaches a header-only packet's elided bytes: Expand it
// first.
func (b *Buffer) TrimFront(n int) {
	if b.hole != 0 && b.off+n > b.holeAt {
		panic(trimError(n))
	}
	if n > b.end-b.off {
		n = b.end - b.off
	}
	b.off += n
}

// SetLen sets the packet length counted from the current front, within the
// buffer's capacity; it returns false if n does not fit. A header-only
// packet becomes an ordinary one of n bytes.
func (b *Buffer) SetLen(n int) bool {
	if n < 0 || b.off+n > len(b.buf) {
		return false
	}
	b.end = b.off + n
	b.hole, b.holeAt = 0, 0
	return true
}

// prependError and trimError are Prepend's and TrimFront's panics: values
// formatted only if printed, so that those two (a NIC frames and unframes
// every packet with them) stay within the compiler's inlining budget.
type (
	prependError struct{ n, headroom int }
	trimError    int
)

func (e prependError) Error() string {
	return fmt.Sprintf("packet: prepend %d bytes with %d headroom", e.n, e.headroom)
}

func (e trimError) Error() string {
	return fmt.Sprintf("packet: trim %d bytes into an elided payload", int(e))
}

// Tail returns the writable space after the packet's current end, for
// appending.
func (b *Buffer) Tail() []byte { return b.buf[b.end:] }

// Reset empties the packet, restoring full headroom.
func (b *Buffer) Reset() {
	h := Headroom
	if l := len(b.buf); l == tinyHeadroom+tinySize || l == tinyHeadroom+shortSize {
		h = tinyHeadroom
	}
	b.off, b.end, b.hole, b.holeAt = h, h, 0, 0
}

// Cap returns the largest length the packet may grow to (from the current
// front).
func (b *Buffer) Cap() int { return len(b.buf) - b.off }

// Free returns the buffer to its pool. The buffer must not be used after.
func (b *Buffer) Free() {
	if b.Timer.Armed() {
		panic("packet: Free of a buffer with an armed timer")
	}
	b.pool.put(b)
}

// Rehome makes p the pool b returns to when freed: a packet handed from one
// partition's loop to another's (a cut link) is freed into the receiving
// partition's pool, which its goroutine owns. The pools' outstanding counts
// then differ by the packets that moved; their sum is still right.
func (b *Buffer) Rehome(p *Pool) { b.pool = p }

// Pool is a free list of buffers in five size classes. It is not safe for
// concurrent use: each event loop (and each live I/O goroutine) has its own.
type Pool struct {
	tiny, short, small, medium, large []*Buffer
	nextID                            uint64
	allocated                         int
	outstanding                       int
	// view is the buffer Show lends (view.go); nil until first used.
	view *view
}

// NewPool returns an empty pool.
func NewPool() *Pool { return &Pool{} }

// NewPoolIDs returns an empty pool whose packet IDs count up from base+1:
// the pools of a partitioned lab take disjoint ranges, so an ID names one
// packet in the whole lab.
func NewPoolIDs(base uint64) *Pool { return &Pool{nextID: base} }

// Get returns an empty buffer that can hold a packet of size bytes (at most
// MaxSize) with full headroom in front.
func (p *Pool) Get(size int) *Buffer {
	b := p.get(size)
	p.nextID++
	b.ID = p.nextID
	return b
}

// get is Get without a new ID: for a buffer that replaces another and
// keeps its ID (Elide, Expand).
func (p *Pool) get(size int) *Buffer {
	if size > MaxSize {
		size = MaxSize
	}
	var b *Buffer
	if size <= tinySize {
		if n := len(p.tiny); n > 0 {
			b = p.tiny[n-1]
			p.tiny = p.tiny[:n-1]
		} else {
			p.allocated++
			t := &tinyBuffer{}
			t.buf, t.pool = t.bytes[:], p
			b = &t.Buffer
		}
	} else if size <= shortSize {
		if n := len(p.short); n > 0 {
			b = p.short[n-1]
			p.short = p.short[:n-1]
		} else {
			p.allocated++
			t := &shortBuffer{}
			t.buf, t.pool = t.bytes[:], p
			b = &t.Buffer
		}
	} else if size <= smallSize {
		if n := len(p.small); n > 0 {
			b = p.small[n-1]
			p.small = p.small[:n-1]
		} else {
			b = p.alloc(smallSize)
		}
	} else if size <= mediumSize {
		if n := len(p.medium); n > 0 {
			b = p.medium[n-1]
			p.medium = p.medium[:n-1]
		} else {
			b = p.alloc(mediumSize)
		}
	} else {
		if n := len(p.large); n > 0 {
			b = p.large[n-1]
			p.large = p.large[:n-1]
		} else {
			b = p.alloc(MaxSize)
		}
	}
	b.Hop, b.Stamp = 0, 0
	b.Timer.Own(nil)
	b.Synthetic = b.Synthetic[:0]
	b.Flow = FlowTag{}
	b.Reset()
	p.outstanding++
	return b
}

// Copy returns a new buffer holding a copy of src's packet bytes (a
// header-only packet stays one).
func (p *Pool) Copy(src *Buffer) *Buffer {
	b := p.Get(src.end - src.off)
	b.SetLen(copy(b.buf[b.off:], src.Data()))
	if src.hole != 0 {
		b.hole, b.holeAt = src.hole, src.holeAt-src.off+b.off
	}
	b.Flow = src.Flow
	b.copyRuns(src)
	return b
}

// copyRuns gives b src's runs, moved as b's front is from src's.
func (b *Buffer) copyRuns(src *Buffer) {
	shift := int32(b.off - src.off)
	for _, r := range src.Synthetic {
		r.Off += shift
		b.Synthetic = append(b.Synthetic, r)
	}
}

// Elide returns b's packet as a header-only one, without its bytes at..
// at+n of Data() (they must be zeros: a payload its synthetic runs
// describe), in a buffer of b's pool that fits what is left; b is freed.
// The packet keeps its ID, flow tag and scratch fields. b must hold all
// its bytes and no timer of it may be armed.
func (b *Buffer) Elide(at, n int) *Buffer {
	if b.hole != 0 || at < 0 || n <= 0 || at+n > b.end-b.off {
		panic(fmt.Sprintf("packet: elide %d bytes at %d of a %d-byte packet", n, at, b.Len()))
	}
	e := b.pool.get(b.end - b.off - n)
	e.end = e.off + copy(e.buf[e.off:], b.buf[b.off:b.off+at])
	e.hole, e.holeAt = n, e.end
	e.end += copy(e.buf[e.end:], b.buf[b.off+at+n:b.end])
	e.adopt(b)
	return e
}

// Expand returns b's packet with all its bytes (an elided payload as
// zeros) in a buffer of b's pool, and frees b. The packet keeps its ID,
// flow tag and scratch fields. A packet that holds all its bytes is
// returned as it is.
func (b *Buffer) Expand() *Buffer {
	if b.hole == 0 {
		return b
	}
	e := b.pool.get(b.Len())
	e.end = e.off + copy(e.buf[e.off:], b.buf[b.off:b.holeAt])
	clear(e.buf[e.end : e.end+b.hole])
	e.end += b.hole
	e.end += copy(e.buf[e.end:], b.buf[b.holeAt:b.end])
	e.adopt(b)
	return e
}

// adopt makes e the packet b was (ID, flow tag, scratch, runs) and frees b.
func (e *Buffer) adopt(b *Buffer) {
	e.ID, e.Hop, e.Stamp, e.Flow = b.ID, b.Hop, b.Stamp, b.Flow
	e.copyRuns(b)
	b.Free()
}

func (p *Pool) alloc(size int) *Buffer {
	p.allocated++
	return &Buffer{buf: make([]byte, Headroom+size), pool: p}
}

func (p *Pool) put(b *Buffer) {
	p.outstanding--
	switch len(b.buf) {
	case tinyHeadroom + tinySize:
		p.tiny = append(p.tiny, b)
	case tinyHeadroom + shortSize:
		p.short = append(p.short, b)
	case Headroom + smallSize:
		p.small = append(p.small, b)
	case Headroom + mediumSize:
		p.medium = append(p.medium, b)
	default:
		p.large = append(p.large, b)
	}
}

// balanceSlack is how many more free buffers of a class one pool may hold
// than another before Balance moves some.
const balanceSlack = 64

// Balance evens out the free buffers of pools, class by class, when two
// differ by more than balanceSlack: a partitioned lab's packets are freed
// into the pool of the partition that receives them, so under one-way
// traffic (an incast) the senders' pools would allocate without end while
// the receiver's free lists grow. Call it while no pool is in use (at a
// partitioned run's barrier); it moves at most half the difference per
// class and allocates nothing.
func Balance(pools []*Pool) {
	if len(pools) < 2 {
		return
	}
	for c := range numClasses {
		lo, hi := pools[0], pools[0]
		for _, p := range pools[1:] {
			if len(*p.class(c)) < len(*lo.class(c)) {
				lo = p
			}
			if len(*p.class(c)) > len(*hi.class(c)) {
				hi = p
			}
		}
		from, to := hi.class(c), lo.class(c)
		d := len(*from) - len(*to)
		if d <= balanceSlack {
			continue
		}
		n := len(*from) - d/2
		for _, b := range (*from)[n:] {
			b.pool = lo
		}
		*to = append(*to, (*from)[n:]...)
		clear((*from)[n:])
		*from = (*from)[:n]
	}
}

// numClasses is the number of size classes (class's c).
const numClasses = 5

// class returns the free list of size class c (tiny, short, small,
// medium, large).
func (p *Pool) class(c int) *[]*Buffer {
	switch c {
	case 0:
		return &p.tiny
	case 1:
		return &p.short
	case 2:
		return &p.small
	case 3:
		return &p.medium
	}
	return &p.large
}

// FreeCount returns how many free buffers the pool holds.
func (p *Pool) FreeCount() int {
	return len(p.tiny) + len(p.short) + len(p.small) + len(p.medium) + len(p.large)
}

// Allocated returns how many buffers the pool has ever allocated.
func (p *Pool) Allocated() int { return p.allocated }

// Outstanding returns how many buffers are in use (got and not freed). A
// finished run with Outstanding() > 0 has leaked packets.
func (p *Pool) Outstanding() int { return p.outstanding }
