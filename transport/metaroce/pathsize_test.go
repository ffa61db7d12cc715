package metaroce

import (
	"testing"
	"unsafe"
)

// TestSndPathSize guards a path's size. Every path of a connection has
// its small part from the connection's first send (ensurePaths): at
// 65,536 hosts x 128 paths touching that fresh memory was 28% of a k=64
// fat tree's CPU time when it was the whole path (368 bytes). The cold
// part (pathCold) comes with the path's first packet; its fields are
// ordered so that the small ones share words.
func TestSndPathSize(t *testing.T) {
	if n := unsafe.Sizeof(sndPath{}); n > 40 {
		t.Errorf("sndPath is %d bytes, want at most 40", n)
	}
	if n := unsafe.Sizeof(pathCold{}); n > 320 {
		t.Errorf("pathCold is %d bytes, want at most 320 (an allocation of 320)", n)
	}
}
