package wire

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestCRCZeros: feeding n zeros in closed form equals feeding them byte by
// byte, for lengths around every power of two a packet can hold and from
// arbitrary registers.
func TestCRCZeros(t *testing.T) {
	zeros := make([]byte, 1<<17)
	rng := rand.New(rand.NewPCG(1, 2))
	var lens []int
	for k := 0; k <= 16; k++ {
		lens = append(lens, 1<<k-1, 1<<k, 1<<k+1)
	}
	// Past the tables (2^14): the high bits go by matrix, the low ones by
	// table.
	lens = append(lens, 0, 4000, 4096, 4097, 9000, 9216, 1<<14+4095, 1<<17-1, 1<<17)
	for _, n := range lens {
		for _, crc := range []uint32{0, ^uint32(0), rng.Uint32(), rng.Uint32()} {
			want := crc32.Update(crc, castagnoli, zeros[:n])
			if got := crcZeros(crc, n); got != want {
				t.Errorf("crcZeros(%#x, %d) = %#x, want %#x", crc, n, got, want)
			}
		}
	}
	// Lengths too long to feed byte by byte: n zeros then m are n+m,
	// through different bits of the length (up to the top powers).
	for _, nm := range [][2]int{{1 << 31, 1 << 31}, {1<<32 - 1, 1}, {1 << 40, 1<<40 + 12345}, {1 << 62, 1 << 61}} {
		crc := rng.Uint32()
		if a, b := crcZeros(crcZeros(crc, nm[0]), nm[1]), crcZeros(crc, nm[0]+nm[1]); a != b {
			t.Errorf("crcZeros of %d then %d zeros = %#x, of %d at once %#x", nm[0], nm[1], a, nm[0]+nm[1], b)
		}
	}
}

// TestCRCZerosAnyLengthsNoAllocs: any sequence of lengths, however they
// would share a cache's slots, costs no allocation (the 16-slot cache of
// per-length tables this replaced allocated a 4 KiB table on every miss).
func TestCRCZerosAnyLengthsNoAllocs(t *testing.T) {
	lens := thrashLengths()
	i := 0
	if a := testing.AllocsPerRun(1000, func() {
		crcZeros(0x1234, lens[i%len(lens)])
		i++
	}); a != 0 {
		t.Errorf("crcZeros over %d cycling lengths allocates %v times a call", len(lens), a)
	}
}

// thrashLengths returns 64 distinct payload lengths up to 4 KiB, more than
// any 16-slot cache of per-length tables holds: cycled, at least 48 of
// every 64 calls would miss such a cache whatever its hash.
func thrashLengths() []int {
	lens := make([]int, 64)
	for i := range lens {
		lens[i] = 4096 - 61*i
	}
	return lens
}

// FuzzCRCZeros: for any register and length, crcZeros is the CRC over
// that many zeros fed byte by byte.
func FuzzCRCZeros(f *testing.F) {
	f.Add(uint32(0), uint32(4096))
	f.Add(^uint32(0), uint32(4095))
	f.Add(uint32(0xdeadbeef), uint32(9216))
	zeros := make([]byte, 1<<17)
	f.Fuzz(func(t *testing.T, crc, n uint32) {
		n %= uint32(len(zeros) + 1)
		if got, want := crcZeros(crc, int(n)), crc32.Update(crc, castagnoli, zeros[:n]); got != want {
			t.Fatalf("crcZeros(%#x, %d) = %#x, want %#x", crc, n, got, want)
		}
	})
}

// TestSealParseZeros: a packet whose payload is zeros gets the same trailer
// from SealZeros as from Seal, for every span of those zeros (clipped where
// it reaches past the packet); ParseZeros accepts it, and still rejects it
// when a byte outside the span changes.
func TestSealParseZeros(t *testing.T) {
	const payload = 4096
	n := DataSize + payload
	f := DataFields{Common: Common{Type: TypeWrite, PSN: 7}, MsgLen: 1 << 20, Addr: 1 << 20, Offset: 8192}
	want := make([]byte, n+TrailerSize)
	Data(want).Put(&f)
	Seal(want, n)
	spans := []struct{ at, z int }{
		{DataSize, payload}, {DataSize, payload + 100}, {DataSize + 1, payload - 1},
		{DataSize + 2048, 1}, {DataSize, 0}, {n, 10}, {-1, 5}, {DataSize + 100, 3000},
	}
	for _, s := range spans {
		pkt := make([]byte, n+TrailerSize)
		Data(pkt).Put(&f)
		if got := SealZeros(pkt, n, s.at, s.z); got != n+TrailerSize {
			t.Fatalf("SealZeros returned %d, want %d", got, n+TrailerSize)
		}
		if string(pkt) != string(want) {
			t.Errorf("span %+v: SealZeros trailer %x, Seal's %x", s, pkt[n:], want[n:])
		}
		typ, body, err := ParseZeros(pkt, s.at, s.z)
		if err != nil || typ != TypeWrite || len(body) != n {
			t.Errorf("span %+v: ParseZeros = %v, %d bytes, %v", s, typ, len(body), err)
		}
		pkt[DataSize-1] ^= 0x10 // a header byte, outside every span above
		if _, _, err := ParseZeros(pkt, s.at, s.z); err != ErrChecksum {
			t.Errorf("span %+v: a flipped header byte gives %v, want ErrChecksum", s, err)
		}
	}
}

