package verbsperf

import (
	"context"
	"time"
)

// A side that polls its CQ (perf's default, as perftest's) need not spin
// while a full window of messages is in flight: the pipe stays full for
// as long as the window takes to drain. pacer turns that into a sleep.
// Once the CQ is empty and the side has done all it could (posted to the
// window's end, or checked and credited every message that arrived), it
// sleeps for a quarter of the window's time at the measured rate (the
// window: the messages in flight, which is the depth until a run ends
// and then fewer, so the last messages are seen at once), less the
// sleeps' measured overshoot, and then finds a quarter of a window to
// take at once while the rest keeps the link busy. A quarter, not a
// half: with checked WRITEs and SENDs a slot is free again only once the
// server has seen the message and the client its credit, so both sides'
// sleeps come out of the same window; each leaves the other and the
// round trip half of it.
//
// Once a window of four or more has drained to under four messages in
// flight (the run is ending: the last completions, the fin's reply) it
// waits for them in the kernel (CQ.Wait) rather than spin on a peer
// that may be asleep.
//
// It spins as before when a sleep would not be worth it: before any
// message has completed (no rate yet), with a window of fewer than four
// messages (write_lat's one: every wake-up would be in its latency), or
// when the quarter window is shorter than the timer's measured overshoot
// (a short window at a high rate; the least overshoot of all sleeps,
// once there have been learnSleeps; one sleep in probeSpins overshoots'
// time measures it again, so that an overshoot learned while the machine
// was busy does not stop the sleeps for good). Up to that, a sleep (of
// at least half a quarter) ends within one and a half quarters, and
// both sides' within three of the window's four.
//
// The rule corrects itself: if the measured rate is lower than the path
// allows, the sleeps are longer than they need be, but both sides'
// together last half the window's time at that rate, so the window lets
// twice that rate through; a higher rate is believed at once (it shortens
// the sleeps), a lower one a quarter at a time, so a single slow wake-up
// does not drain the window (TestPacerKeepsThePipeFull). A lower rate (or
// the first) is timed over at least a quarter window of messages, the
// span a sleep stands for: one timed over a few messages that a stall
// spread out would set a sleep many times the window's time, during which
// the other side sees no progress and slows down too
// (TestPacerFirstRateNeedsEvidence).
type pacer struct {
	depth uint64 // the window's size, in messages
	// progress returns the messages through the window so far and
	// those in it now (its depth, or fewer as a run ends).
	progress func() (done, inFlight uint64)
	// per is the time per message (a moving average over wake-ups that
	// found progress), from the last progress at last, lastN.
	per   time.Duration
	last  time.Time
	lastN uint64
	// over is the timer's overshoot: the least any sleep overshot;
	// guarded is when the side began spinning because of it.
	guarded time.Time
	over    time.Duration
	timer   *time.Timer
	// Sleeps counts the sleeps taken, Slept their time and Asked the
	// time they asked for (Slept less Asked: how late they woke).
	Sleeps int
	Slept  time.Duration
	Asked  time.Duration
}

// newPacer paces a side whose window is depth messages and progress
// describes.
func newPacer(depth int, progress func() (done, inFlight uint64)) *pacer {
	return &pacer{depth: uint64(depth), progress: progress}
}

// learnSleeps is how many sleeps the timer's overshoot is learned from
// before it may stop the sleeps: the least of a few, because on a busy
// machine any one sleep may end long after its timer (the side waiting
// for a CPU), and a single such first sleep must not make it spin for
// good.
const learnSleeps = 4

// probeSpins is how many of the learned overshoots a side spins, where
// that overshoot makes sleeps not worth it, before it sleeps once to
// measure it again.
const probeSpins = 32

// block is sleepFor's answer when the side should wait in the kernel for
// its next completion.
const block = time.Duration(-1)

// sleepFor returns how long to sleep now that the CQ is empty (0: spin;
// block: wait in the kernel), noting the progress since the last call.
func (p *pacer) sleepFor(now time.Time) time.Duration {
	n, inFlight := p.progress()
	switch {
	case n <= p.lastN || p.last.IsZero():
		// No progress: until there is a rate, the interval starts at
		// the last empty look (the connection's set-up is not the rate,
		// nor is a wait before the first look that found messages
		// already there).
		if n < p.lastN || p.per == 0 || p.last.IsZero() {
			p.last, p.lastN = now, n
		}
		if p.per == 0 {
			return 0
		}
	default:
		// A shorter time per message is believed at once (sleeping less
		// is safe); a longer one, or the first, only from at least a
		// quarter window of messages, what the sleep it sets stands for:
		// until then the interval keeps its start. A first rate timed
		// from 3 messages that a stall spread over 44 ms made a side
		// sleep 472 ms, and the run never recovered (0.43 of the cap).
		// A longer one then moves a quarter of the way at a time.
		k := n - p.lastN
		switch per := now.Sub(p.last) / time.Duration(k); {
		case p.per != 0 && per < p.per:
			p.per = per
			p.last, p.lastN = now, n
		case k < max(inFlight/4, 1):
		case p.per == 0:
			p.per = per
			p.last, p.lastN = now, n
		default:
			p.per += (per - p.per) / 4
			p.last, p.lastN = now, n
		}
	}
	if p.per == 0 {
		return 0
	}
	if p.depth >= 4 && inFlight < 4 {
		return block // the run's last messages, or its end
	}
	quarter := p.per * time.Duration(inFlight/4)
	if quarter <= 0 {
		return 0
	}
	if p.Sleeps >= learnSleeps && quarter < p.over {
		// Not worth a sleep at the overshoot learned, which may have
		// been learned while the machine was busier: after spinning
		// probeSpins overshoots' time, one sleep measures it again
		// (costing the link at most one overshoot in that many).
		if p.guarded.IsZero() {
			p.guarded = now
		}
		if now.Sub(p.guarded) < probeSpins*p.over {
			return 0
		}
	}
	p.guarded = time.Time{}
	// Less the overshoot, but never under half (so while the overshoot
	// is being learned, too).
	return max(quarter-p.over, quarter/2)
}

// sleep sleeps d or until ctx is done, and learns the overshoot.
func (p *pacer) sleep(ctx context.Context, d time.Duration) {
	start := time.Now()
	if p.timer == nil {
		p.timer = time.NewTimer(d)
	} else {
		p.timer.Reset(d)
	}
	select {
	case <-p.timer.C:
	case <-ctx.Done():
		p.timer.Stop()
		return
	}
	p.slept(d, time.Since(start))
}

// slept notes a sleep of d that took took.
func (p *pacer) slept(d, took time.Duration) {
	p.Sleeps++
	p.Slept += took
	p.Asked += d
	// The timer's own lateness is the least a sleep overshoots: the
	// rest of an overshoot is the machine keeping the side from a CPU,
	// which it would suffer spinning too.
	if o := max(took-d, 0); p.Sleeps == 1 || o < p.over {
		p.over = o
	}
}
