package metaroce

import (
	"math/rand/v2"
	"testing"
)

// TestSeqWindow checks the DSN window against a map model, across growth
// and wraparound.
func TestSeqWindow(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, start := range []uint32{0, 0xffffff00} {
		w := seqWindow{base: start, limit: 1 << 14}
		seen := map[uint32]bool{}
		next := start
		for step := 0; step < 20000; step++ {
			// Mostly in order, with holes that fill later.
			var s uint32
			if r.IntN(4) == 0 {
				s = w.base + uint32(r.IntN(int(next-w.base)+1))
			} else {
				s = next
				next++
			}
			if !w.inRange(s) {
				continue
			}
			if got, want := w.has(s), seen[s] || int32(s-w.base) < 0; got != want {
				t.Fatalf("step %d: has(%d) = %v, want %v", step, s, got, want)
			}
			w.add(s)
			seen[s] = true
			if !w.has(s) {
				t.Fatalf("step %d: %d not recorded", step, s)
			}
		}
		// base is the first unseen number.
		for s := start; s != w.base; s++ {
			if !seen[s] {
				t.Fatalf("base %d passed unseen %d", w.base, s)
			}
		}
		if seen[w.base] {
			t.Fatalf("base %d was seen", w.base)
		}
		if len(w.words)*64 > 1<<14 {
			t.Errorf("window grew to %d bits past its limit", len(w.words)*64)
		}
	}
}

// TestSACK checks the per-path window against a model: random arrival
// orders within the window, the first 20 across the 2^32 wrap.
func TestSACK(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 200; trial++ {
		start := uint32(r.Uint32())
		if trial < 20 {
			start = 0xffffffff - uint32(16*trial) // windows that straddle the 2^32 wrap
		}
		s := sack{cum: start}
		got := map[uint32]bool{}
		n := 1 + r.IntN(300)
		order := r.Perm(n)
		for _, k := range order {
			psn := start + uint32(k)
			out := s.add(psn)
			if int32(psn-s.cum) > 256 {
				continue
			}
			if out == sackTooFar {
				// Only allowed when psn is more than 256 past cum.
				continue
			}
			got[psn] = true
			if out == sackDup {
				t.Fatalf("fresh %d reported duplicate", psn)
			}
			// Model: cum is the first unreceived PSN, bits are the rest.
			cum := start
			for got[cum] {
				cum++
			}
			if s.cum != cum {
				t.Fatalf("cum %d, want %d", s.cum-start, cum-start)
			}
			for i := 0; i < 256; i++ {
				p := cum + 1 + uint32(i)
				if s.seen(p) != got[p] {
					t.Fatalf("bit %d (psn +%d): %v, want %v", i, p-start, s.seen(p), got[p])
				}
			}
			if s.add(psn) != sackDup {
				t.Fatalf("second add of %d not a duplicate", psn)
			}
		}
	}
}
