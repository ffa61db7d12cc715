package fabric

import (
	"fmt"
	"math"

	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// ECN marking happens at enqueue, from the queue an arriving packet finds
// (the bytes waiting ahead of it, not counting the packet being serialized
// nor the arriving one): marking at enqueue is what DCTCP's analysis and
// most switch ASICs use, and it makes "marked exactly when the queue is
// above K" a property of the arrival alone. Only ECT(0) and ECT(1) packets
// are marked (set to CE, the IPv4 checksum fixed incrementally); Not-ECT
// packets pass unmarked and are never dropped for ECN, and CE stays CE.
//
//   - ECNStep marks when the queue exceeds K bytes.
//   - ECNRED marks with probability 0 below Min, PMax*(q-Min)/(Max-Min)
//     between Min and Max, and 1 at or above Max, where q is the
//     instantaneous queue (Weight 0) or RED's EWMA of it (Weight > 0),
//     updated at every arrival and decayed over idle periods as in Floyd
//     and Jacobson's RED (avg *= (1-w)^m, m = idle time / this packet's
//     transmission time). Marks are independent draws (no count-based
//     spacing), like switch WRED-ECN.

// Validate checks the ECN configuration's fields.
func (c ECNConfig) Validate() error {
	switch c.Mode {
	case ECNOff:
		return nil
	case ECNStep:
		if c.K < 0 {
			return fmt.Errorf("ecn step: K %d is negative", c.K)
		}
	case ECNRED:
		if c.Min < 0 || c.Max < c.Min {
			return fmt.Errorf("ecn red: want 0 <= min (%d) <= max (%d)", c.Min, c.Max)
		}
		if !(c.PMax >= 0 && c.PMax <= 1) {
			return fmt.Errorf("ecn red: pmax %v is not a probability", c.PMax)
		}
		if !(c.Weight >= 0 && c.Weight <= 1) {
			return fmt.Errorf("ecn red: weight %v is not in [0, 1]", c.Weight)
		}
	default:
		return fmt.Errorf("unknown ecn mode %d", c.Mode)
	}
	return nil
}

var ecnModeNames = [...]string{ECNOff: "off", ECNStep: "step", ECNRED: "red"}

// String returns "off", "step" or "red".
func (m ECNMode) String() string {
	if int(m) < len(ecnModeNames) {
		return ecnModeNames[m]
	}
	return "ecnmode(?)"
}

// updateREDAvg folds the queue an arrival of n bytes finds into RED's
// average.
func (p *Port) updateREDAvg(now sim.Time, n int, idle bool) {
	w := p.params.ECN.Weight
	if idle && p.qBytes == 0 && now > p.idleSince {
		txNs := float64(n) * 8 / p.rate * 1e9
		if txNs > 0 {
			m := float64(now-p.idleSince) / txNs
			p.redAvg *= math.Pow(1-w, m)
		}
	}
	p.redAvg = (1-w)*p.redAvg + w*float64(p.qBytes)
}

// mark applies the ECN decision to an accepted packet.
func (p *Port) mark(now sim.Time, b *packet.Buffer) {
	if c := &p.params.ECN; c.Mode == ECNStep && p.qBytes <= c.K {
		// Below K nothing is marked, whatever the packet: decided
		// without reading it (at 1,024 hosts a packet's header is
		// often cold here). RED reads the packet first, as it draws
		// only for an ECN-capable one.
		return
	}
	d := b.Data()
	if len(d) < header.IPv4MinSize || d[0]>>4 != 4 {
		return // not IPv4: the next switch drops it as malformed
	}
	ip := header.IPv4(d)
	if e := ip.ECN(); e != header.ECNECT0 && e != header.ECNECT1 {
		return
	}
	c := &p.params.ECN
	var mark bool
	switch c.Mode {
	case ECNStep:
		mark = p.qBytes > c.K
	case ECNRED:
		q := float64(p.qBytes)
		if c.Weight > 0 {
			q = p.redAvg
		}
		switch {
		case q < float64(c.Min):
		case q >= float64(c.Max):
			mark = true
		default:
			mark = p.rng.Float64() < c.PMax*(q-float64(c.Min))/float64(c.Max-c.Min)
		}
	}
	if !mark {
		return
	}
	ip.SetECN(header.ECNCE)
	p.c.marks++
	if o := p.obs; o != nil {
		o.Observe(now, EvMark, Point{Link: p.idx}, b, DropNone)
	}
}
