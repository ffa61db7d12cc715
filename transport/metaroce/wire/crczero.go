package wire

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"
)

// The CRC32C of bytes known to be zero, without reading them.
//
// A NIC in synthetic payload mode (softnic) carries a data packet's payload
// as zeros that stand for memory content: the receiver's NIC makes them
// from a count, and the sender's DMA need not even write them (they are
// elided). Their CRC need not read them. CRC32C is linear over GF(2):
// feeding one zero byte maps the (reflected) register r to
// table[r&0xff] ^ r>>8, a 32x32 bit matrix Z, so feeding n zero bytes is
// Z^n, a product of the powers Z^(2^k) for the bits of n (crc32_combine's
// construction in zlib). The powers a packet needs are precomputed as
// byte tables: a 4 KiB payload is four table loads instead of reading
// 4,096 bytes, and any length at most one such step per bit. The value is
// exactly the CRC over the zeros, so packets, traces and every check are
// the same as when the bytes are read.

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

// zeroPow[k] feeds 2^k zero bytes, for every bit of a length. Computed
// once at package init and only read afterwards, so it is safe for
// concurrent use.
var zeroPow = func() (p [64]zeroOp) {
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
// touching n bytes: Z^n as the product of Z^(2^k) for the bits k of n,
// each applied from its byte tables (zeroTables), so the cost is at most
// one table step per bit of n whatever lengths come, with nothing built
// or cached on the way.
func crcZeros(crc uint32, n int) uint32 {
	if n <= 0 {
		return crc
	}
	r := ^crc
	u := uint64(n)
	for u != 0 {
		k := bits.TrailingZeros64(u)
		if k >= zeroTableBits {
			r = regZeros(r, u) // past any packet: the bits left, by matrix
			break
		}
		r = zeroTables[k].apply(r)
		u &= u - 1
	}
	return ^r
}

// regZeros feeds n zero bytes to the register r: Z^n r, as a product of
// the powers for the bits of n.
func regZeros(r uint32, n uint64) uint32 {
	for k := 0; n > 0 && k < len(zeroPow); k++ {
		if n&1 != 0 {
			r = zeroPow[k].apply(r)
		}
		n >>= 1
	}
	return r
}

// zeroTable is one Z^(2^k) as four byte tables: Z r is the XOR of
// t[j][byte j of r] (Z is linear), four loads where the matrix product
// (zeroOp.apply) is 32 steps.
type zeroTable [4][256]uint32

// apply returns the image of register r.
func (t *zeroTable) apply(r uint32) uint32 {
	return t[0][r&0xff] ^ t[1][r>>8&0xff] ^ t[2][r>>16&0xff] ^ t[3][r>>24]
}

// zeroTableBits: zeroTables covers the powers 2^k below 2^zeroTableBits
// bytes, past the largest packet (9,216 bytes), so a packet's zeros take
// at most 14 steps (4 KiB each, 56 KiB in all).
const zeroTableBits = 14

// zeroTables[k] is Z^(2^k): each byte's table from the matrix's columns
// for its eight bits (zeroPow). Computed once at package init and only
// read afterwards, so it is safe for concurrent use.
var zeroTables = func() (t [zeroTableBits]zeroTable) {
	for k := range t {
		for j := range t[k] {
			tj := &t[k][j]
			for bit := 0; bit < 8; bit++ {
				tj[1<<bit] = zeroPow[k][8*j+bit]
			}
			for b := 3; b < 256; b++ {
				if low := b & -b; low != b {
					tj[b] = tj[b&^low] ^ tj[low]
				}
			}
		}
	}
	return t
}()

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
