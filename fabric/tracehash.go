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
	h       uint64
	events  uint64
	headers bool
}

var _ Observer = (*TraceHash)(nil)

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// NewTraceHash returns an empty trace hash.
func NewTraceHash() *TraceHash { return &TraceHash{h: fnvOffset} }

// NewHeaderTraceHash returns an empty trace hash that folds in each
// packet's length and its IPv4 and UDP headers instead of all its bytes:
// what stays the same when only payload bytes differ (a run in synthetic
// payload mode and the same run with real bytes).
func NewHeaderTraceHash() *TraceHash { return &TraceHash{h: fnvOffset, headers: true} }

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
		d := p.Data()
		at, hole := p.Hole()
		if t.headers {
			h = fnvU64(h, uint64(p.Len()))
			n := 0
			if len(d) > 0 && d[0]>>4 == 4 {
				n = min(p.Len(), int(d[0]&0xf)*4+8) // IPv4 and UDP headers
			}
			if hole > 0 && n > at {
				hole = min(hole, n-at)
				n -= hole
			} else {
				at, hole = n, 0
			}
			d = d[:n]
		}
		if hole == 0 {
			at = len(d)
		}
		for _, c := range d[:at] {
			h = (h ^ uint64(c)) * fnvPrime
		}
		// A header-only packet's elided bytes are zeros: each multiplies
		// the hash by the prime, as hashing them would.
		h *= fnvPow(hole)
		for _, c := range d[at:] {
			h = (h ^ uint64(c)) * fnvPrime
		}
	}
	t.h = h
	t.events++
}

// fnvPow returns fnvPrime to the n (mod 2^64): FNV-1a over n zero bytes.
func fnvPow(n int) uint64 {
	r, b := uint64(1), uint64(fnvPrime)
	for ; n > 0; n >>= 1 {
		if n&1 != 0 {
			r *= b
		}
		b *= b
	}
	return r
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
