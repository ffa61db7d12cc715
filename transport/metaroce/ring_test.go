package metaroce

import "testing"

// TestRegrow: a grown ring holds every entry of the window under its own
// number, also when the window straddles the 2^32 wrap, and nothing else.
func TestRegrow(t *testing.T) {
	tests := []struct {
		name       string
		base, next uint32
		from, to   int
	}{
		{"empty ring", 5, 5, 0, 4},
		{"full ring of 4 to 8", 2, 6, 4, 8},
		{"part of a ring", 9, 12, 8, 32},
		{"across the wrap", 0xfffffffe, 2, 4, 16},
	}
	for _, tc := range tests {
		old := make([]uint64, tc.from) // entry: the number + 1 (0: empty)
		for s := tc.base; s != tc.next; s++ {
			old[s&uint32(tc.from-1)] = uint64(s) + 1
		}
		ring := regrow(old, tc.to, tc.base, tc.next)
		if len(ring) != tc.to {
			t.Fatalf("%s: %d slots, want %d", tc.name, len(ring), tc.to)
		}
		n := 0
		for s := tc.base; s != tc.next; s++ {
			if got := ring[s&uint32(tc.to-1)]; got != uint64(s)+1 {
				t.Errorf("%s: slot of %#x holds %#x", tc.name, s, got-1)
			}
			n++
		}
		for _, v := range ring {
			if v != 0 {
				n--
			}
		}
		if n != 0 {
			t.Errorf("%s: %d entries outside the window", tc.name, -n)
		}
	}
}
