// Package header has byte-slice views of the IPv4 and UDP headers that the
// fabric and the NICs read and write. A view is a []byte: accessors read the
// field in place, setters write it, nothing is copied or allocated. Callers
// check the length once (with Valid or the Min sizes) before using a view.
package header

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"net/netip"
)

// Sizes and protocol numbers.
const (
	IPv4MinSize     = 20
	UDPSize         = 8
	IPv4ProtoUDP    = 17
	IPv4ProtoTCP    = 6
	IPv4ProtoICMP   = 1
	ipv4VersionIHL  = 0x45
	ipv4DefaultTTL  = 64
	ipv4FlagDF      = 0x4000
	ipv4ChecksumOff = 10
)

// ECN codepoints (RFC 3168), the two low bits of the IPv4 TOS byte.
const (
	ECNNotECT uint8 = 0
	ECNECT1   uint8 = 1
	ECNECT0   uint8 = 2
	ECNCE     uint8 = 3
)

// Errors from Validate.
var (
	ErrTruncated = errors.New("truncated header")
	ErrVersion   = errors.New("not IPv4")
	ErrChecksum  = errors.New("bad IPv4 header checksum")
	ErrLength    = errors.New("length field disagrees with packet")
)

// IPv4 is a view of an IPv4 header at the start of a packet.
type IPv4 []byte

// Validate checks that b holds a complete IPv4 header with a correct
// checksum and a total length that fits in b.
func (b IPv4) Validate() error { return b.ValidateIn(len(b)) }

// ValidateIn is Validate for a packet of size bytes of which b holds at
// least the header: a header-only packet (packet.Buffer.Elide) holds its
// headers but not its payload, and its total length counts the payload.
func (b IPv4) ValidateIn(size int) error {
	if len(b) < IPv4MinSize {
		return ErrTruncated
	}
	if b[0]>>4 != 4 {
		return ErrVersion
	}
	hl := int(b[0]&0xf) * 4
	if hl < IPv4MinSize || len(b) < hl {
		return ErrTruncated
	}
	if tl := int(b.TotalLength()); tl < hl || tl > size {
		return ErrLength
	}
	if Checksum(b[:hl], 0) != 0xffff {
		return ErrChecksum
	}
	return nil
}

// HeaderLength returns the header length in bytes.
func (b IPv4) HeaderLength() int { return int(b[0]&0xf) * 4 }

// TOS returns the type-of-service byte (DSCP and ECN).
func (b IPv4) TOS() uint8 { return b[1] }

// ECN returns the ECN codepoint.
func (b IPv4) ECN() uint8 { return b[1] & 3 }

// SetECN rewrites the ECN codepoint and updates the checksum incrementally
// (RFC 1624), as a switch does when it marks CE.
func (b IPv4) SetECN(ecn uint8) {
	old := binary.BigEndian.Uint16(b[0:2])
	b[1] = b[1]&^3 | ecn&3
	b.updateChecksum(old, binary.BigEndian.Uint16(b[0:2]))
}

// TotalLength returns the total length field.
func (b IPv4) TotalLength() uint16 { return binary.BigEndian.Uint16(b[2:4]) }

// ID returns the identification field.
func (b IPv4) ID() uint16 { return binary.BigEndian.Uint16(b[4:6]) }

// TTL returns the time-to-live.
func (b IPv4) TTL() uint8 { return b[8] }

// DecTTL decrements the TTL and fixes the checksum. It returns the new TTL.
func (b IPv4) DecTTL() uint8 {
	old := binary.BigEndian.Uint16(b[8:10])
	b[8]--
	b.updateChecksum(old, binary.BigEndian.Uint16(b[8:10]))
	return b[8]
}

// Protocol returns the protocol number.
func (b IPv4) Protocol() uint8 { return b[9] }

// HeaderChecksum returns the header checksum field.
func (b IPv4) HeaderChecksum() uint16 { return binary.BigEndian.Uint16(b[10:12]) }

// Src returns the source address.
func (b IPv4) Src() netip.Addr { return netip.AddrFrom4([4]byte(b[12:16])) }

// Dst returns the destination address.
func (b IPv4) Dst() netip.Addr { return netip.AddrFrom4([4]byte(b[16:20])) }

// SrcU32 returns the source address as a big-endian integer (for hashing
// and prefix matching without netip).
func (b IPv4) SrcU32() uint32 { return binary.BigEndian.Uint32(b[12:16]) }

// DstU32 returns the destination address as a big-endian integer.
func (b IPv4) DstU32() uint32 { return binary.BigEndian.Uint32(b[16:20]) }

// Payload returns the bytes after the header, up to the total length.
func (b IPv4) Payload() []byte { return b[b.HeaderLength():b.TotalLength()] }

// IPv4Fields are the fields Encode writes; the rest get fixed values (no
// options, DF set, no fragmentation).
type IPv4Fields struct {
	TOS         uint8
	TotalLength uint16
	ID          uint16
	TTL         uint8 // 0 means 64
	Protocol    uint8
	Src, Dst    netip.Addr
}

// Encode writes a 20-byte header with its checksum. b must be at least
// IPv4MinSize long.
func (b IPv4) Encode(f *IPv4Fields) {
	b[0] = ipv4VersionIHL
	b[1] = f.TOS
	binary.BigEndian.PutUint16(b[2:], f.TotalLength)
	binary.BigEndian.PutUint16(b[4:], f.ID)
	binary.BigEndian.PutUint16(b[6:], ipv4FlagDF)
	ttl := f.TTL
	if ttl == 0 {
		ttl = ipv4DefaultTTL
	}
	b[8] = ttl
	b[9] = f.Protocol
	b[10], b[11] = 0, 0
	s, d := f.Src.As4(), f.Dst.As4()
	copy(b[12:16], s[:])
	copy(b[16:20], d[:])
	binary.BigEndian.PutUint16(b[10:], ^Checksum(b[:IPv4MinSize], 0))
}

// updateChecksum applies RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m').
func (b IPv4) updateChecksum(old, new uint16) {
	hc := binary.BigEndian.Uint16(b[ipv4ChecksumOff:])
	sum := uint32(^hc) + uint32(^old) + uint32(new)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(b[ipv4ChecksumOff:], ^uint16(sum))
}

// Checksum returns the 16-bit ones'-complement sum of b added to initial
// (not complemented). A header with a correct checksum sums to 0xffff.
//
// Eight bytes are added at a time, as one 64-bit word with its carry
// added back (end-around carry): 2^16 is 1 modulo 0xffff, so a word of
// four 16-bit words is congruent to their sum, and so is the total, which
// is zero only when every byte and initial are; the fold to 16 bits then
// gives the word-by-word result exactly (TestChecksumWordByWord).
func Checksum(b []byte, initial uint32) uint16 {
	sum := uint64(initial)
	var c uint64
	for len(b) >= 8 {
		sum, c = bits.Add64(sum, binary.BigEndian.Uint64(b), 0)
		sum += c // no wrap: with a carry, sum is at most 2^64-2
		b = b[8:]
	}
	// At most seven bytes are left: their words fit in 48 bits, added
	// to the 64-bit sum's two halves without overflow.
	sum = sum>>32 + sum&0xffffffff
	if len(b) >= 4 {
		sum += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		sum += uint64(b[0])<<8 | uint64(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint64(b[0]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}
