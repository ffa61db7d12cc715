package live

import (
	"math/bits"
	"time"
)

// The loop's waiting rule: when it sleeps, and how far from an event it
// wakes. Two measured costs and one tolerance decide it.
//
// A sleep makes the next event late: a timer wakes the thread late by the
// kernel's wake-up path (and on this project's VM by the hypervisor's) and,
// on a busy machine, by however long the thread waits for its CPU. The
// loop measures that latency on every timer wake-up and takes, per window
// (PacerConfig.WarnEvery) and per class of wait (wakeClasses: a CPU left
// idle longer wakes later), its 99th percentile L: the window's maximum is
// one stall below the guest, and a horizon that follows it stays at its
// cap (measured: worst 120 µs-4.5 ms, p99 35-125 µs under iperf3 UDP). A
// class without wake-ups in a window has its L halved, so a class the
// loop stopped sleeping in (its horizon had it watch the clock) is tried
// again rather than held at an old measure.
//
// A sleep also costs CPU: the timer's arming, epoll_wait, the switch out
// and back in (measured with the loop thread's CPU clock around one sleep
// in sleepCostEvery, a moving average: 9-68 µs on this 2-core VM, rising
// with the load, more than ten system calls). Watching the clock through
// a wait costs the wait itself.
//
// The rule. Events may run up to a tolerance T late, T being what the loop
// thread's own scheduling already allows: SCHED_DEADLINE's longest stop,
// (1 - the real-time share) of its period, the lag threshold (50 µs of
// 1 ms; sched.go), the same figure under every policy so that one rule
// holds, a twentieth of the lateness that counts an event late. With L
// the last window's p99 wake-up latency:
//
//   - L > T: the loop arms its timer the horizon L - T before the event
//     (at most a quarter of the lag threshold: a machine whose wake-ups
//     are later than that cannot be helped by spinning, and the CPU a
//     wake-up may burn is a fraction of the lateness the lab counts;
//     under SCHED_FIFO at most minSpin, a real-time thread that stays
//     busy being throttled for 50 ms a second) and watches the clock for
//     the rest;
//   - L < T: it arms its timer the batch T - L after the event, and the
//     wake-up runs every event due by then: the events that follow one
//     (the rest of a datagram's crossing, a serialization time apart:
//     11 µs for 1400 bytes at 1 Gbit/s, less than a sleep costs) run in
//     the same wake-up instead of the loop watching the clock between
//     them.
//
// Either way an event runs at most T late in 99 wake-ups of 100 (the
// lab's lateness stays a twentieth of its lag threshold), and the loop
// sleeps only when the wait is longer than the horizon plus a sleep's
// cost: a shorter sleep costs more CPU than watching the clock. The batch
// does not count towards it: a sleep must pay for itself on the wait
// before it, since the events a batch would gather may not come (a ping
// crossing the lab is eight events 1.7 µs apart, then nothing; had the
// batch counted, each of its deliveries would wait for the batch and a
// wake-up instead of the loop watching 14 µs of clock). Posts, inputs
// (a host's mr0 becoming readable) and the verbs rings wake a sleeping
// loop at once, batch or not. Until the first window is measured the
// horizon is its bound (then halving, as L does, until the loop sleeps
// and measures), the batch 0 and a sleep's cost minSpin. A fixed
// PacerConfig.Spin keeps its horizon, no batch and no cost. TestWaitRule
// holds the rule.

// minSpin is FIFO's horizon and a sleep's cost until one is measured: one
// pass of the loop's clock read and poll.
const minSpin = 10 * time.Microsecond

// sleepCostEvery: one sleep in this many is timed with the thread's CPU
// clock (two system calls).
const sleepCostEvery = 16

// wakeClasses: wake-up latencies are measured and applied per class of
// sleep length, one class per doubling from 1 µs (the last holds every
// sleep of 1 ms and more). A short sleep keeps the CPU awake, a long one
// lets the kernel (and the hypervisor) idle it, and waking from idle
// takes longer: on this VM a timer 15 µs ahead woke 11 µs late at the
// median, 33 µs at p99; an idle lab's sleeps of milliseconds 100 µs-1 ms
// late. One figure for all would make every short wait pay for the long
// ones.
const wakeClasses = 12

// wakeClass is the class of a sleep of d.
func wakeClass(d time.Duration) int {
	return min(bits.Len64(uint64(max(d, 0)/time.Microsecond)), wakeClasses-1)
}

// spinner tracks the horizon. Loop goroutine only.
type spinner struct {
	max      time.Duration // the horizon's upper bound
	tol      time.Duration // T: the lateness an event may have
	adaptive bool
	cost     time.Duration // a sleep's CPU cost, moving average
	nsleep   uint64        // sleeps so far (sampling)
	cur      time.Duration // worst wake-up latency in this window
	prev     time.Duration // in the last window that had a wake-up
	seen     bool          // this window had a wake-up
	// Per class of sleep length: this window's wake-ups, the p99 of the
	// last window (halved for each window since that had none), and the
	// horizon and batch that follow from it.
	hist    [wakeClasses]wakeHist
	p99     [wakeClasses]time.Duration
	horizon [wakeClasses]time.Duration
	batch   [wakeClasses]time.Duration
	// typical is the class that had the most wake-ups in the last
	// window that had any (what status reports).
	typical int
}

