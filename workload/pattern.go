package workload

import "encoding/binary"

// Message contents are generated, not stored: a message's bytes are an
// arithmetic sequence of 64-bit words starting at a value drawn from its
// seed. Every message gets different bytes at every offset, so a packet
// placed at the wrong address, a message placed in the wrong slot or a stale
// retransmission all show up in the data check.

const patternStep = 0x9e3779b97f4a7c15 // odd: the sequence never repeats within 2^64 words

// mix64 is SplitMix64's finalizer.
func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// msgSeed names a message's contents: run seed, flow and message number.
func msgSeed(seed uint64, flow int, msg int64) uint64 {
	return mix64(seed ^ mix64(uint64(flow)<<40^uint64(msg)+1))
}

// fill writes the pattern named by seed into b. It writes four words per
// step with one bounds check (a 2 MB message is filled at memory speed, not
// at one dependent add per word).
func fill(b []byte, seed uint64) {
	v := mix64(seed)
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
