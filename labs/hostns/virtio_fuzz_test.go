package hostns

import "testing"

// FuzzSplitVirtio: a TUN read is what a lab host's programs made (a raw
// packet socket with a virtio-net header can set any GSO fields), so
// splitVirtio takes any bytes without a panic, and what it returns fits
// the buffers it was given.
func FuzzSplitVirtio(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, virtioHdrLen+20))
	f.Add(append([]byte{1, 1, 40, 0, 0xb4, 0x05, 20, 0, 16, 0}, make([]byte, 3000)...))
	f.Add(append([]byte{1, 3, 28, 0, 0x78, 0x05, 20, 0, 6, 0}, make([]byte, 3000)...))
	f.Fuzz(func(t *testing.T, in []byte) {
		bufs := make([][]byte, 8)
		for i := range bufs {
			bufs[i] = make([]byte, 16+2048)
		}
		sizes := make([]int, len(bufs))
		n, err := splitVirtio(in, bufs, sizes, 16)
		if err != nil {
			return
		}
		if n < 0 || n > len(bufs) {
			t.Fatalf("%d packets into %d buffers", n, len(bufs))
		}
		for i := range n {
			if sizes[i] < 0 || 16+sizes[i] > len(bufs[i]) {
				t.Fatalf("packet %d: size %d in a %d-byte buffer", i, sizes[i], len(bufs[i]))
			}
		}
	})
}
