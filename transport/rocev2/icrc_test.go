package rocev2

import (
	"encoding/hex"
	"hash/crc32"
	"net/netip"
	"strings"
	"testing"

	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

// cx4CNP is a RoCEv2 CNP captured on a Mellanox ConnectX-4 Lx, from the
// Ethernet header's end to the ICRC (scapy's test/contrib/roce.uts, "RoCE
// CNP captured on ConnectX-4 Lx"). Its ICRC bytes on the wire are
// 82 fd 00 2a: hardware-made, so it checks the masking, the LRH seed and
// the byte order together.
const cx4CNP = "45c2003c718c40004011916 10a0011010a001201" +
	"000012b700280000" +
	"8100ffff400001180000 0000" +
	"00000000000000000000000000000000" +
	"82fd002a"

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestICRCKnownVector(t *testing.T) {
	pkt := mustHex(t, cx4CNP)
	if err := header.IPv4(pkt).Validate(); err != nil {
		t.Fatalf("vector is not a valid IPv4 packet: %v", err)
	}
	if !CheckICRC(pkt) {
		t.Fatalf("CheckICRC rejects a packet sealed by a ConnectX-4")
	}
	want := append([]byte(nil), pkt[len(pkt)-4:]...)
	clear(pkt[len(pkt)-4:])
	SealICRC(pkt)
	if got := pkt[len(pkt)-4:]; string(got) != string(want) {
		t.Fatalf("SealICRC wrote % x, the NIC wrote % x", got, want)
	}
}

func TestICRCSeed(t *testing.T) {
	// rxe_icrc.c: the seed is the CRC register after 8 bytes of 0xff.
	ones := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	if got := ^crc32.ChecksumIEEE(ones); got != crcLRH {
		t.Fatalf("register after masked LRH = %#x, want %#x", got, crcLRH)
	}
}

// TestICRCMaskedFieldsAndBitFlips seals a WRITE packet and flips every bit
// in turn: bits in the fields RoCEv2 masks (those a router or switch may
// rewrite: IPv4 TOS/ECN, TTL, header checksum, UDP checksum, BTH
// FECN/BECN/reserved) keep the ICRC valid; every other bit breaks it.
func TestICRCMaskedFieldsAndBitFlips(t *testing.T) {
	payload := make([]byte, ib.BTHSize+ib.RETHSize+37+3+ib.ICRCSize)
	ib.BTH(payload).Encode(&ib.BTHFields{Opcode: ib.OpWriteOnly, PadCount: 3, PKey: 0xffff, DestQP: 0x123, AckReq: true, PSN: 77})
	ib.RETH(payload[ib.BTHSize:]).Encode(0x1000, 9, 37)
	fill(payload[ib.BTHSize+ib.RETHSize:ib.BTHSize+ib.RETHSize+37], 1)
	pkt := make([]byte, framing+len(payload))
	header.IPv4(pkt).Encode(&header.IPv4Fields{TOS: header.ECNECT0, TotalLength: uint16(len(pkt)), ID: 5,
		Protocol: header.IPv4ProtoUDP, Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2")})
	header.UDP(pkt[header.IPv4MinSize:]).Encode(0xc123, UDPPort, len(payload))
	copy(pkt[framing:], payload)
	SealICRC(pkt)
	if !CheckICRC(pkt) {
		t.Fatal("sealed packet fails its check")
	}
	masked := map[int]bool{1: true, 8: true, 10: true, 11: true, 26: true, 27: true, framing + 4: true}
	for i := range pkt {
		for bit := 0; bit < 8; bit++ {
			pkt[i] ^= 1 << bit
			got := CheckICRC(pkt)
			pkt[i] ^= 1 << bit
			if got != masked[i] {
				t.Errorf("byte %d bit %d flipped: CheckICRC %v, want %v", i, bit, got, masked[i])
			}
		}
	}
	// A switch marking CE (which rewrites TOS and the header checksum)
	// leaves the ICRC valid.
	header.IPv4(pkt).SetECN(header.ECNCE)
	if !CheckICRC(pkt) {
		t.Fatal("CE marking broke the ICRC")
	}
}

func TestICRCAllocatesNothing(t *testing.T) {
	pkt := mustHex(t, cx4CNP)
	if a := testing.AllocsPerRun(100, func() { SealICRC(pkt); CheckICRC(pkt) }); a != 0 {
		t.Fatalf("%v allocations per seal+check", a)
	}
}
