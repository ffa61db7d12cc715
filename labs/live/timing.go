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
	// LoopWait is how long the loop's thread waited on a CPU run queue
	// during the measurement (runnable, not running: the kernel's
	// run_delay), which its lateness does not see when no event was due
	// (runqueue.go); negative when the kernel does not say.
	LoopWait time.Duration `json:"loop_cpu_wait_ns"`
	// LoopWaitMax bounds the loop's longest single wait (its largest
	// between two samples, 10 ms apart); LooksCut counts the looks that
	// ended with the hosts' kernels still holding input (runqueue.go's
	// rule).
	LoopWaitMax time.Duration `json:"loop_cpu_wait_max_ns"`
	LooksCut    uint64        `json:"looks_cut"`
}

// Lagging reports whether the lab fell behind by more than MaxLagFraction
// of the measurement's lab time, or its wall time exceeds its lab time by
// as much: its figures are then not true in wall time. A loop kept from
// its CPU (LoopStarved) is a bound on what may have happened, not a
// measured distortion, and does not make a run lagging (runqueue.go).
func (t Timing) Lagging() bool {
	limit := time.Duration(MaxLagFraction * float64(t.LabTime))
	return t.MaxLateness > limit || t.WallTime-t.LabTime > limit
}

// LoopStarved reports whether the loop's thread waited for a CPU longer
// than MaxLagFraction of the wall time: what the hosts and clients handed
// the lab meanwhile may have waited as long to enter it (runqueue.go).
// It changes the verdict (the run no longer says real time kept), not
// Lagging.
func (t Timing) LoopStarved() bool {
	return loopStarved(t.LoopWait, t.LoopWaitMax, t.LooksCut, t.WallTime)
}

// Verdict is one line saying whether the figures hold in wall time.
func (t Timing) Verdict() string {
	switch {
	case t.Lagging():
		return fmt.Sprintf("LAGGING: the lab fell up to %v behind the wall clock (%d of %d events late); this run took %v of lab time and %v of wall time, so its rates and times are not true in wall time (limit: %.0f%% of the run)%s",
			round(t.MaxLateness), t.EventsLate, t.Events, round(t.LabTime), round(t.WallTime), 100*MaxLagFraction, t.loopNote())
	case t.LoopStarved():
		return fmt.Sprintf("LOOP STARVED: the lab's loop waited %v for a CPU (%.1f%% of the wall time, at most %v at once; %d looks left input queued), so what the hosts' kernels and verbs clients handed it may have waited up to %v before entering the lab, which its lateness (worst %v) does not count (limit %.0f%% of the run); this run took %v of lab time and %v of wall time, and its rates and times may not be true in wall time",
			round(t.LoopWait), 100*float64(t.LoopWait)/float64(max(t.WallTime, 1)), round(t.LoopWaitMax), t.LooksCut,
			round(inputBound(t.LoopWait, t.LoopWaitMax, t.LooksCut)), round(t.MaxLateness), 100*MaxLagFraction, round(t.LabTime), round(t.WallTime))
	}
	return fmt.Sprintf("real time kept: lab time %v, wall time %v, worst lateness %v%s",
		round(t.LabTime), round(t.WallTime), round(t.MaxLateness), t.loopNote())
}

