package rocev2

import (
	"encoding/hex"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/mrlab/mrlab/internal/header"
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
