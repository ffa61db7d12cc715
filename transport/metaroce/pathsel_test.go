package metaroce

import (
	"math/rand/v2"
	"testing"
)

// TestPathSetOrder checks next and after against a scan of every number
// on random sets, empty and full ones included.
func TestPathSetOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		var s pathSet
		var in [256]bool
		density := r.IntN(5) // 0: empty; 4: about full
		for i := range in {
			if density > 0 && r.IntN(4) < density {
				in[i] = true
				s.add(i)
			}
		}
		if trial == 1 {
			s, in = pathSet{}, [256]bool{}
		}
		count := 0
		for _, b := range in {
			if b {
				count++
			}
		}
		if s.len() != count {
			t.Fatalf("trial %d: len %d, want %d", trial, s.len(), count)
		}
		for k := -1; k < 256; k++ {
			want := -1
			for i := k + 1; i < 256; i++ {
				if in[i] {
					want = i
					break
				}
			}
			if got := s.next(k); got != want {
				t.Fatalf("trial %d: next(%d) = %d, want %d", trial, k, got, want)
			}
			if want < 0 {
				want = s.next(-1)
			}
			if got := s.after(k); got != want {
				t.Fatalf("trial %d: after(%d) = %d, want %d", trial, k, got, want)
			}
		}
		for i := range in {
			if in[i] && r.IntN(2) == 0 {
				s.remove(i)
				in[i] = false
				if s.next(i-1) == i {
					t.Fatalf("trial %d: %d still in after remove", trial, i)
				}
			}
		}
	}
}
