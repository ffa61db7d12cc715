package softnic

import "encoding/binary"

// Content streams: the content MR.Fill writes and MR.Matches checks is a
// keyed pseudo-random sequence of 64-bit little-endian words. Word i of the
// stream named by seed is
//
//	scramble(mix64(seed) + i*patternStep)
//
// a counter run through a bijective scrambler: a counter-mode PRNG keyed
// by the seed. Within a stream no two words are equal (the counter never
// repeats within 2^64 words and the scrambler is a bijection), so the
// content does not repeat at any stride, power of two or not: a chunk
// placed 4 KiB off, a READ answered from the wrong offset or a message in
// the wrong slot never looks right. Two streams share no structure either
// (unlike an arithmetic sequence, whose low bytes repeat every 256 words).
// Byte regions hold the bytes; synthetic regions only say which stream,
// from which position, each range holds (see synthetic.go).

const patternStep = 0x9e3779b97f4a7c15 // odd: the counter never repeats within 2^64 words

// scramble is a bijection on 64-bit words (xorshift-multiply, the second
// half of Murmur3's finalizer): one multiply per word, so a 2 MB message
// is still filled at several GB/s.
func scramble(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 29
	return x
}

// fill writes the pattern named by seed into b.
func fill(b []byte, seed uint64) { fillWords(b, mix64(seed)) }

// fillAt writes bytes pos..pos+len(b) of the stream named by seed into b.
func fillAt(b []byte, seed, pos uint64) {
	v := mix64(seed) + pos/8*patternStep
	if r := pos % 8; r != 0 {
		var t [8]byte
		binary.LittleEndian.PutUint64(t[:], scramble(v))
		k := copy(b, t[r:])
		b = b[k:]
		v += patternStep
	}
	fillWords(b, v)
}

// fillWords writes the sequence from counter value v on. It writes four
// words per step with one bounds check.
func fillWords(b []byte, v uint64) {
	s1 := uint64(patternStep)
	s2, s3, s4 := 2*s1, 3*s1, 4*s1 // wrap mod 2^64, as the counter does
	for len(b) >= 32 {
		_ = b[31]
		binary.LittleEndian.PutUint64(b[0:], scramble(v))
		binary.LittleEndian.PutUint64(b[8:], scramble(v+s1))
		binary.LittleEndian.PutUint64(b[16:], scramble(v+s2))
		binary.LittleEndian.PutUint64(b[24:], scramble(v+s3))
		v += s4
		b = b[32:]
	}
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, scramble(v))
		v += patternStep
		b = b[8:]
	}
	var t [8]byte
	binary.LittleEndian.PutUint64(t[:], scramble(v))
	copy(b, t[:])
}

// matches reports whether b holds the pattern named by seed. It ORs the
// differences of a 4 KiB block together and tests once per block, so the
// inner loop has no data-dependent branch.
func matches(b []byte, seed uint64) bool {
	v := mix64(seed)
	s1 := uint64(patternStep)
	s2, s3, s4 := 2*s1, 3*s1, 4*s1
	for len(b) >= 32 {
		var diff uint64
		k := min(len(b), 4096) &^ 31
		blk := b[:k]
		for len(blk) >= 32 {
			_ = blk[31]
			diff |= binary.LittleEndian.Uint64(blk[0:]) ^ scramble(v)
			diff |= binary.LittleEndian.Uint64(blk[8:]) ^ scramble(v+s1)
			diff |= binary.LittleEndian.Uint64(blk[16:]) ^ scramble(v+s2)
			diff |= binary.LittleEndian.Uint64(blk[24:]) ^ scramble(v+s3)
			v += s4
			blk = blk[32:]
		}
		if diff != 0 {
			return false
		}
		b = b[k:]
	}
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != scramble(v) {
			return false
		}
		v += patternStep
		b = b[8:]
	}
	var t [8]byte
	binary.LittleEndian.PutUint64(t[:], scramble(v))
	for i := range b {
		if b[i] != t[i] {
			return false
		}
	}
	return true
}

// firstDiff returns the offset of the first byte of b that differs from
// the pattern named by seed, or -1 if b holds it. It is matches' slow
// twin, run only once a check failed (to say where).
func firstDiff(b []byte, seed uint64) int {
	v := mix64(seed)
	var t [8]byte
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(t[:], scramble(v))
		for j := 0; j < 8 && i+j < len(b); j++ {
			if b[i+j] != t[j] {
				return i + j
			}
		}
		v += patternStep
	}
	return -1
}

// zero reports whether b is all zero bytes.
func zero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// firstNonZero returns the offset of b's first non-zero byte, or -1.
func firstNonZero(b []byte) int {
	for i, x := range b {
		if x != 0 {
			return i
		}
	}
	return -1
}