// loopNote adds the loop's run-queue wait to a verdict that leads with
// something else.
func (t Timing) loopNote() string {
	switch {
	case t.LoopWait < 0:
		return ""
	case t.LoopStarved():
		return fmt.Sprintf("; LOOP STARVED too: its loop waited %v for a CPU (%.1f%% of the wall time, at most %v at once; %d looks left input queued)",
			round(t.LoopWait), 100*float64(t.LoopWait)/float64(max(t.WallTime, 1)), round(t.LoopWaitMax), t.LooksCut)
	}
	return fmt.Sprintf(", loop's CPU wait %v (at most %v at once; %d looks left input queued)", round(t.LoopWait), round(t.LoopWaitMax), t.LooksCut)
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

// checkWarn emits the "cannot keep real time" warning when the last
// window fell behind the wall clock by more than MaxLagFraction of the
// window (10ms in a second): what any figure measured across that window
// would be off by. Events a few milliseconds late now and then (the OS
// preempted the loop once) are counted in the stats but not warned about,
// so a warning always means figures are distorted.
func (p *Pacer) checkWarn(now sim.Time) {
	length := time.Duration(now) - p.winStart
	if length < p.cfg.WarnEvery {
		return
	}
	rq := p.sampleRQ()
	wq, wmax, cut := waitSince(p.winRQ, rq), p.winRQMax, p.lag.LooksCut-p.winCut
	if wq < 0 {
		wmax = -1
	}
	p.winRQ, p.winRQMax, p.winCut = rq, 0, p.lag.LooksCut
	p.lag.LoopWaitWindow, p.lag.LoopWaitMax = wq, wmax
	if wq >= 0 {
		p.lag.LoopWait = max(p.lag.LoopWait, 0) + wq
	}
	late, starved := windowLag(p.winMax, wq, wmax, cut, p.cfg.WarnEvery, length)
	if starved && !late {
		p.lag.StarvedWindows++
		if p.cfg.Warn != nil {
			p.cfg.Warn(fmt.Sprintf("lab cannot vouch for real time: its loop's thread waited %v for a CPU in the last %v (at most %v at once; %d looks left input queued), so packets from the hosts' kernels and verbs clients' work may have waited up to %v before entering the lab (limit %v), which its lateness (worst %v) does not count; delays and rates may be distorted",
				wq.Round(time.Microsecond), length.Round(time.Millisecond), wmax.Round(time.Microsecond), cut, inputBound(wq, wmax, cut).Round(time.Microsecond),
				time.Duration(MaxLagFraction*float64(length)).Round(time.Microsecond), p.winMax.Round(time.Microsecond)))
		}
	}
	if late {
		p.lag.Warnings++
		if p.cfg.Warn != nil {
			// Where the time went: a loop woken that late was kept from
			// running (by the kernel or the Go runtime); one woken on
			// time fell behind while running, and its longest step (an
			// event, posts and inputs, or the verbs rings; a step the
			// thread was preempted in counts too) says whether one piece
			// of work held it up.
			p.cfg.Warn(fmt.Sprintf("lab cannot keep real time: it fell %v behind the wall clock in the last %v (%d events ran more than %v late; its worst wake-up from a sleep was %v late, its longest step %v: %s; its thread waited %v for a CPU); delays and rates are distorted",
				p.winMax.Round(time.Microsecond), p.cfg.WarnEvery, p.winLate, p.cfg.LagThreshold, p.spin.cur.Round(time.Microsecond), p.winStep.Round(time.Microsecond), p.winWhat, cpuWaitWord(wq)))
		}
	}
	p.winLate, p.winRun, p.winMax, p.winStart = 0, 0, 0, time.Duration(now)
	p.winStep, p.winWhat = 0, ""
	p.spin.roll()
	p.lag.Spin, p.lag.Batch, p.lag.WakeP99 = p.spin.report()
	p.lag.WakeLatency, p.lag.SleepCost = p.spin.prev, p.spin.cost
}

// cpuWaitWord is a run-queue wait for a message ("unknown" when the
// kernel does not say).
func cpuWaitWord(d time.Duration) string {
	if d < 0 {
		return "unknown"
	}
	return d.Round(time.Microsecond).String()
}

// windowLag judges one window of the loop's: late when its worst
// lateness passed MaxLagFraction of the warning period every, starved by
// runqueue.go's rule over the window's length (at least every: a window
// ends at the first pass of the loop after it) from the loop thread's
// run-queue wait over it (rqWait, negative: unknown), its largest
// between samples (rqMax) and the looks cut meanwhile.
func windowLag(maxLate, rqWait, rqMax time.Duration, cut uint64, every, length time.Duration) (late, starved bool) {
	return maxLate > time.Duration(MaxLagFraction*float64(every)), loopStarved(rqWait, rqMax, cut, length)
}

// lagWatch follows the pacer's lateness from its start until it is
// stopped. The pacer updates every open watch for every event it runs;
// all of it happens on the loop goroutine.
type lagWatch struct {
	p        *Pacer
	labStart sim.Time
	wall     sim.Time      // the pacer's wall clock at the start
	rq       time.Duration // the loop thread's run-queue wait at the start (-1: unknown)
	rqMax    time.Duration // its largest growth between samples since
	cut      uint64        // LooksCut at the start
	t        Timing
	open     bool
}

// watch opens a lagWatch. Loop goroutine only.
func (p *Pacer) watch() *lagWatch {
	w := &lagWatch{p: p, labStart: p.loop.Now(), wall: p.elapsed(), rq: p.sampleRQ(), cut: p.lag.LooksCut, open: true}
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
	end := p.sampleRQ() // while w is still open: its last wait counts
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
	w.t.LoopWait = waitSince(w.rq, end)
	w.t.LoopWaitMax, w.t.LooksCut = -1, p.lag.LooksCut-w.cut
	if w.t.LoopWait >= 0 {
		w.t.LoopWaitMax = w.rqMax
	}
	return w.t
}
