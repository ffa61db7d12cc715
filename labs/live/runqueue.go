package live

import (
	"fmt"
	"strconv"
	"strings"
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
// the longest single wait is not observable from it. What the total
// does bound: no input waited for the loop longer than the loop waited
// for its CPU in all over the interval, and it is the CPU time the loop
// lost to other threads. The rule (loopStarved): when the loop thread's
// run-queue wait over an interval passes MaxLagFraction of the
// interval's wall time, as a program's does for CLIENT STARVED
// (verbs.Timing), the lab cannot vouch that what its hosts and clients
// handed it entered on time within the limit, so it does not claim to
// have kept real time: a perf run's verdict says LOOP STARVED and counts
// as lagging, and a one-second window counts as a warning. A wait the
// timer's wake-up suffered is also counted as lateness; the two rules
// overlap there, and either one suffices to distrust a run.

// runQueue reads the loop thread's run_delay. The descriptor is opened on
// the loop's own thread (/proc/thread-self), so it stays bound to that
// thread; each read is one pread, a couple of microseconds, made once per
// lag window and at a measurement's start and end, never per pass.
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
	d, err := parseSchedstat(string(buf[:n]))
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

// parseSchedstat returns the run-queue wait (run_delay, nanoseconds) of
// a schedstat line: "<on-cpu ns> <run_delay ns> <timeslices>".
func parseSchedstat(s string) (time.Duration, error) {
	f := strings.Fields(s)
	if len(f) < 2 {
		return 0, fmt.Errorf("schedstat %q: want at least 2 fields", s)
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || ns < 0 {
		return 0, fmt.Errorf("schedstat %q: run_delay %q", s, f[1])
	}
	return time.Duration(ns), nil
}

// loopStarved is the rule: the loop thread waited for a CPU, in all,
// longer than MaxLagFraction of the interval's wall time (wait < 0:
// unknown, never starved).
func loopStarved(wait, wall time.Duration) bool {
	return wait > 0 && float64(wait) > MaxLagFraction*float64(wall)
}

// waitSince is the run-queue wait between two readings, -1 when either
// is unknown.
func waitSince(from, to time.Duration) time.Duration {
	if from < 0 || to < 0 {
		return -1
	}
	return max(to-from, 0)
}
