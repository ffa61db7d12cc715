package fabric

import "github.com/mrlab/mrlab/internal/sim"

// Impairment is a netem-style impairment of one link direction. Its zero
// value impairs nothing. ParseImpairment reads netem's spelling.
type Impairment struct {
	Loss      LossModel
	Delay     sim.Time // added delay (on top of the link's propagation delay)
	Jitter    sim.Time
	DelayDist Distribution
	Duplicate float64 // probability
	Corrupt   float64 // probability of one flipped bit
	// Reorder sends this fraction of packets with no added delay (netem's
	// "reorder P" with a delay set), so they overtake delayed ones.
	Reorder float64
	// Rate, if non-zero, overrides the link rate (a degraded link).
	Rate float64
}

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
	// P is the random loss probability (LossRandom).
	P float64
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
