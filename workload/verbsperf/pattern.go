package verbsperf

import (
	"encoding/binary"
	"math/bits"
)

// A message's bytes are a pattern that depends on the connection's key,
// the message's number and each byte's offset, so that a check needs no
// copy of what was sent and a message that did not land whole and in
// place does not check out: a wrong or flipped byte, a byte of another
// message (an older one left in a reused slot, a later one), of another
// connection, or from another offset of the same message.
//
// Word w (8 bytes, little-endian) of message m is tab[w mod n] ^ salt(m,
// w div n): tab is n words of xorshift64 drawn from the key once per
// connection (n covers a whole message up to tableWords, 64 KiB), and
// salt is splitmix64 of the key, the message and the chunk of n words,
// computed once per chunk. So filling a message is a load, an XOR and a
// store per word, and checking it a load, two XORs and an OR per word
// (the first wrong byte is looked for only once a chunk differs): ~1 ns
// per word where drawing and comparing xorshift bytes one by one cost
// ~8x (BenchmarkPattern). A byte from elsewhere checks out only if its
// word's XOR of table words and salts happens to be zero: a chance of
// 2^-64 per word.
type pattern struct {
	key uint64
	tab []uint64
}

// tableWords is the most words a pattern table holds: a message longer
// than 64 KiB repeats it, each repetition under its own salt.
const tableWords = 8192

// pattern returns the side's pattern for messages of size bytes, making
// it on first use (and anew if the size or key changed).
func (s *side) pattern(size int) *pattern {
	n := min((size+7)/8, tableWords)
	if p := s.pat; p != nil && p.key == s.key && len(p.tab) >= n {
		return p
	}
	p := &pattern{key: s.key, tab: make([]uint64, n)}
	x := s.key | 1
	for i := range p.tab {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		p.tab[i] = x
	}
	s.pat = p
	return p
}

// salt is chunk c of message msg's salt.
func (p *pattern) salt(msg uint64, c int) uint64 {
	return splitmix(p.key ^ splitmix(msg+1) ^ bits.RotateLeft64(splitmix(uint64(c)+1), 17))
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// fill writes message msg's pattern into b.
func (s *side) fill(b []byte, msg uint64) {
	p := s.pattern(len(b))
	n := len(p.tab)
	le := binary.LittleEndian
	for off, c := 0, 0; off < len(b); off, c = off+8*n, c+1 {
		salt := p.salt(msg, c)
		chunk := b[off:min(off+8*n, len(b))]
		tab := p.tab[:len(chunk)/8]
		i := 0
		for ; i+4 <= len(tab); i += 4 {
			w := chunk[8*i : 8*i+32]
			le.PutUint64(w[0:], tab[i]^salt)
			le.PutUint64(w[8:], tab[i+1]^salt)
			le.PutUint64(w[16:], tab[i+2]^salt)
			le.PutUint64(w[24:], tab[i+3]^salt)
		}
		for ; i < len(tab); i++ {
			le.PutUint64(chunk[8*i:], tab[i]^salt)
		}
		if tail := chunk[8*len(tab):]; len(tail) > 0 { // a part word
			var t [8]byte
			le.PutUint64(t[:], p.tab[len(tab)%n]^salt)
			copy(tail, t[:])
		}
	}
}

// firstBad returns the offset of the first byte of b that differs from
// message msg's pattern (-1: none).
func (s *side) firstBad(b []byte, msg uint64) int {
	p := s.pattern(len(b))
	n := len(p.tab)
	le := binary.LittleEndian
	for off, c := 0, 0; off < len(b); off, c = off+8*n, c+1 {
		salt := p.salt(msg, c)
		chunk := b[off:min(off+8*n, len(b))]
		tab := p.tab[:len(chunk)/8]
		// Each word XOR its table word must be the salt: OR their
		// differences from it, 4 words at a time (| and ^ bind alike
		// in Go: each difference is parenthesized).
		var d uint64
		i := 0
		for ; i+4 <= len(tab); i += 4 {
			w := chunk[8*i : 8*i+32]
			d |= (le.Uint64(w[0:]) ^ tab[i] ^ salt) | (le.Uint64(w[8:]) ^ tab[i+1] ^ salt) |
				(le.Uint64(w[16:]) ^ tab[i+2] ^ salt) | (le.Uint64(w[24:]) ^ tab[i+3] ^ salt)
		}
		for ; i < len(tab); i++ {
			d |= le.Uint64(chunk[8*i:]) ^ tab[i] ^ salt
		}
		var want [8]byte
		if d != 0 { // find the first wrong byte
			for i, t := range tab {
				if x := le.Uint64(chunk[8*i:]) ^ t ^ salt; x != 0 {
					return off + 8*i + bits.TrailingZeros64(x)/8
				}
			}
		}
		if tail := chunk[8*len(tab):]; len(tail) > 0 {
			le.PutUint64(want[:], p.tab[len(tab)%n]^salt)
			for j := range tail {
				if tail[j] != want[j] {
					return off + 8*len(tab) + j
				}
			}
		}
	}
	return -1
}
