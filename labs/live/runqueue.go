package live

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// The loop's waits for its CPU. A loop asleep between packets is woken by
// a host's mr0 becoming readable (or a post, or a verbs client's ring)
// and then waits on the CPU's run queue until the kernel runs it. No event
// is due, so nothing counts as late: the lab's lateness measures only how
// late its timer wake-ups and events run, and a packet enters the lab when
// it is read, so its events are on time however long it sat in mr0's
// ring. Measured (labs/live/README.md, "Ring drops while the lab keeps
// real time"): under the fair policy at load 11-12 the loop thread spent
// 0.5-1.4 s on the run queue in 1.7-3.6 s of sending, 327-513 of 30,000
// datagrams were dropped at the ring, and one such run said "real time
// kept".
//
// The kernel counts a thread's time runnable but not running (run_delay,
// the second field of /proc/<pid>/task/<tid>/schedstat), in total only:
// the longest single wait is not observable from it. The loop samples it
// every 10 ms of its passes (when it publishes its figures), so the
// largest growth between two samples bounds any single wait (a wait ends
// before the thread that waited reads the counter, so each falls within
// one sample). What can honestly be claimed:
//
//   - An input waited for the loop at most one wait's length while the
//     loop drained the hosts' kernels whenever it ran: then the largest
//     sample bounds its delay.
//   - While a look ended on its budget with devices still readable
//     (LooksCut: the loop read slower than its hosts sent), input queued
//     across waits, and only the total bounds its delay: the loop lost
//     that much reading time.
//
// The rule (loopStarved): the loop is starved over an interval when the
// bound that applies passes MaxLagFraction of the interval, the limit
// the lab's lateness has: an input may then have waited longer than the
// limit before entering the lab, which its lateness does not count. The
// lab then does not claim to have kept real time: a run's verdict says
// LOOP STARVED instead, and a window counts in StarvedWindows. It is a
// bound, not a measured distortion, so it does not make a run Lagging
// (perf's exit status), as CLIENT STARVED does not: measured on
// TestLiveSenderAboveLine's flood (30,000 datagrams in 0.35-1.7 s, load
// 2.4-5.5), deadline loops waited 9-17 ms (at most 1-6 ms between
// samples) with looks cut, and the rule starved 14 of the 19 runs that
// were not late, none of which dropped anything; every run but one that
// dropped more than 1% at mr0's ring (10 of 11 in 56, deadline and fair)
// was late beyond the limit too. A wait the timer's wake-up suffered also counts as lateness; the
// rules overlap there.

// runQueue reads the loop thread's run_delay. The descriptor is opened on
// the loop's own thread (/proc/thread-self), so it stays bound to that
// thread; each read is one pread, a couple of microseconds, made every
// 10 ms of the loop's passes (when it publishes its figures) and at a
// measurement's start and end, never per pass.
type runQueue struct{ fd int }

// openRunQueue opens the calling thread's schedstat. On a kernel without
// schedstat (or without /proc) the reader reports -1.
func openRunQueue() runQueue {
	fd, err := unix.Open("/proc/thread-self/schedstat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return runQueue{fd: -1}
	}
	return runQueue{fd: fd}
}

// wait is the thread's total time on a run queue so far, or -1 when the
// kernel does not say. The thread that opened it only.
func (r runQueue) wait() time.Duration {
	if r.fd < 0 {
		return -1
	}
	var buf [96]byte
	n, err := unix.Pread(r.fd, buf[:], 0)
	if err != nil || n <= 0 {
		return -1
	}
	d, err := parseSchedstat(buf[:n])
	if err != nil {
		return -1
	}
	return d
}

func (r runQueue) close() {
	if r.fd >= 0 {
		unix.Close(r.fd)
	}
}

// errSchedstat is parseSchedstat's error (it names no input, so that
// the buffer it reads stays on the stack).
var errSchedstat = errors.New("schedstat: want \"<on-cpu ns> <run_delay ns> <timeslices>\"")

// parseSchedstat returns the run-queue wait (run_delay, nanoseconds) of
// a schedstat line: "<on-cpu ns> <run_delay ns> <timeslices>". It does
// not allocate: the loop reads it every 10 ms.
func parseSchedstat(b []byte) (time.Duration, error) {
	field := 0
	var ns int64
	digits := 0
	for i := 0; i <= len(b); i++ {
		if i < len(b) && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' {
			if field == 1 {
				c := b[i]
				if c < '0' || c > '9' || digits == 18 {
					return 0, errSchedstat
				}
				ns = ns*10 + int64(c-'0')
				digits++
			}
			continue
		}
		if i > 0 && b[i-1] != ' ' && b[i-1] != '\t' && b[i-1] != '\n' {
			if field == 1 {
				return time.Duration(ns), nil
			}
			field++
		}
	}
	return 0, errSchedstat
}

// loopStarved is the rule over an interval of span (wall time): the
// loop's largest wait between two samples (waitMax) passed
// MaxLagFraction of span, or looks were cut meanwhile and its total wait
// did (wait, waitMax < 0: unknown, never starved).
func loopStarved(wait, waitMax time.Duration, cut uint64, span time.Duration) bool {
	limit := time.Duration(MaxLagFraction * float64(span))
	return waitMax > limit || (cut > 0 && wait > limit)
}

// inputBound is how long an input may have waited for the loop by the
// rule's reasoning: the total wait when looks were cut, else the largest
// between two samples.
func inputBound(wait, waitMax time.Duration, cut uint64) time.Duration {
	if cut > 0 {
		return wait
	}
	return waitMax
}

// openRQ opens the loop thread's run-queue reader. On the loop's thread
// (Run, locked to it), so it reads that thread's waits.
func (p *Pacer) openRQ() {
	p.rq = openRunQueue()
	p.winRQ, p.lag.LoopWait = p.rq.wait(), -1
	p.lastRQ, p.lag.LoopWaitWindow, p.lag.LoopWaitMax = p.winRQ, -1, -1
}

// sampleRQ reads the loop thread's run-queue wait and records its growth
// since the last sample as a bound on a single wait, for the window and
// for every open watch. Loop goroutine only.
func (p *Pacer) sampleRQ() time.Duration {
	now := p.rq.wait()
	if d := waitSince(p.lastRQ, now); d >= 0 {
		p.winRQMax = max(p.winRQMax, d)
		for _, w := range p.watches {
			w.rqMax = max(w.rqMax, d)
		}
	}
	p.lastRQ = now
	return now
}

// waitSince is the run-queue wait between two readings, -1 when either
// is unknown.
func waitSince(from, to time.Duration) time.Duration {
	if from < 0 || to < 0 {
		return -1
	}
	return max(to-from, 0)
}
