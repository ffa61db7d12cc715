package fabric

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestCrandomArithmetic checks get_crandom's 32-bit arithmetic on values
// worked out by hand: next = (fresh*(2^32-(rho+1)) + last*(rho+1)) >> 32.
func TestCrandomArithmetic(t *testing.T) {
	if got := probU32(0.25); got != 1073741824 { // 0.25*(2^32-1) rounded
		t.Fatalf("probU32(25%%) = %d", got)
	}
	for _, c := range []struct {
		rho, last, fresh, want uint32
	}{
		// fresh 2^31, last 0, rho 2^30: 2^31*(2^32-2^30-1) >> 32 = (2^32-2^30-1)/2, floored.
		{1 << 30, 0, 1 << 31, 1610612735},
		// last 2^32-1, fresh 0, rho 2^30: (2^32-1)*(2^30+1) >> 32 = 2^30 (the low part is dropped).
		{1 << 30, math.MaxUint32, 0, 1 << 30},
		// rho 2^32-1 keeps the last value whatever is drawn.
		{math.MaxUint32, 12345, 999999, 12345},
	} {
		s := crandom{rho: c.rho, last: c.last}
		r := rand.New(constSource(c.fresh))
		if got := s.next(r); got != c.want || s.last != c.want {
			t.Errorf("rho %d last %d fresh %d: got %d, want %d", c.rho, c.last, c.fresh, got, c.want)
		}
	}
	// No correlation: the fresh draw itself.
	var s crandom
	if got := s.next(rand.New(constSource(777))); got != 777 {
		t.Errorf("uncorrelated: %d", got)
	}
}

// constSource yields the same 32-bit value (in the high half, which
// rand.Rand.Uint32 returns) every time.
type constSource uint32

func (c constSource) Uint64() uint64 { return uint64(c) << 32 }
