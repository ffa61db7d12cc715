package fabric

import (
	"math"
	"math/rand/v2"
)

// crandom is netem's correlated random number generator (get_crandom in
// the kernel's sch_netem.c): each 32-bit draw mixes a fresh uniform number
// with the previous draw, weighted by the correlation rho,
//
//	next = (fresh*(2^32 - (rho+1)) + last*(rho+1)) >> 32
//
// with rho the correlation scaled to 32 bits. Its zero value is
// uncorrelated.
type crandom struct {
	rho  uint32
	last uint32
}

// newCrandom returns netem's generator for correlation c (0..1), its first
// "previous draw" random as netem's is (drawn from r only when c > 0, so
// an uncorrelated clause leaves r's stream alone).
func newCrandom(c float64, r *rand.Rand) crandom {
	if c <= 0 {
		return crandom{}
	}
	return crandom{rho: probU32(c), last: r.Uint32()}
}

// next returns the next draw.
func (s *crandom) next(r *rand.Rand) uint32 {
	v := r.Uint32()
	if s.rho == 0 {
		return v
	}
	rho := uint64(s.rho) + 1
	s.last = uint32((uint64(v)*((1<<32)-rho) + uint64(s.last)*rho) >> 32)
	return s.last
}

// hit reports whether an event of probability p happens, as netem tests
// it: p scaled to 32 bits, non-zero, at least the draw.
func (s *crandom) hit(p float64, r *rand.Rand) bool {
	t := probU32(p)
	return t != 0 && t >= s.next(r)
}

// unit returns the next draw as a fraction in [0, 1).
func (s *crandom) unit(r *rand.Rand) float64 { return float64(s.next(r)) / (1 << 32) }

// probU32 scales a probability to 32 bits as tc does (p * UINT32_MAX,
// rounded).
func probU32(p float64) uint32 {
	switch {
	case !(p > 0):
		return 0
	case p >= 1:
		return math.MaxUint32
	}
	return uint32(math.Round(p * math.MaxUint32))
}
