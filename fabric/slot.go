package fabric

import (
	"math"
	"math/rand/v2"
)

// slotState runs netem's slotting (Impairment.Slot) on one link direction:
// when the current or next slot opens, and what it still takes.
type slotState struct {
	cfg       Slot
	nextPs    int64 // when the next (or current) slot opened, ps
	pktsLeft  int
	bytesLeft int
}

// reset installs cfg at time nowPs. As in netem, the slot time starts at
// configuration, so the first packet finds it stale and opens a new one.
func (s *slotState) reset(cfg Slot, nowPs int64) {
	*s = slotState{cfg: cfg, nextPs: nowPs}
	s.refill()
}

func (s *slotState) refill() {
	s.pktsLeft, s.bytesLeft = s.cfg.Packets, s.cfg.Bytes
	if s.pktsLeft <= 0 {
		s.pktsLeft = math.MaxInt
	}
	if s.bytesLeft <= 0 {
		s.bytesLeft = math.MaxInt
	}
}

// open starts the next slot a drawn delay after fromPs (netem's
// get_slot_next).
func (s *slotState) open(fromPs int64, r *rand.Rand) {
	var d float64
	if s.cfg.UseDist {
		d = float64(s.cfg.Delay) + float64(s.cfg.Jitter)*distSample(s.cfg.Dist, r)
	} else {
		d = float64(s.cfg.Min) + r.Float64()*float64(s.cfg.Max-s.cfg.Min)
	}
	d = min(max(d, 0), float64(MaxDelay))
	s.nextPs = fromPs + int64(d*1000+0.5)
	s.refill()
}

// slotted returns when a packet of n bytes that came in at inPs (after the
// wire) and is due at duePs gets delivered under slotting: at once if a
// slot is open, else when the next one opens. Packets are processed in
// the order they leave the wire, as netem's queue releases them.
func (p *Port) slotted(inPs, duePs int64, n int) int64 {
	if !p.slotOn {
		return duePs
	}
	s := &p.ia.slot
	if s.nextPs < duePs {
		// The slot opened before this packet was due: netem draws a new
		// one from the time the packet came (it checks when the packet
		// reaches the head of its queue, which is then).
		s.open(inPs, p.rng)
	}
	at := max(duePs, s.nextPs)
	s.pktsLeft--
	s.bytesLeft -= n
	if s.pktsLeft <= 0 || s.bytesLeft <= 0 {
		s.open(at, p.rng)
	}
	return at
}

// wireLen is how many bytes a packet of n bytes occupies at the
// impairment's rate: netem's packet overhead, then whole cells of
// CellSize+CellOverhead bytes.
func (imp *Impairment) wireLen(n int) int {
	n += imp.RateOverhead
	if n < 0 {
		n = 0
	}
	if imp.CellSize > 0 {
		cells := (n + imp.CellSize - 1) / imp.CellSize
		n = cells * (imp.CellSize + imp.CellOverhead)
	}
	return max(n, 0)
}
