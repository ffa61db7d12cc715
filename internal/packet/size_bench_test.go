package packet

import "testing"

// BenchmarkNewBuffer reports, with -benchmem, the bytes one packet in
// flight costs in each inline class: a header-only data packet or a short
// ACK (tiny: 352 B, 384 while the headroom was 64) and an ACK with further
// SACK records (short: 480 B, 512 before). A pool keeps every buffer it
// ever allocated, so the most packets in flight at once, times these,
// is what a run's packets hold (about 4,000 tiny ones at 128 hosts,
// 45,000 at 1,024). TestTinyPacketOneAllocation fails past these sizes.
//
//	go test ./internal/packet -run '^$' -bench NewBuffer -benchmem
func BenchmarkNewBuffer(b *testing.B) {
	for _, c := range []struct {
		name string
		size int
	}{{"tiny", tinySize}, {"short", shortSize}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			p := NewPool()
			for range b.N {
				p.get(c.size) // never freed: every get allocates
			}
		})
	}
}
