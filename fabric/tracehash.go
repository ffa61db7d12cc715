package fabric

import (
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// TraceHash is an Observer that folds every event into an FNV-1a 64-bit
// hash: time, event, point (link index and node name), drop reason and the
// packet's bytes. Two runs with equal hashes saw the same packets at the
// same places at the same times. It allocates nothing.
type TraceHash struct {
	h      uint64
	events uint64
}

var _ Observer = (*TraceHash)(nil)

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// NewTraceHash returns an empty trace hash.
func NewTraceHash() *TraceHash { return &TraceHash{h: fnvOffset} }

// Observe implements Observer.
func (t *TraceHash) Observe(now sim.Time, ev Event, pt Point, p *packet.Buffer, r DropReason) {
	h := t.h
	h = fnvU64(h, uint64(now))
	h = (h ^ uint64(ev)) * fnvPrime
	h = fnvU64(h, uint64(int64(pt.Link)))
	for i := 0; i < len(pt.Node); i++ {
		h = (h ^ uint64(pt.Node[i])) * fnvPrime
	}
	h = (h ^ uint64(r)) * fnvPrime
	if p != nil {
		for _, c := range p.Data() {
			h = (h ^ uint64(c)) * fnvPrime
		}
	}
	t.h = h
	t.events++
}

func fnvU64(h, v uint64) uint64 {
	for i := 0; i < 8; i++ {
		h = (h ^ (v & 0xff)) * fnvPrime
		v >>= 8
	}
	return h
}

// Sum returns the hash of the events so far.
func (t *TraceHash) Sum() uint64 { return t.h }

// Events returns how many events were hashed.
func (t *TraceHash) Events() uint64 { return t.events }