// newSpinner returns the horizon for a fixed Spin (PacerConfig.Spin != 0)
// or a measured one under policy pol with lag threshold lag and event
// tolerance tol.
func newSpinner(fixed time.Duration, pol Policy, lag, tol time.Duration) spinner {
	var s spinner
	switch {
	case fixed < 0:
		return s
	case fixed > 0:
		s.max = fixed
	default:
		s.max = max(lag/4, minSpin)
		if pol == PolicyFIFO {
			s.max = minSpin
		}
		s.tol, s.adaptive, s.cost = tol, true, minSpin
	}
	// Until a class's wake-ups are measured, assume the worst.
	for k := range s.horizon {
		s.p99[k], s.horizon[k] = s.max+s.tol, s.max
	}
	return s
}

// eventTolerance is T for a lab with lag threshold lag: the longest stop
// PolicyDeadline's share allows its thread, (1 - share) of the lag
// threshold (sched.go's deadlineShare).
func eventTolerance(lag time.Duration) time.Duration {
	runtime, period, _ := deadlineShare(lag)
	return period - runtime
}

// sleeps reports whether a loop with wait to go until its next event
// sleeps (arming its timer offset(wait) from it) rather than watching
// the clock.
func (s *spinner) sleeps(wait time.Duration) bool {
	k := wakeClass(wait)
	if !s.adaptive {
		return wait > s.horizon[k]
	}
	return wait > s.horizon[k]+s.cost
}

// offset is where the timer is armed relative to an event wait away: the
// batch after it, or the horizon before it.
func (s *spinner) offset(wait time.Duration) time.Duration {
	k := wakeClass(wait)
	return s.batch[k] - s.horizon[k]
}

// timeSleep reports whether the next sleep's CPU cost is to be measured.
func (s *spinner) timeSleep() bool {
	s.nsleep++
	return s.adaptive && s.nsleep%sleepCostEvery == 0
}

// slept records a timed sleep's CPU cost.
func (s *spinner) slept(cpu time.Duration) {
	s.cost += (max(cpu, 0) - s.cost) / 8
}

// woke records a timer wake-up late by late, of a sleep for a wait of
// wait to the next event (its class is the wait's, as sleeps and offset
// look it up; whatever the policy: the lag warning reports the window's
// worst).
func (s *spinner) woke(wait, late time.Duration) {
	late = max(late, 0)
	s.cur = max(s.cur, late)
	s.hist[wakeClass(wait)].add(late)
	s.seen = true
}

// roll ends a window: each class's horizon becomes the 99th percentile of
// its wake-ups' latency (half the last one if it had none) less the
// tolerance, within bounds, and its batch the tolerance less that.
func (s *spinner) roll() {
	if s.seen {
		s.prev = s.cur
		most := uint32(0)
		for k := range s.hist {
			if n := s.hist[k].total; n > most {
				most, s.typical = n, k
			}
		}
	}
	s.cur, s.seen = 0, false
	for k := range s.hist {
		if s.hist[k].total > 0 {
			s.p99[k] = s.hist[k].quantile(0.99)
		} else {
			// A measure ages: a class the loop no longer sleeps in (its
			// horizon made it watch the clock instead, or the lab was
			// idle) is tried again.
			s.p99[k] /= 2
		}
		s.hist[k] = wakeHist{}
		if s.adaptive {
			s.horizon[k] = min(max(s.p99[k]-s.tol, 0), s.max)
			s.batch[k] = max(s.tol-s.p99[k], 0)
		}
	}
}

// report is the typical class's horizon, batch and p99, for LagStats.
func (s *spinner) report() (horizon, batch, p99 time.Duration) {
	k := s.typical
	return s.horizon[k], s.batch[k], s.p99[k]
}

// wakeHist counts a window's wake-up latencies: 1 µs buckets below
// wakeLinear, then one bucket per doubling. Fixed size: recording
// allocates nothing.
type wakeHist struct {
	n     [wakeLinear + 24]uint32
	total uint32
	max   time.Duration
}

const wakeLinear = 128

func wakeBucket(d time.Duration) int {
	us := int(d / time.Microsecond)
	if us < wakeLinear {
		return us
	}
	i := wakeLinear
	for v := us / wakeLinear; v > 1 && i < wakeLinear+23; v >>= 1 {
		i++
	}
	return i
}

// wakeBucketTop is the largest latency bucket i holds.
func wakeBucketTop(i int) time.Duration {
	if i < wakeLinear {
		return time.Duration(i+1) * time.Microsecond
	}
	return time.Duration(wakeLinear<<(i-wakeLinear+1)) * time.Microsecond
}

func (h *wakeHist) add(d time.Duration) {
	h.n[wakeBucket(d)]++
	h.total++
	h.max = max(h.max, d)
}

// quantile returns the top of the bucket holding quantile q, or the
// largest latency recorded if that is less (0 when empty): a latency at
// least q of the wake-ups did not exceed.
func (h *wakeHist) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	want := uint32(q*float64(h.total) + 0.999999)
	var c uint32
	for i, n := range h.n {
		if c += n; c >= want {
			if i == len(h.n)-1 {
				return h.max // the last bucket holds everything above
			}
			return min(wakeBucketTop(i), h.max)
		}
	}
	return h.max
}
