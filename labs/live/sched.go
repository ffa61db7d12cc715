package live

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Scheduling policies for the loop's thread. The loop must run within
// microseconds of each event on a machine that also runs the hosts'
// kernels, their programs and other people's work, without the kernel
// stopping it.
//
// SCHED_FIFO (the lab's default until this was measured) is throttled: a
// real-time thread that keeps a CPU busy is stopped for
// sched_rt_period_us - sched_rt_runtime_us (50 ms) of every second, and a
// lab at its cap keeps its loop busy. Measured on b2b at 1 Gbit/s with
// mrlab perf -D 3: FIFO lagged 55-100 ms in 5 of 5 runs on an idle box,
// and in 2 of 6 at load 22-27 where fair lagged in none (labs/live/
// README.md). A fair-class thread is never throttled; at nice -20 it weighs
// 86 times a nice-0 thread, and with a short slice (sched_attr's
// sched_runtime for SCHED_OTHER, Linux 6.12+ EEVDF) it preempts the
// running task as soon as it wakes. That is the default, PolicyFair.

// Policy names a scheduling policy for the loop's thread.
type Policy string

const (
	// PolicyFair: SCHED_OTHER at nice -20 with a 100 µs slice (the
	// default). Never throttled; needs root (CAP_SYS_NICE).
	PolicyFair Policy = "fair"
	// PolicyFIFO: SCHED_FIFO priority 1. Preempts every fair-class task,
	// but the kernel throttles it for 50 ms a second when it stays busy.
	PolicyFIFO Policy = "fifo"
	// PolicyNormal leaves the thread as it is (nice 0, the default slice).
	PolicyNormal Policy = "normal"
)

// Policies lists the policies Up accepts, the default first.
func Policies() []Policy { return []Policy{PolicyFair, PolicyFIFO, PolicyNormal} }

// ParsePolicy checks a policy name ("" means the default).
func ParsePolicy(s string) (Policy, error) {
	if s == "" {
		return PolicyFair, nil
	}
	for _, p := range Policies() {
		if string(p) == s {
			return p, nil
		}
	}
	names := make([]string, len(Policies()))
	for i, p := range Policies() {
		names[i] = string(p)
	}
	return "", fmt.Errorf("scheduling policy %q: want one of %s", s, strings.Join(names, ", "))
}

// fairSlice is the loop thread's slice under PolicyFair: the kernel's
// minimum custom slice. A waking task whose slice is shorter than the
// running one's preempts it (EEVDF's earliest deadline), so the loop
// wakes within a few microseconds of its timer however busy the CPU is.
const fairSlice = 100 * time.Microsecond

// fairSpin is how close the next event must be for a loop under
// PolicyFair to watch the clock rather than sleep (PacerConfig.Spin). A
// loop that sleeps through the gaps between a lab's packets (12 µs per
// 1500-byte packet at 1 Gbit/s) must win the CPU back at every wake-up;
// at load 28-36 on 2 cores that made b2b mrlab perf -D 3 lag in 15 of 18
// runs (19-73 ms), against 3 of 12 spinning through gaps under 200 µs
// (most runs' worst lateness 4-15 ms), at the same write_bw (A/B,
// alternating). While it spins it serves the verbs rings, so a client's
// post waits no longer than before.
const fairSpin = 200 * time.Microsecond

// schedFlagResetOnFork keeps threads the loop's thread happens to create
// (the Go runtime starts new Ms from whatever thread needs one) at the
// default policy and nice level.
const schedFlagResetOnFork = 0x01

// applyPolicy sets the calling thread's scheduling and returns what is in
// force and why, for status. It never fails: a refused policy leaves the
// thread as it was and says so.
func applyPolicy(p Policy) string {
	switch p {
	case PolicyNormal:
		return "normal (nice 0): asked for (--sched normal); a busy machine makes the loop late"
	case PolicyFIFO:
		attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1, Flags: schedFlagResetOnFork}
		if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
			return fmt.Sprintf("normal: SCHED_FIFO refused (%v)", err)
		}
		return fmt.Sprintf("fifo (SCHED_FIFO 1): asked for (--sched fifo); the kernel stops it %s while it stays busy", rtThrottle())
	}
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL, Nice: -20, Runtime: uint64(fairSlice), Flags: schedFlagResetOnFork}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		return fmt.Sprintf("normal: nice -20 refused (%v); a busy machine makes the loop late", err)
	}
	slice := "default slice"
	if got, err := unix.SchedGetAttr(0, 0); err == nil && got.Runtime > 0 {
		slice = time.Duration(got.Runtime).String() + " slice"
	}
	return fmt.Sprintf("fair (SCHED_OTHER nice -20, %s%s): never throttled, preempts on wake-up; SCHED_FIFO would be stopped %s while busy", slice, autogroupNice(), rtThrottle())
}

// autogroupNice raises the weight of the process's autogroup to nice -20
// and says so. With sched_autogroup_enabled, the fair class shares a CPU
// between sessions first and by nice only within one: a lab (its own
// session when it runs in the background) at nice -20 got 25% of a CPU
// against a dozen busy sessions at nice 0 (its loop thread waited 1.4 s
// on the run queue in 2 s of a perf run). The setting is this session's
// alone (/proc/self/autogroup; it goes with the session), not a system
// knob, and it is made only when the lab leads its session (mrlab up in
// the background): a lab in a user's shell session (--foreground, tests)
// would raise the shell's and everything else it runs with it.
func autogroupNice() string {
	const path = "/proc/self/autogroup"
	if _, err := os.Stat(path); err != nil {
		return "" // no autogroups: nice alone weighs the thread
	}
	if sid, err := unix.Getsid(0); err != nil || sid != os.Getpid() {
		return ", its session's autogroup at its own nice (the lab does not lead the session)"
	}
	if err := os.WriteFile(path, []byte("-20"), 0); err != nil {
		return fmt.Sprintf(", autogroup nice refused: %v", err)
	}
	return ", autogroup nice -20"
}

// rtThrottle says how long the kernel's real-time throttling stops a busy
// SCHED_FIFO thread, from /proc/sys/kernel/sched_rt_{runtime,period}_us.
func rtThrottle() string {
	read := func(name string) (int64, bool) {
		b, err := os.ReadFile("/proc/sys/kernel/" + name)
		if err != nil {
			return 0, false
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return v, err == nil
	}
	rt, ok1 := read("sched_rt_runtime_us")
	per, ok2 := read("sched_rt_period_us")
	switch {
	case !ok1 || !ok2:
		return "by real-time throttling"
	case rt < 0:
		return "never (sched_rt_runtime_us -1)"
	}
	stop := time.Duration(per-rt) * time.Microsecond
	return fmt.Sprintf("%v of every %v (sched_rt_runtime_us %d/%d)", stop, time.Duration(per)*time.Microsecond, rt, per)
}
