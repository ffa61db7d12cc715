package header

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"golang.org/x/net/ipv4"
)

func TestIPv4EncodeMatchesXNet(t *testing.T) {
	b := make(IPv4, 20+8+4)
	f := IPv4Fields{TOS: 0x02, TotalLength: 32, ID: 77, Protocol: IPv4ProtoUDP,
		Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.1.2")}
	b.Encode(&f)
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	h, err := ipv4.ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.TOS != 2 || h.TotalLen != 32 || h.ID != 77 || h.Protocol != 17 || h.TTL != 64 ||
		h.Src.String() != "198.18.0.1" || h.Dst.String() != "198.18.1.2" {
		t.Fatalf("x/net parsed %+v", h)
	}
	if b.Src() != f.Src || b.Dst() != f.Dst || b.ECN() != ECNECT0 {
		t.Fatal("accessors disagree")
	}
}

func TestIncrementalChecksum(t *testing.T) {
	b := make(IPv4, 20)
	b.Encode(&IPv4Fields{TOS: 0xb8 | ECNECT1, TotalLength: 20, ID: 0xbeef, TTL: 3, Protocol: 17,
		Src: netip.MustParseAddr("198.18.7.7"), Dst: netip.MustParseAddr("198.19.255.254")})
	b.SetECN(ECNCE)
	if b.ECN() != ECNCE || b.TOS()>>2 != 0xb8>>2 {
		t.Fatalf("tos = %#x", b.TOS())
	}
	if err := b.Validate(); err != nil {
		t.Fatalf("after SetECN: %v", err)
	}
	for b.TTL() > 0 {
		b.DecTTL()
		if err := b.Validate(); err != nil {
			t.Fatalf("after DecTTL to %d: %v", b.TTL(), err)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	good := make(IPv4, 28)
	good.Encode(&IPv4Fields{TotalLength: 28, Protocol: 17,
		Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2")})
	cases := []struct {
		name string
		mut  func(b IPv4) IPv4
		want error
	}{
		{"short", func(b IPv4) IPv4 { return b[:19] }, ErrTruncated},
		{"v6", func(b IPv4) IPv4 { b[0] = 0x65; return b }, ErrVersion},
		{"len", func(b IPv4) IPv4 { return b[:24] }, ErrLength},
		{"sum", func(b IPv4) IPv4 { b[15] ^= 1; return b }, ErrChecksum},
	}
	for _, c := range cases {
		b := append(IPv4(nil), good...)
		if err := c.mut(b).Validate(); err != c.want {
			t.Errorf("%s: got %v want %v", c.name, err, c.want)
		}
	}
}

func TestUDPAndFiveTuple(t *testing.T) {
	p := make([]byte, 20+8+3)
	IPv4(p).Encode(&IPv4Fields{TotalLength: 31, Protocol: IPv4ProtoUDP,
		Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2")})
	u := UDP(p[20:])
	u.Encode(49153, 4791, 3)
	if !u.Valid() || u.SrcPort() != 49153 || u.DstPort() != 4791 || len(u.Payload()) != 3 {
		t.Fatal("udp view")
	}
	s, d, pr, sp, dp := FiveTuple(IPv4(p))
	if s != 0xc6120001 || d != 0xc6120002 || pr != 17 || sp != 49153 || dp != 4791 {
		t.Fatalf("5-tuple %x %x %d %d %d", s, d, pr, sp, dp)
	}
	if UDP(p[20:27]).Valid() {
		t.Fatal("short UDP valid")
	}
}

func FuzzIPv4(f *testing.F) {
	p := make([]byte, 28)
	IPv4(p).Encode(&IPv4Fields{TotalLength: 28, Protocol: 17,
		Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2")})
	f.Add(p)
	f.Add([]byte{0x4f, 0, 0, 20})
	f.Fuzz(func(t *testing.T, b []byte) {
		ip := IPv4(b)
		if ip.Validate() != nil {
			return
		}
		_ = ip.Payload()
		FiveTuple(ip)
		ip.SetECN(ECNCE)
		if ip.Validate() != nil {
			t.Fatal("SetECN broke a valid header")
		}
		if u := UDP(ip.Payload()); ip.Protocol() == IPv4ProtoUDP && u.Valid() {
			_ = u.Payload()
		}
	})
}

// FuzzIPv4ValidateIn: a header-only packet's header is valid for exactly
// the packet sizes from its total length up, and ValidateIn of the bytes
// held is Validate; it never panics.
func FuzzIPv4ValidateIn(f *testing.F) {
	p := make([]byte, 28)
	IPv4(p).Encode(&IPv4Fields{TotalLength: 4124, Protocol: 17,
		Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2")})
	f.Add(p, uint16(4096))
	f.Add([]byte{0x45, 0, 0, 20}, uint16(0))
	f.Fuzz(func(t *testing.T, b []byte, extra uint16) {
		ip := IPv4(b)
		if (ip.ValidateIn(len(b)) == nil) != (ip.Validate() == nil) {
			t.Fatal("ValidateIn(len) disagrees with Validate")
		}
		err := ip.ValidateIn(len(b) + int(extra))
		if err != nil || len(b) < IPv4MinSize {
			return
		}
		tl := int(ip.TotalLength())
		if tl > len(b)+int(extra) || tl < ip.HeaderLength() {
			t.Fatalf("total length %d accepted in a %d-byte packet", tl, len(b)+int(extra))
		}
		if ip.ValidateIn(tl-1) == nil {
			t.Fatal("accepted in a packet shorter than its total length")
		}
		FiveTuple(ip[:min(tl, len(ip))])
	})
}

// TestChecksumWordByWord: Checksum reading eight bytes at a time equals
// the word-by-word sum, for every length up to 70 and random bytes.
func TestChecksumWordByWord(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ref := func(b []byte, initial uint32) uint16 {
		sum := initial
		for len(b) >= 2 {
			sum += uint32(b[0])<<8 | uint32(b[1])
			b = b[2:]
		}
		if len(b) == 1 {
			sum += uint32(b[0]) << 8
		}
		for sum>>16 != 0 {
			sum = sum&0xffff + sum>>16
		}
		return uint16(sum)
	}
	for n := 0; n <= 70; n++ {
		for trial := 0; trial < 20; trial++ {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(rng.Uint32())
				if trial == 0 {
					b[i] = 0xff
				}
			}
			initial := rng.Uint32() >> 8
			if got, want := Checksum(b, initial), ref(b, initial); got != want {
				t.Fatalf("len %d: Checksum %#x, want %#x", n, got, want)
			}
		}
		// Zeros sum to 0, not to the other zero, 0xffff (what a sum
		// with an end-around carry gives if it is not careful).
		if got := Checksum(make([]byte, n), 0); got != 0 {
			t.Fatalf("len %d: Checksum of zeros %#x, want 0", n, got)
		}
	}
}
