package live

import (
	"fmt"
	"time"

	"github.com/mrlab/mrlab/internal/sim"
)

// MaxLagFraction is how far behind the wall clock a live lab may fall
// during a measurement, as a fraction of the measurement's lab time,
// before its figures are reported as lagging. The lab's lateness at an
// instant is exactly how much any interval that ends there is stretched in
// wall time, so 1% means no rate or duration the measurement reports is
// off by more than 1% of the run, whatever the run's length or the lab's
// rates.
const MaxLagFraction = 0.01

// Timing says how a measurement's lab time relates to the wall clock: the
// part of a result that makes its figures trustworthy or not. It knows
// nothing of what was measured, so every live measurement (perf over the
// control socket today, a verbs client tomorrow) reports it alike.
type Timing struct {
	// LabTime and WallTime are how long the measurement took in lab time
	// and on the wall clock, from its request to its result.
	LabTime  time.Duration `json:"lab_time_ns"`
	WallTime time.Duration `json:"wall_time_ns"`
	// MaxLateness is the furthest the lab fell behind the wall clock
	// during the measurement (its worst event lateness); EventsLate of
	// Events ran later than the pacer's lag threshold.
	MaxLateness time.Duration `json:"max_lateness_ns"`
	EventsLate  uint64        `json:"events_late"`
	Events      uint64        `json:"events"`
}

// Lagging reports whether the lab fell behind by more than MaxLagFraction
// of the measurement's lab time, or its wall time exceeds its lab time by
// as much: its figures are then not true in wall time.
func (t Timing) Lagging() bool {
	limit := time.Duration(MaxLagFraction * float64(t.LabTime))
	return t.MaxLateness > limit || t.WallTime-t.LabTime > limit
}

// Verdict is one line saying whether the figures hold in wall time.
func (t Timing) Verdict() string {
	if !t.Lagging() {
		return fmt.Sprintf("real time kept: lab time %v, wall time %v, worst lateness %v",
			round(t.LabTime), round(t.WallTime), round(t.MaxLateness))
	}
	return fmt.Sprintf("LAGGING: the lab fell up to %v behind the wall clock (%d of %d events late); this run took %v of lab time and %v of wall time, so its rates and times are not true in wall time (limit: %.0f%% of the run)",
		round(t.MaxLateness), t.EventsLate, t.Events, round(t.LabTime), round(t.WallTime), 100*MaxLagFraction)
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	}
	return d
}

// lagWatch follows the pacer's lateness from its start until it is
// stopped. The pacer updates every open watch for every event it runs;
// all of it happens on the loop goroutine.
type lagWatch struct {
	p        *Pacer
	labStart sim.Time
	wall     sim.Time // the pacer's wall clock at the start
	t        Timing
	open     bool
}

// watch opens a lagWatch. Loop goroutine only.
func (p *Pacer) watch() *lagWatch {
	w := &lagWatch{p: p, labStart: p.loop.Now(), wall: p.elapsed(), open: true}
	w.t.MaxLateness = p.curLag
	p.watches = append(p.watches, w)
	return w
}

// observe records one event's lateness.
func (w *lagWatch) observe(lag time.Duration, late bool) {
	w.t.Events++
	if late {
		w.t.EventsLate++
	}
	w.t.MaxLateness = max(w.t.MaxLateness, lag)
}

// stop closes the watch and returns its Timing. Loop goroutine only;
// stopping twice returns the same Timing.
func (w *lagWatch) stop() Timing {
	if !w.open {
		return w.t
	}
	w.open = false
	p := w.p
	for i, o := range p.watches {
		if o == w {
			p.watches = append(p.watches[:i], p.watches[i+1:]...)
			break
		}
	}
	// The measurement ends with the event running now (or, stopped
	// between events, now): it ran p.curLag late, so on the wall clock it
	// began at loop.Now()+curLag. Whatever that event does after its
	// measurement is over (a run's data check) is not the run's time.
	w.t.LabTime = time.Duration(p.loop.Now() - w.labStart)
	w.t.WallTime = time.Duration(p.loop.Now() + sim.Time(p.curLag) - w.wall)
	w.t.MaxLateness = max(w.t.MaxLateness, p.curLag)
	return w.t
}
