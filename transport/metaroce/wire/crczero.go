package wire

import (
	"encoding/binary"
	"hash/crc32"
	"sync/atomic"
)

// The CRC32C of bytes known to be zero, without reading them.
//
// A NIC in synthetic payload mode (softnic) carries a data packet's payload
// as zeros that stand for memory content: the sender's DMA zeroes them and
// the receiver's NIC makes them from a count. Their CRC need not read them.
// CRC32C is linear over GF(2): feeding one zero byte maps the (reflected)
// register r to table[r&0xff] ^ r>>8, a 32x32 bit matrix Z, so feeding n
// zero bytes is Z^n, and Z^n is a product of the precomputed powers Z^(2^k)
// for the bits of n (crc32_combine's construction in zlib). For a 4 KiB
// payload that is one matrix applied to the register, instead of reading
// 4,096 bytes. The value is exactly the CRC over the zeros, so packets,
// traces and every check are the same as when the bytes are read.

// zeroOp is a linear map on the CRC register: col[i] is the image of bit i.
type zeroOp [32]uint32

// apply returns the image of register r.
func (m *zeroOp) apply(r uint32) uint32 {
	var out uint32
	for i := range m {
		out ^= m[i] & -(r >> i & 1) // branch-free: the register's bits are random
	}
	return out
}

// zeroPow[k] feeds 2^k zero bytes. Computed once at package init and only
// read afterwards, so it is safe for concurrent use.
var zeroPow = func() (p [32]zeroOp) {
	for i := range p[0] {
		r := uint32(1) << i
		p[0][i] = castagnoli[r&0xff] ^ r>>8
	}
	for k := 1; k < len(p); k++ {
		for i := range p[k] {
			p[k][i] = p[k-1].apply(p[k-1][i])
		}
	}
	return p
}()

// crcZeros returns crc32.Update(crc, castagnoli, make([]byte, n)) without
// touching n bytes: Z^n from the byte tables of n (zeroTableFor).
func crcZeros(crc uint32, n int) uint32 {
	if n <= 0 {
		return crc
	}
	t := zeroTableFor(n)
	r := ^crc
	return ^(t.t[0][r&0xff] ^ t.t[1][r>>8&0xff] ^ t.t[2][r>>16&0xff] ^ t.t[3][r>>24])
}

// regZeros feeds n zero bytes to the register r: Z^n r, as a product of
// the powers for the bits of n.
func regZeros(r uint32, n int) uint32 {
	for k := 0; n > 0 && k < len(zeroPow); k++ {
		if n&1 != 0 {
			r = zeroPow[k].apply(r)
		}
		n >>= 1
	}
	return r
}

// zeroTable is Z^n for one n as four byte tables: Z^n r is the XOR of
// t[j][byte j of r] (Z^n is linear). Applying it is four loads where the
// product of powers is one 32-step matrix product per bit of n, and a
// packet's payload length takes few values (the MSS, a message's last
// chunk), so the tables of recent lengths are kept.
type zeroTable struct {
	n int
	t [4][256]uint32
}

// zeroTables holds recently used tables, by a hash of n. A table is never
// written after it is published, so readers on other goroutines (a
// partitioned run's loops) see it whole; two lengths that share a slot
// replace each other's, which costs a rebuild, never a wrong answer.
var zeroTables [16]atomic.Pointer[zeroTable]

// zeroTableFor returns the tables of Z^n, building them if no slot holds
// them: each byte's table from Z^n of its eight bits.
func zeroTableFor(n int) *zeroTable {
	slot := &zeroTables[(n^n>>4^n>>8)&(len(zeroTables)-1)]
	if t := slot.Load(); t != nil && t.n == n {
		return t
	}
	t := &zeroTable{n: n}
	for j := range t.t {
		tj := &t.t[j]
		for bit := 0; bit < 8; bit++ {
			tj[1<<bit] = regZeros(uint32(1)<<(8*j+bit), n)
		}
		for b := 3; b < 256; b++ {
			if low := b & -b; low != b {
				tj[b] = tj[b&^low] ^ tj[low]
			}
		}
	}
	slot.Store(t)
	return t
}

// checksum returns the CRC32C of pkt, whose bytes pkt[at:at+z] the caller
// knows to be zero (z <= 0: none known); the span is clipped to pkt.
func checksum(pkt []byte, at, z int) uint32 {
	if z <= 0 || at < 0 || at >= len(pkt) {
		return crc32.Checksum(pkt, castagnoli)
	}
	z = min(z, len(pkt)-at)
	c := crc32.Update(0, castagnoli, pkt[:at])
	c = crcZeros(c, z)
	return crc32.Update(c, castagnoli, pkt[at+z:])
}

// SealZeros is Seal for a packet whose bytes pkt[at:at+z] are zeros (a
// synthetic payload; see above): they are not read. The trailer is the one
// Seal writes. A span reaching past pkt[:n] is clipped.
func SealZeros(pkt []byte, n, at, z int) int {
	binary.BigEndian.PutUint32(pkt[n:], checksum(pkt[:n], at, z))
	return n + TrailerSize
}

// ParseZeros is Parse for a received packet whose bytes pkt[at:at+z] are
// zeros (a header-only packet's elided payload): the CRC check does not
// read them. Its results are Parse's.
func ParseZeros(pkt []byte, at, z int) (Type, []byte, error) {
	return parse(pkt, at, z)
}
