package rocev2

import (
	"math"

	"github.com/mrlab/mrlab/internal/sim"
)

// rateControl is DCQCN's reaction point (Zhu et al., SIGCOMM 2015) for one
// QP: the current rate Rc, the target rate Rt and the congestion estimate
// alpha.
//
//	on a CNP:            Rt = Rc; Rc = max(Rc(1 - alpha/2), MinRate); alpha = (1-g)alpha + g
//	no CNP for 55us:     alpha = (1-g)alpha
//	increase event       (every IncreaseInterval, and every ByteCounter bytes sent):
//	  both counts < F:   fast recovery     Rc = (Rt + Rc)/2
//	  both counts > F:   hyper increase    Rt += HAI; Rc = (Rt + Rc)/2
//	  otherwise:         additive increase Rt += AI;  Rc = (Rt + Rc)/2
//
// Rates never exceed the line rate. While Rc is below line rate the QP is
// "limited": it paces its data at Rc and its timers run; once Rc is back
// within AI of line rate it snaps to line rate and the timers stop (alpha
// then decays lazily, applied at the next CNP), so an idle or unthrottled
// QP costs no events.
type rateControl struct {
	on      bool
	p       *DCQCN
	line    float64
	rc, rt  float64
	alpha   float64
	limited bool
	// quietSince is when the alpha timer last ran (or stopped); it lets a
	// CNP after a quiet spell apply the decay the timer would have applied.
	quietSince   sim.Time
	nextAlpha    sim.Time
	nextIncrease sim.Time
	bytes        int
	timerEvents  int
	byteEvents   int
}

func (r *rateControl) init(line float64, p *DCQCN, on bool) {
	*r = rateControl{on: on && line > 0, p: p, line: line, rc: line, rt: line, alpha: 1,
		nextAlpha: sim.Never, nextIncrease: sim.Never}
}

// rate returns the current rate (the line rate when not limited).
func (r *rateControl) rate() float64 { return r.rc }

// cnp reacts to a congestion notification and returns the rate before it.
func (r *rateControl) cnp(now sim.Time) float64 {
	old := r.rc
	if !r.on {
		return old
	}
	if !r.limited && now > r.quietSince {
		k := float64((now - r.quietSince) / r.p.AlphaInterval)
		r.alpha *= math.Pow(1-r.p.G, k)
	}
	r.rt = r.rc
	r.rc = max(r.rc*(1-r.alpha/2), r.p.MinRate)
	r.alpha = (1-r.p.G)*r.alpha + r.p.G
	r.timerEvents, r.byteEvents, r.bytes = 0, 0, 0
	r.nextAlpha = now + r.p.AlphaInterval
	r.nextIncrease = now + r.p.IncreaseInterval
	r.limited = true
	return old
}

// sent counts n bytes of data to the byte counter; it reports whether that
// triggered a rate increase.
func (r *rateControl) sent(now sim.Time, n int) bool {
	if !r.limited {
		return false
	}
	r.bytes += n
	if r.bytes < r.p.ByteCounter {
		return false
	}
	r.bytes -= r.p.ByteCounter
	r.byteEvents++
	r.increase(now)
	return true
}

// timer runs the alpha and increase timers that are due.
func (r *rateControl) timer(now sim.Time) {
	if !r.limited {
		return
	}
	if r.nextAlpha <= now {
		r.alpha *= 1 - r.p.G
		r.nextAlpha = now + r.p.AlphaInterval
		r.quietSince = now
	}
	if r.nextIncrease <= now {
		r.timerEvents++
		r.nextIncrease = now + r.p.IncreaseInterval
		r.increase(now)
	}
}

func (r *rateControl) increase(now sim.Time) {
	f := r.p.FastRecovery
	switch {
	case max(r.timerEvents, r.byteEvents) < f:
	case min(r.timerEvents, r.byteEvents) > f:
		r.rt += r.p.HAI
	default:
		r.rt += r.p.AI
	}
	r.rt = min(r.rt, r.line)
	r.rc = min((r.rt+r.rc)/2, r.line)
	if r.line-r.rc <= r.p.AI {
		r.rc, r.rt = r.line, r.line
		r.limited = false
		r.nextAlpha, r.nextIncrease = sim.Never, sim.Never
		r.quietSince = max(r.quietSince, now)
	}
}

// deadline returns the next DCQCN timer.
func (r *rateControl) deadline() sim.Time {
	if !r.limited {
		return sim.Never
	}
	return min(r.nextAlpha, r.nextIncrease)
}

// stop ends rate control for a QP that closed or failed.
func (r *rateControl) stop() {
	r.limited = false
	r.nextAlpha, r.nextIncrease = sim.Never, sim.Never
}
