package fabric

import "github.com/mrlab/mrlab/internal/sim"

// Impairment is a netem-style impairment of one link direction. Its zero
// value impairs nothing. ParseImpairment reads netem's spelling.
//
// The *Corr fields are netem's correlations (0..1): each draw for that
// clause mixes a fresh uniform random number with the previous draw,
// next = (1-c)*fresh + c*last, in netem's 32-bit arithmetic. As tc-netem(8)
// says, this "isn't a true statistical correlation, but an approximation":
// it makes events come in runs, and it also pulls draws toward the middle,
// so a correlated "loss 10% 50%" loses fewer than 10% of packets, exactly
// as netem does.
type Impairment struct {
	Loss      LossModel
	Delay     sim.Time // added delay (on top of the link's propagation delay)
	Jitter    sim.Time
	DelayCorr float64
	DelayDist Distribution
	// ECN marks packets the loss model would drop instead of dropping
	// them (netem's "ecn"): an ECN-capable packet (ECT(0), ECT(1)) gets CE,
	// one already CE passes, a Not-ECT packet is still dropped.
	ECN         bool
	Duplicate   float64 // probability
	DupCorr     float64
	Corrupt     float64 // probability of one flipped bit
	CorruptCorr float64
	// Reorder sends this fraction of packets with no added delay (netem's
	// "reorder P" with a delay set), so they overtake delayed ones.
	Reorder     float64
	ReorderCorr float64
	// Rate, if non-zero, overrides the link rate (a degraded link).
	// RateOverhead, CellSize and CellOverhead are netem's rate arguments
	// PACKETOVERHEAD, CELLSIZE and CELLOVERHEAD: a packet of n bytes is
	// serialized as n+RateOverhead bytes (at least 0), and with a cell size
	// as that many bytes rounded up to whole cells of CellSize+CellOverhead
	// bytes (ATM: 53-byte cells carrying 48).
	Rate         float64
	RateOverhead int
	CellSize     int
	CellOverhead int
	// Slot holds delivery back to slots (netem's "slot"), zero if unset.
	Slot Slot
}

// Slot is netem's slotting: delivery is held back to slots, as on a
// slotted MAC (Wi-Fi, DOCSIS, LTE). Packets that are due wait for the next
// slot; a slot takes up to Packets packets and Bytes bytes (0: no limit)
// and then the next slot opens after a delay drawn uniformly from
// [Min, Max] (or, with Dist set, Delay plus Jitter times a draw from the
// distribution). A link that has been idle opens a slot that delay after
// the next packet comes.
type Slot struct {
	Min, Max      sim.Time
	UseDist       bool
	Dist          Distribution
	Delay, Jitter sim.Time
	Packets       int
	Bytes         int
}

// IsZero reports whether no slotting is configured.
func (s Slot) IsZero() bool { return s == Slot{} }

// LossKind selects a loss model.
type LossKind uint8

// Loss models, spelled as in netem.
const (
	LossNone    LossKind = iota
	LossRandom           // loss random P
	LossGemodel          // loss gemodel p r 1-h 1-k
	LossState            // loss state p13 p31 p32 p23 p14
)

// LossModel holds a loss model's parameters (all probabilities in 0..1).
type LossModel struct {
	Kind LossKind
	// P is the random loss probability (LossRandom), Corr its netem
	// correlation (see Impairment).
	P    float64
	Corr float64
	// Gilbert-Elliott: p (good->bad), r (bad->good), 1-h (loss in bad),
	// 1-k (loss in good).
	GEp, GEr, GE1h, GE1k float64
	// 4-state Markov (netem "state"): transition probabilities.
	P13, P31, P32, P23, P14 float64
}

// Distribution is a delay-jitter distribution, as netem's "distribution".
type Distribution uint8

// Delay distributions.
const (
	DistUniform Distribution = iota
	DistNormal
	DistPareto
	DistParetoNormal
)
