package metaroce

import (
	"math/bits"

	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// seqWindow remembers which sequence numbers in [base, base+limit) have
// been seen, as a bitmap ring that grows (by doubling, up to limit) only as
// far as the span actually in use. The receiver deduplicates chunks by DSN
// with it, so its size follows what is in flight, not the connection's age.
type seqWindow struct {
	base  uint32
	words []uint64 // ring of bits; len is a power of two (or 0)
	limit int      // most bits the window may span
}

// has reports whether seq was seen. Numbers before base were all seen;
// numbers past the window were not.
func (w *seqWindow) has(seq uint32) bool {
	if wire.Seq(seq).Before(wire.Seq(w.base)) {
		return true
	}
	if int(wire.Seq(w.base).Span(wire.Seq(seq))) >= len(w.words)*64 {
		return false
	}
	i := seq & uint32(len(w.words)*64-1)
	return w.words[i/64]&(1<<(i%64)) != 0
}

// inRange reports whether seq may be recorded: it is not before base and
// not past base+limit.
func (w *seqWindow) inRange(seq uint32) bool {
	return !wire.Seq(seq).Before(wire.Seq(w.base)) && int(wire.Seq(w.base).Span(wire.Seq(seq))) < w.limit
}

// add records seq (which must be inRange) and advances base over the
// prefix that is complete.
func (w *seqWindow) add(seq uint32) {
	d := int(wire.Seq(w.base).Span(wire.Seq(seq)))
	if d >= len(w.words)*64 {
		w.grow(d + 1)
	}
	i := seq & uint32(len(w.words)*64-1)
	w.words[i/64] |= 1 << (i % 64)
	if d == 0 {
		w.advance()
	}
}

// advance moves base past set bits, clearing them for reuse.
func (w *seqWindow) advance() {
	mask := uint32(len(w.words)*64 - 1)
	for {
		i := w.base & mask
		word := w.words[i/64] >> (i % 64)
		n := bits.TrailingZeros64(^word) // run of set bits from base
		if n == 0 {
			return
		}
		if lim := 64 - int(i%64); n > lim {
			n = lim
		}
		w.words[i/64] &^= (^uint64(0) >> (64 - n)) << (i % 64)
		w.base += uint32(n)
	}
}

// grow makes the ring span at least n bits, keeping what it holds.
func (w *seqWindow) grow(n int) {
	size := max(len(w.words)*64, 256)
	for size < n {
		size *= 2
	}
	old, oldBits := w.words, len(w.words)*64
	w.words = make([]uint64, size/64)
	mask := uint32(size - 1)
	for d := 0; d < oldBits; d++ {
		s := w.base + uint32(d)
		j := s & uint32(oldBits-1)
		if old[j/64]&(1<<(j%64)) != 0 {
			k := s & mask
			w.words[k/64] |= 1 << (k % 64)
		}
	}
}

// sack is a receiver's view of one path generation: cum is the next PSN
// expected (all before it arrived) and bit i of the wire.SACKBits-bit
// vector (word i/wire.SACKWordBits, most significant bit first, as on the
// wire) says whether PSN cum+1+i arrived.
type sack struct {
	cum  uint32
	bits [wire.SACKWords]uint64
}

// sackWord and sackTop name the wire's SACK geometry for the bit
// arithmetic below.
const (
	sackWord = wire.SACKWordBits
	sackTop  = wire.SACKWordBits - 1 // shift of a word's first (most significant) bit
)

// outcome of recording a PSN.
type sackOutcome uint8

const (
	sackNew    sackOutcome = iota // in order
	sackHole                      // arrived past a hole
	sackFill                      // filled the hole at cum, later PSNs were waiting
	sackDup                       // already recorded
	sackTooFar                    // beyond the wire.SACKBits-PSN window: not recorded
)

// seen reports whether psn was recorded.
func (s *sack) seen(psn uint32) bool {
	d := wire.Seq(s.cum).Dist(wire.Seq(psn))
	switch {
	case d < 0:
		return true
	case d == 0 || d > wire.SACKBits:
		return false
	}
	i := d - 1
	return s.bits[i/sackWord]&(1<<(sackTop-i%sackWord)) != 0
}

// add records psn.
func (s *sack) add(psn uint32) sackOutcome {
	d := wire.Seq(s.cum).Dist(wire.Seq(psn))
	switch {
	case d < 0:
		return sackDup
	case d > wire.SACKBits:
		return sackTooFar
	case d > 0:
		i := d - 1
		m := uint64(1) << (sackTop - i%sackWord)
		if s.bits[i/sackWord]&m != 0 {
			return sackDup
		}
		s.bits[i/sackWord] |= m
		return sackHole
	}
	// d == 0: advance cum past psn and any run of received PSNs after it.
	waiting := s.bits != [wire.SACKWords]uint64{}
	n := 1 + bits.LeadingZeros64(^s.bits[0])
	if s.bits[0] == ^uint64(0) {
		n = 1 + sackWord + countLeadingOnes(s.bits[1:])
	}
	s.shift(n)
	s.cum += uint32(n)
	if waiting {
		return sackFill
	}
	return sackNew
}

// countLeadingOnes counts set bits from the start of ws.
func countLeadingOnes(ws []uint64) int {
	n := 0
	for _, w := range ws {
		k := bits.LeadingZeros64(^w)
		n += k
		if k < sackWord {
			break
		}
	}
	return n
}

// shift drops the first n PSNs of the window: bit 0 of the new vector is
// PSN cum+n+1, so bit n-1 of the old one becomes PSN cum+n, the new cum.
func (s *sack) shift(n int) {
	if n > wire.SACKBits {
		s.bits = [wire.SACKWords]uint64{}
		return
	}
	// The vector after the shift starts at old bit n.
	var out [wire.SACKWords]uint64
	for w := range wire.SACKWords {
		src := n + sackWord*w // first old bit that lands in out word w
		sw, sb := src/sackWord, src%sackWord
		var x uint64
		if sw < wire.SACKWords {
			x = s.bits[sw] << sb
			if sb != 0 && sw+1 < wire.SACKWords {
				x |= s.bits[sw+1] >> (sackWord - sb)
			}
		}
		out[w] = x
	}
	s.bits = out
}
