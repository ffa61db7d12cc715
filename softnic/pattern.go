package softnic

import "encoding/binary"

// Content streams: the content MR.Fill writes and MR.Matches checks is an
// arithmetic sequence of 64-bit little-endian words starting at a value
// drawn from the stream's seed. Every stream has different bytes at every
// position, so a packet placed at the wrong address, a message placed in
// the wrong slot or a stale retransmission all show up in a check. Byte
// regions hold the bytes; synthetic regions only say which stream, from
// which position, each range holds (see synthetic.go).

const patternStep = 0x9e3779b97f4a7c15 // odd: the sequence never repeats within 2^64 words

// fill writes the pattern named by seed into b. It writes four words per
// step with one bounds check (a 2 MB message is filled at memory speed, not
// at one dependent add per word).
func fill(b []byte, seed uint64) { fillWords(b, mix64(seed)) }

// fillAt writes bytes pos..pos+len(b) of the stream named by seed into b.
func fillAt(b []byte, seed, pos uint64) {
	v := mix64(seed) + pos/8*patternStep
	if r := pos % 8; r != 0 {
		var t [8]byte
		binary.LittleEndian.PutUint64(t[:], v)
		k := copy(b, t[r:])
		b = b[k:]
		v += patternStep
	}
	fillWords(b, v)
}

// fillWords writes the sequence from word value v on.
func fillWords(b []byte, v uint64) {
	s1 := uint64(patternStep)
	s2, s3, s4 := 2*s1, 3*s1, 4*s1 // wrap mod 2^64, as the sequence does
	for len(b) >= 32 {
		_ = b[31]
		binary.LittleEndian.PutUint64(b[0:], v)
		binary.LittleEndian.PutUint64(b[8:], v+s1)
		binary.LittleEndian.PutUint64(b[16:], v+s2)
		binary.LittleEndian.PutUint64(b[24:], v+s3)
		v += s4
		b = b[32:]
	}
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, v)
		v += patternStep
		b = b[8:]
	}
	var t [8]byte
	binary.LittleEndian.PutUint64(t[:], v)
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
			diff |= binary.LittleEndian.Uint64(blk[0:]) ^ v
			diff |= binary.LittleEndian.Uint64(blk[8:]) ^ (v + s1)
			diff |= binary.LittleEndian.Uint64(blk[16:]) ^ (v + s2)
			diff |= binary.LittleEndian.Uint64(blk[24:]) ^ (v + s3)
			v += s4
			blk = blk[32:]
		}
		if diff != 0 {
			return false
		}
		b = b[k:]
	}
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != v {
			return false
		}
		v += patternStep
		b = b[8:]
	}
	var t [8]byte
	binary.LittleEndian.PutUint64(t[:], v)
	for i := range b {
		if b[i] != t[i] {
			return false
		}
	}
	return true
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
