package softnic

import (
	"encoding/binary"
	"testing"
)

// refFill is the pattern's definition, one word at a time.
func refFill(b []byte, seed uint64) {
	v := mix64(seed)
	var t [8]byte
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(t[:], scramble(v))
		copy(b[i:], t[:])
		v += patternStep
	}
}

// TestPatternFillMatches checks the unrolled fill against the definition
// at lengths around every unrolling boundary, and that matches catches a
// flipped bit at any offset.
func TestPatternFillMatches(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 63, 64, 100, 4095, 4096, 4097, 4096 + 31, 8192 + 40, 3*4096 + 5} {
		got, want := make([]byte, n), make([]byte, n)
		fill(got, uint64(n))
		refFill(want, uint64(n))
		if string(got) != string(want) {
			t.Fatalf("len %d: fill differs from the reference", n)
		}
		if !matches(got, uint64(n)) {
			t.Fatalf("len %d: fill's output does not match", n)
		}
		if n > 0 && matches(got, uint64(n)+1) {
			t.Fatalf("len %d: matches another seed", n)
		}
		for _, i := range []int{0, n / 3, n / 2, n - 1} {
			if i < 0 || i >= n {
				continue
			}
			got[i] ^= 0x10
			if matches(got, uint64(n)) {
				t.Fatalf("len %d: flipped byte %d not caught", n, i)
			}
			got[i] ^= 0x10
		}
	}
}

func BenchmarkPatternFill(b *testing.B) {
	buf := make([]byte, 2<<20)
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		fill(buf, uint64(i))
	}
}

func BenchmarkPatternMatches(b *testing.B) {
	buf := make([]byte, 2<<20)
	fill(buf, 1)
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		if !matches(buf, 1) {
			b.Fatal("no match")
		}
	}
}
