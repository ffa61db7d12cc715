package sim

import (
	"hash/fnv"
	"math/rand/v2"
)

// NewRand returns a random stream for one component, derived from the lab
// seed and the component's name (a link's or a switch's). Each component
// draws from its own stream, so adding a link never changes what another
// link draws.
func NewRand(seed uint64, stream string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(stream))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// StreamSeed returns a 64-bit value derived from the seed and a name, for
// components that need a seed rather than a stream (an ECMP hash salt).
func StreamSeed(seed uint64, stream string) uint64 {
	return NewRand(seed, stream).Uint64()
}
