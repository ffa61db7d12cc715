package verbsperf

import "testing"

// BenchmarkPattern is one 64 KiB message's fill (the client's work per
// message) and check (the server's), as perf's default write_bw does.
func BenchmarkPattern(b *testing.B) {
	s := &side{key: 0x1234567}
	buf := make([]byte, 64<<10)
	b.Run("fill", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		for i := 0; b.Loop(); i++ {
			s.fill(buf, uint64(i))
		}
	})
	b.Run("check", func(b *testing.B) {
		s.fill(buf, 7)
		b.SetBytes(int64(len(buf)))
		for b.Loop() {
			if s.firstBad(buf, 7) >= 0 {
				b.Fatal("bad")
			}
		}
	})
}
