package metaroce

import (
	"testing"
	"unsafe"
)

// TestSndPathSize guards a path's size: a connection allocates all its
// sending paths on first use (ensurePaths), and at 65,536 hosts x 128 paths
// touching that fresh memory was 28% of a k=64 fat tree's CPU time. The
// fields are ordered so that the small ones share words (408 -> 368
// bytes).
func TestSndPathSize(t *testing.T) {
	if n := unsafe.Sizeof(sndPath{}); n > 368 {
		t.Errorf("sndPath is %d bytes, want at most 368", n)
	}
}