func TestCRCZerosNoAllocs(t *testing.T) {
	pkt := make([]byte, DataSize+4096+TrailerSize)
	Data(pkt).Put(&DataFields{Common: Common{Type: TypeWrite}, MsgLen: 4096})
	if a := testing.AllocsPerRun(100, func() {
		SealZeros(pkt, DataSize+4096, DataSize, 4096)
		_, _, _ = ParseZeros(pkt, DataSize, 4096)
	}); a != 0 {
		t.Errorf("SealZeros+ParseZeros allocate %v times", a)
	}
}

// BenchmarkCRCZeros: the CRC of a zero span of one length over and over
// (mss: 4 KiB, every full data packet's) and of lengths cycling through
// more values than a 16-slot cache of per-length tables holds (thrash:
// last chunks of many message sizes; the cache this replaced rebuilt a
// 4 KiB table on most calls).
func BenchmarkCRCZeros(b *testing.B) {
	b.Run("mss", func(b *testing.B) {
		var c uint32
		for b.Loop() {
			c = crcZeros(c, 4096)
		}
	})
	b.Run("thrash", func(b *testing.B) {
		lens := thrashLengths()
		var c uint32
		i := 0
		for b.Loop() {
			c = crcZeros(c, lens[i])
			if i++; i == len(lens) {
				i = 0
			}
		}
	})
}

// BenchmarkSealData: a 4 KiB data packet's trailer, reading the payload
// (bytes) and with the payload known to be zeros (zeros), in one run.
func BenchmarkSealData(b *testing.B) {
	pkt := make([]byte, DataSize+4096+TrailerSize)
	Data(pkt).Put(&DataFields{Common: Common{Type: TypeWrite}, MsgLen: 4096})
	b.Run("bytes", func(b *testing.B) {
		for b.Loop() {
			Seal(pkt, DataSize+4096)
		}
	})
	b.Run("zeros", func(b *testing.B) {
		for b.Loop() {
			SealZeros(pkt, DataSize+4096, DataSize, 4096)
		}
	})
}

// FuzzParseZeros: for any bytes and any span of them made zero, ParseZeros
// (which does not read the span) gives exactly Parse's result, and a
// packet sealed with SealZeros over that span is the one Seal makes.
func FuzzParseZeros(f *testing.F) {
	for _, p := range seedPackets() {
		f.Add(p, uint16(DataSize), uint16(len(p)))
	}
	f.Fuzz(func(t *testing.T, pkt []byte, at, z uint16) {
		if int(at) < len(pkt) {
			clear(pkt[at:min(len(pkt), int(at)+int(z))])
		}
		typ, body, err := Parse(pkt)
		typ2, body2, err2 := ParseZeros(pkt, int(at), int(z))
		if typ != typ2 || len(body) != len(body2) || err != err2 {
			t.Fatalf("Parse = %v, %d bytes, %v; ParseZeros(%d, %d) = %v, %d bytes, %v", typ, len(body), err, at, z, typ2, len(body2), err2)
		}
		if n := len(pkt) - TrailerSize; n >= 0 {
			want := append([]byte(nil), pkt...)
			Seal(want, n)
			SealZeros(pkt, n, int(at), int(z))
			if string(pkt) != string(want) {
				t.Fatalf("SealZeros(%d, %d) trailer %x, Seal's %x", at, z, pkt[n:], want[n:])
			}
		}
	})
}

// TestCRCZerosConcurrent: goroutines asking for any lengths at once (a
// partitioned run's loops) each get the CRC over the zeros (run with
// -race).
func TestCRCZerosConcurrent(t *testing.T) {
	zeros := make([]byte, 1<<13)
	done := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func(g int) {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for i := 0; i < 300; i++ {
				n := 1 + rng.IntN(len(zeros)-1)
				crc := rng.Uint32()
				if got, want := crcZeros(crc, n), crc32.Update(crc, castagnoli, zeros[:n]); got != want {
					done <- fmt.Errorf("crcZeros(%#x, %d) = %#x, want %#x", crc, n, got, want)
					return
				}
			}
			done <- nil
		}(g)
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
