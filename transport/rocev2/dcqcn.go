package rocev2

import (
	"math"

	"github.com/mrlab/mrlab/internal/sim"
)

// rateControl is DCQCN's reaction point (Zhu et al., SIGCOMM 2015) for one
// QP, in the form NICs implement it and ns-3's HPCC code base models it
// (RdmaHw's "Mellanox version"): the current rate Rc, the target rate Rt
// and the congestion estimate alpha.
//
//	alpha timer (every AlphaInterval):  alpha = (1-g)alpha + g  if a CNP came in the interval
//	                                    alpha = (1-g)alpha      otherwise
//	rate decrease (a CNP came, at most once per DecreaseInterval):
//	    Rt = Rc   (always with ClampTarget; else only if Rc rose since the last cut)
//	    Rc = max(Rc(1 - alpha/2), MinRate)
//	    the increase stage restarts
//	increase event (every IncreaseInterval, and every ByteCounter bytes sent):
//	    the first FastRecovery events: fast recovery  Rc = (Rt + Rc)/2
//	    then, while one counter has not passed F:  additive Rt += AI; Rc = (Rt + Rc)/2
//	    once both have:                            hyper    Rt += HAI; Rc = (Rt + Rc)/2
//
// With the byte counter off (ByteCounter 0) its stage follows the timer's.
// Rates never exceed the line rate. While Rc is below line rate the QP is
// "limited": it paces its data at Rc and its timers run; once Rc is back
// within max(AI, line/1000) of line rate it snaps to line rate and the
// timers stop (alpha then decays lazily, applied at the next CNP), so an
// idle or unthrottled QP costs no events. alpha starts at 1, so the first
// cut of a QP's life halves its rate, as in the NICs.
type rateControl struct {
	on      bool
	p       *DCQCN
	line    float64
	rc, rt  float64
	alpha   float64
	limited bool
	// cnpAlpha and cnpCut record a CNP since the last alpha update and
	// since the last cut; raised says Rc rose since the last cut.
	cnpAlpha, cnpCut, raised bool
	// quietSince is when alpha last decayed: with the timers stopped, a
	// CNP after a quiet spell applies the decay the timer would have.
	quietSince   sim.Time
	nextAlpha    sim.Time
	nextIncrease sim.Time
	// lastCut is when the rate was last cut (cuts are DecreaseInterval
	// apart at least); cutDue is when a CNP that came too soon after it
	// takes effect.
	lastCut      sim.Time
	cutDue       sim.Time
	bytes        int
	timerEvents  int
	byteEvents   int
	everCut      bool
	snapDistance float64
}

func (r *rateControl) init(line float64, p *DCQCN, on bool) {
	*r = rateControl{on: on && line > 0, p: p, line: line, rc: line, rt: line, alpha: 1,
		nextAlpha: sim.Never, nextIncrease: sim.Never, cutDue: sim.Never,
		snapDistance: max(p.AI, line/1000)}
}

// rate returns the current rate (the line rate when not limited).
func (r *rateControl) rate() float64 { return r.rc }

// cnp reacts to a congestion notification and returns the rate before it.
func (r *rateControl) cnp(now sim.Time) float64 {
	old := r.rc
	if !r.on {
		return old
	}
	if !r.limited {
		if now > r.quietSince {
			k := float64((now - r.quietSince) / r.p.AlphaInterval)
			r.alpha *= math.Pow(1-r.p.G, k)
		}
		r.limited = true
		r.nextAlpha = now + r.p.AlphaInterval
	}
	r.cnpAlpha, r.cnpCut = true, true
	if !r.everCut || now >= r.lastCut+r.p.DecreaseInterval {
		r.cut(now)
	} else {
		r.cutDue = r.lastCut + r.p.DecreaseInterval
	}
	return old
}

// cut lowers the rate for the CNPs seen since the last cut.
func (r *rateControl) cut(now sim.Time) {
	if r.p.ClampTarget || r.raised {
		r.rt = r.rc
	}
	r.rc = max(r.rc*(1-r.alpha/2), r.p.MinRate)
	r.cnpCut, r.raised, r.everCut = false, false, true
	r.lastCut, r.cutDue = now, sim.Never
	r.timerEvents, r.byteEvents, r.bytes = 0, 0, 0
	r.nextIncrease = now + r.p.IncreaseInterval
}

// sent counts n bytes of data to the byte counter; it reports whether that
// triggered a rate increase.
func (r *rateControl) sent(now sim.Time, n int) bool {
	if !r.limited || r.p.ByteCounter <= 0 {
		return false
	}
	r.bytes += n
	if r.bytes < r.p.ByteCounter {
		return false
	}
	r.bytes -= r.p.ByteCounter
	r.increase(now, false)
	r.byteEvents++
	return true
}

// timer runs the alpha, decrease and increase timers that are due.
func (r *rateControl) timer(now sim.Time) {
	if !r.limited {
		return
	}
	if r.nextAlpha <= now {
		r.alpha *= 1 - r.p.G
		if r.cnpAlpha {
			r.alpha += r.p.G
		}
		r.cnpAlpha = false
		r.quietSince = r.nextAlpha
		r.nextAlpha = now + r.p.AlphaInterval
	}
	if r.cutDue <= now {
		r.cut(now)
	}
	if r.nextIncrease <= now {
		r.nextIncrease = now + r.p.IncreaseInterval
		r.increase(now, true)
		r.timerEvents++
	}
}

// increase runs one increase event (from the timer or the byte counter).
func (r *rateControl) increase(now sim.Time, timer bool) {
	t, b := r.timerEvents, r.byteEvents
	if r.p.ByteCounter <= 0 {
		b = t
	}
	f := r.p.FastRecovery
	switch {
	case max(t, b) < f: // fast recovery: back towards the rate before the cut
	case min(t, b) > f:
		r.rt += r.p.HAI
	default:
		r.rt += r.p.AI
	}
	r.rt = min(r.rt, r.line)
	if rc := min((r.rt+r.rc)/2, r.line); rc > r.rc {
		r.rc, r.raised = rc, true
	}
	if r.line-r.rc <= r.snapDistance && r.cutDue == sim.Never && !r.cnpAlpha {
		r.rc, r.rt = r.line, r.line
		r.limited = false
		r.quietSince = max(r.quietSince, r.nextAlpha-r.p.AlphaInterval)
		r.nextAlpha, r.nextIncrease = sim.Never, sim.Never
	}
}

// deadline returns the next DCQCN timer.
func (r *rateControl) deadline() sim.Time {
	if !r.limited {
		return sim.Never
	}
	return min(r.nextAlpha, r.nextIncrease, r.cutDue)
}

// stop ends rate control for a QP that closed or failed.
func (r *rateControl) stop() {
	r.limited = false
	r.nextAlpha, r.nextIncrease, r.cutDue = sim.Never, sim.Never, sim.Never
}
