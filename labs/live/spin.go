package live

import "time"

// The loop's spin horizon. A timer wakes a sleeping thread late: by the
// kernel's timer slack and wake-up path (microseconds on an idle machine)
// and, on a busy one, by however long the thread waits for its CPU. A
// loop that slept until each event would run every event that late. So
// the loop sleeps until a horizon before the event and watches the clock
// for the rest (serving the verbs rings meanwhile), and the horizon is
// measured, not tuned: twice the worst wake-up latency of the last window
// (the timer's lateness as the loop saw it on waking), raised at once
// when a wake-up is later than half of it. It is bounded below by minSpin
// (the clock read and poll of one pass) and above by a quarter of the lag
// threshold: the CPU a wake-up may burn is a fraction of the lateness the
// lab counts, and a machine whose wake-ups are later than that cannot be
// helped by spinning. Under SCHED_FIFO it is minSpin: a real-time thread
// that stays busy is throttled for 50 ms a second.

// minSpin is the least horizon: one pass of the loop's clock read and
// poll.
const minSpin = 10 * time.Microsecond

// spinner tracks the horizon. Loop goroutine only.
type spinner struct {
	horizon  time.Duration
	max      time.Duration // the horizon's upper bound
	adaptive bool
	cur      time.Duration // worst wake-up latency in this window
	prev     time.Duration // in the last window that had a wake-up
	seen     bool          // this window had a wake-up
	hist     wakeHist      // this window's wake-ups
	prevP99  time.Duration // the 99th percentile of the last window that had one
}

// newSpinner returns the horizon for a fixed Spin (PacerConfig.Spin != 0)
// or a measured one under policy pol with lag threshold lag.
func newSpinner(fixed time.Duration, pol Policy, lag time.Duration) spinner {
	switch {
	case fixed < 0:
		return spinner{}
	case fixed > 0:
		return spinner{horizon: fixed, max: fixed}
	case pol == PolicyFIFO:
		return spinner{horizon: minSpin, max: minSpin}
	}
	hi := max(lag/4, minSpin)
	// Until the first wake-up is measured, assume the worst.
	return spinner{horizon: hi, max: hi, adaptive: true}
}

// woke records a timer wake-up late by late (whatever the policy: the
// lag warning reports the window's worst).
func (s *spinner) woke(late time.Duration) {
	late = max(late, 0)
	s.cur = max(s.cur, late)
	s.hist.add(late)
	s.seen = true
	if s.adaptive && 2*late > s.horizon {
		s.horizon = min(2*late, s.max)
	}
}

// roll ends a window: the horizon becomes twice its worst wake-up (or
// the last window's that had one), within bounds.
func (s *spinner) roll() {
	if s.seen {
		s.prev = s.cur
		s.prevP99 = s.hist.quantile(0.99)
	}
	s.cur, s.seen = 0, false
	s.hist = wakeHist{}
	if !s.adaptive {
		return
	}
	s.horizon = min(max(2*s.prev, minSpin), s.max)
}

// wakeHist counts a window's wake-up latencies: 1 µs buckets below
// wakeLinear, then one bucket per doubling. Fixed size: recording
// allocates nothing.
type wakeHist struct {
	n     [wakeLinear + 24]uint32
	total uint32
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
}

// quantile returns the top of the bucket holding quantile q (0 when
// empty): a latency at least q of the wake-ups did not exceed.
func (h *wakeHist) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	want := uint32(q*float64(h.total) + 0.999999)
	var c uint32
	for i, n := range h.n {
		if c += n; c >= want {
			return wakeBucketTop(i)
		}
	}
	return wakeBucketTop(len(h.n) - 1)
}
