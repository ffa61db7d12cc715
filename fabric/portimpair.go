package fabric

import (
	"math"
	"math/rand/v2"

	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// The port's netem stage: what an Impairment does to the packets of one
// link direction after they leave the wire (delay, jitter, reordering,
// duplication, corruption, slotting) and loss or its ECN mark (in enqueue
// for LossAtEnqueue, in wireLoss on the wire).

// impairState is a port's netem state: the impairment, its loss chain,
// its correlated draws and its slots. A port holds one only while its
// impairment is not zero (about 500 bytes that most ports of a big fabric
// never use); a zero impairment has no state to keep, and installing one
// draws nothing from the port's generator, so dropping the state changes
// no run.
type impairState struct {
	imp  Impairment
	loss lossState
	// netem's correlated draws, per clause (zero: uncorrelated).
	delayCr, dupCr, corruptCr, reorderCr crandom
	slot                                 slotState
}

// setImpairment installs imp (already validated). Every piece of state is
// set afresh, as netem does when a qdisc is changed.
func (p *Port) setImpairment(imp Impairment) {
	p.lossOn = imp.Loss.Kind != LossNone
	p.delayOn = imp.Delay > 0 || imp.Jitter > 0
	p.dupOn = imp.Duplicate > 0
	p.corruptOn = imp.Corrupt > 0
	p.slotOn = !imp.Slot.IsZero()
	p.deliverImpaired = p.delayOn || p.dupOn || p.corruptOn || p.slotOn
	p.overheadOn = imp.Rate != 0 && (imp.RateOverhead != 0 || imp.CellSize != 0)
	if imp.IsZero() {
		p.ia = nil
		p.setRate(p.params.Rate)
		return
	}
	if p.ia == nil {
		p.ia = new(impairState)
	}
	ia := p.ia
	ia.imp = imp
	ia.loss.reset(imp.Loss, p.rng)
	ia.delayCr = newCrandom(imp.DelayCorr, p.rng)
	ia.dupCr = newCrandom(imp.DupCorr, p.rng)
	ia.corruptCr = newCrandom(imp.CorruptCorr, p.rng)
	ia.reorderCr = newCrandom(imp.ReorderCorr, p.rng)
	ia.slot = slotState{}
	if p.slotOn {
		ia.slot.reset(imp.Slot, int64(p.s.Now())*1000)
	}
	p.setRate(p.params.Rate)
}

// impairment returns the installed impairment (zero when none).
func (p *Port) impairment() Impairment {
	if p.ia == nil {
		return Impairment{}
	}
	return p.ia.imp
}

func (p *Port) impairDelivery(now sim.Time, b *packet.Buffer, atPs int64, flags int) {
	ia := p.ia
	if p.dupOn && p.chance(&ia.dupCr, ia.imp.Duplicate, ia.imp.DupCorr) {
		c := p.pool.Copy(b)
		p.c.dups++
		if o := p.obs; o != nil {
			o.Observe(now, EvDuplicate, Point{Link: p.idx}, c, DropNone)
		}
		p.schedule(c, p.slotted(atPs, atPs+int64(p.extraDelay())*1000, c.Len()), 0)
	}
	// The bit flips on the wire: decided now, done when the packet
	// arrives (so a capture of the sending side shows it intact).
	if p.corruptOn && p.chance(&ia.corruptCr, ia.imp.Corrupt, ia.imp.CorruptCorr) {
		flags |= corruptFlag
	}
	p.schedule(b, p.slotted(atPs, atPs+int64(p.extraDelay())*1000, b.Len()), flags)
}

// chance draws an event of probability prob: netem's correlated draw when
// the clause has a correlation, else a plain uniform one.
func (p *Port) chance(cr *crandom, prob, corr float64) bool {
	if corr > 0 {
		return cr.hit(prob, p.rng)
	}
	return p.rng.Float64() < prob
}

// markLost marks a packet the loss model chose, for netem's "ecn": CE on
// an ECN-capable packet (it then goes on), nothing on a Not-ECT one (it is
// dropped). A packet already CE passes. It reports whether the packet
// survives.
func (p *Port) markLost(now sim.Time, b *packet.Buffer) bool {
	d := b.Data()
	if len(d) < header.IPv4MinSize || d[0]>>4 != 4 {
		return false
	}
	ip := header.IPv4(d)
	switch ip.ECN() {
	case header.ECNCE:
		return true
	case header.ECNECT0, header.ECNECT1:
		ip.SetECN(header.ECNCE)
		p.c.marks++
		if o := p.obs; o != nil {
			o.Observe(now, EvMark, Point{Link: p.idx}, b, DropNone)
		}
		return true
	}
	return false
}

// flipBit flips one random bit after the IPv4 header (anywhere if the
// packet has nothing after a header).
func flipBit(d []byte, r *rand.Rand) {
	if len(d) == 0 {
		return
	}
	lo := 0
	if len(d) >= header.IPv4MinSize && d[0]>>4 == 4 {
		if hl := header.IPv4(d).HeaderLength(); hl < len(d) {
			lo = hl
		}
	}
	i := lo + r.IntN(len(d)-lo)
	d[i] ^= 1 << r.IntN(8)
}

// extraDelay draws the impairment's delay for one packet: Delay plus
// Jitter scaled by a draw from DelayDist (uniform in [-1, 1]; normal
// N(0,1); pareto: Pareto(alpha 3) shifted to mean 0; paretonormal: netem's
// 3:1 mix of normal and pareto), clamped at 0. Reorder sends that fraction
// of packets without it, as netem does. A draw is capped at MaxDelay.
func (p *Port) extraDelay() sim.Time {
	if !p.delayOn {
		return 0
	}
	imp := &p.ia.imp
	if imp.Reorder > 0 && p.chance(&p.ia.reorderCr, imp.Reorder, imp.ReorderCorr) {
		return 0
	}
	d := float64(imp.Delay)
	if imp.Jitter > 0 {
		j := float64(imp.Jitter)
		if imp.DelayCorr > 0 {
			// netem draws the jitter from its correlated generator: map
			// the correlated uniform through the distribution.
			d += j * distQuantile(imp.DelayDist, p.ia.delayCr.unit(p.rng), p.rng)
		} else {
			d += j * distSample(imp.DelayDist, p.rng)
		}
	}
	if d <= 0 {
		return 0
	}
	if d > float64(MaxDelay) { // a far pareto tail
		return MaxDelay
	}
	return sim.Time(d + 0.5)
}

// pareto draws Pareto(xm=1, alpha=3) minus its mean 1.5, as netem's
// pareto table does.
func pareto(r *rand.Rand) float64 {
	return paretoQuantile(r.Float64())
}

// paretoQuantile is the inverse of pareto's distribution function at u in
// [0, 1).
func paretoQuantile(u float64) float64 { return math.Pow(1-u, -1.0/3) - 1.5 }

// distSample draws from d scaled to unit jitter: uniform in [-1, 1],
// normal N(0,1), pareto, or netem's 3:1 mix of normal and pareto.
func distSample(d Distribution, r *rand.Rand) float64 {
	switch d {
	case DistNormal:
		return r.NormFloat64()
	case DistPareto:
		return pareto(r)
	case DistParetoNormal:
		return 0.75*r.NormFloat64() + 0.25*pareto(r)
	}
	return 2*r.Float64() - 1
}

// distQuantile maps a uniform u in [0, 1) through d (for correlated
// draws); paretonormal takes its pareto part from a fresh draw.
func distQuantile(d Distribution, u float64, r *rand.Rand) float64 {
	switch d {
	case DistNormal:
		return normalQuantile(u)
	case DistPareto:
		return paretoQuantile(u)
	case DistParetoNormal:
		return 0.75*normalQuantile(u) + 0.25*pareto(r)
	}
	return 2*u - 1
}

// normalQuantile is the standard normal's inverse distribution function,
// clamped at +-6 sigma for u at the ends.
func normalQuantile(u float64) float64 {
	u = min(max(u, 1e-9), 1-1e-9)
	return math.Sqrt2 * math.Erfinv(2*u-1)
}
