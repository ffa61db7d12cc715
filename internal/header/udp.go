package header

import "encoding/binary"

// UDP is a view of a UDP header followed by its payload.
type UDP []byte

// SrcPort returns the source port. For MetaRoCE and RoCEv2 it is the path's
// ECMP entropy.
func (b UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(b[0:2]) }

// DstPort returns the destination port.
func (b UDP) DstPort() uint16 { return binary.BigEndian.Uint16(b[2:4]) }

// Length returns the length field (header plus payload).
func (b UDP) Length() uint16 { return binary.BigEndian.Uint16(b[4:6]) }

// Checksum returns the checksum field (0: none, allowed over IPv4).
func (b UDP) Checksum() uint16 { return binary.BigEndian.Uint16(b[6:8]) }

// SetSrcPort rewrites the source port. The checksum is left as is: mrlab
// sends UDP without a checksum (0), which IPv4 allows; the transports carry
// their own integrity check.
func (b UDP) SetSrcPort(p uint16) { binary.BigEndian.PutUint16(b[0:2], p) }

// Payload returns the bytes after the header, bounded by the length field.
// Call only after Valid.
func (b UDP) Payload() []byte { return b[UDPSize:b.Length()] }

// Valid reports whether b holds a UDP header whose length field fits b.
func (b UDP) Valid() bool {
	if len(b) < UDPSize {
		return false
	}
	l := int(b.Length())
	return l >= UDPSize && l <= len(b)
}

// Encode writes a UDP header with a zero checksum for a payload of
// payloadLen bytes.
func (b UDP) Encode(src, dst uint16, payloadLen int) {
	binary.BigEndian.PutUint16(b[0:2], src)
	binary.BigEndian.PutUint16(b[2:4], dst)
	binary.BigEndian.PutUint16(b[4:6], uint16(UDPSize+payloadLen))
	b[6], b[7] = 0, 0
}

// FiveTuple reads (src IP, dst IP, proto, src port, dst port) from an IPv4
// packet for ECMP hashing. Ports are 0 for packets other than UDP and TCP or
// when the transport header is truncated. The packet must have passed
// IPv4.Validate.
func FiveTuple(ip IPv4) (src, dst uint32, proto uint8, sport, dport uint16) {
	src, dst, proto = ip.SrcU32(), ip.DstU32(), ip.Protocol()
	if proto == IPv4ProtoUDP || proto == IPv4ProtoTCP {
		if hl := ip.HeaderLength(); len(ip) >= hl+4 {
			sport = binary.BigEndian.Uint16(ip[hl:])
			dport = binary.BigEndian.Uint16(ip[hl+2:])
		}
	}
	return
}
