package rocev2

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

// The RoCEv2 invariant CRC (IBTA Annex A17.3.3; Linux rxe_icrc.c) is the
// Ethernet CRC-32 over a pseudo packet: 8 bytes of ones standing for the
// InfiniBand LRH that RoCEv2 does not carry, then the IPv4 header, UDP
// header and BTH with every field a router or switch may change masked to
// ones (IPv4 TOS, TTL and header checksum; UDP checksum; the BTH byte with
// FECN, BECN and reserved bits), then the rest of the transport packet up
// to the ICRC. The CRC is stored least significant byte first, as Ethernet
// stores its FCS, so Wireshark and real NICs agree with it.
//
// The pseudo header is fed byte by byte through a running CRC register so
// that nothing is copied or allocated per packet.

// crcLRH is the CRC register after the 8 masked LRH bytes, starting from
// all ones (rxe_icrc.c names this seed 0xdebb20e3).
const crcLRH uint32 = 0xdebb20e3

var crcTable = crc32.IEEETable

// icrcBounds checks that ip is an IPv4/UDP packet long enough to carry a
// BTH and an ICRC and returns the IPv4 header length and total length.
func icrcBounds(ip []byte) (hl, tl int, ok bool) {
	if len(ip) < header.IPv4MinSize || ip[0]>>4 != 4 {
		return 0, 0, false
	}
	v := header.IPv4(ip)
	hl, tl = v.HeaderLength(), int(v.TotalLength())
	if hl < header.IPv4MinSize || tl > len(ip) || tl < hl+header.UDPSize+ib.BTHSize+ib.ICRCSize ||
		v.Protocol() != header.IPv4ProtoUDP {
		return 0, 0, false
	}
	return hl, tl, true
}

// icrc computes the ICRC of the IPv4 packet ip[:tl] whose header is hl
// bytes long.
func icrc(ip []byte, hl, tl int) uint32 {
	r := crcLRH
	for i := 0; i < hl; i++ {
		b := ip[i]
		switch i {
		case 1, 8, 10, 11: // TOS, TTL, header checksum
			b = 0xff
		}
		r = crcTable[byte(r)^b] ^ r>>8
	}
	udp := ip[hl:]
	for i := 0; i < header.UDPSize; i++ {
		b := udp[i]
		if i >= 6 { // UDP checksum
			b = 0xff
		}
		r = crcTable[byte(r)^b] ^ r>>8
	}
	bth := udp[header.UDPSize:]
	for i := 0; i < ib.BTHSize; i++ {
		b := bth[i]
		if i == 4 { // FECN, BECN, reserved
			b = 0xff
		}
		r = crcTable[byte(r)^b] ^ r>>8
	}
	// crc32.Update inverts on entry and exit; handing it the inverted
	// register continues the same CRC and returns the final inverted value.
	return crc32.Update(^r, crcTable, ip[hl+header.UDPSize+ib.BTHSize:tl-ib.ICRCSize])
}

// SealICRC writes the RoCEv2 ICRC into the last four bytes of the IPv4
// packet ip (as bounded by its total length). The transport left those
// bytes as the trailer of its payload. Packets that are not IPv4/UDP or
// too short to hold a BTH and an ICRC are left unchanged.
func SealICRC(ip []byte) {
	hl, tl, ok := icrcBounds(ip)
	if !ok {
		return
	}
	binary.LittleEndian.PutUint32(ip[tl-ib.ICRCSize:tl], icrc(ip, hl, tl))
}

// CheckICRC reports whether the IPv4 packet ip carries a correct RoCEv2
// ICRC. Malformed packets report false.
func CheckICRC(ip []byte) bool {
	hl, tl, ok := icrcBounds(ip)
	if !ok {
		return false
	}
	return binary.LittleEndian.Uint32(ip[tl-ib.ICRCSize:tl]) == icrc(ip, hl, tl)
}
