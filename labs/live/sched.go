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
// stopping it for long.
//
// The rule: the loop gets the kernel's real-time bandwidth in small
// pieces. SCHED_FIFO gets it in one piece a second: a real-time thread
// that keeps a CPU busy is stopped for sched_rt_period_us -
// sched_rt_runtime_us (50 ms) of every second, and a lab at its cap keeps
// its loop busy (measured on b2b at 1 Gbit/s with mrlab perf -D 3: FIFO
// lagged 55-100 ms in 5 of 5 runs on an idle box). SCHED_DEADLINE with the
// same share of a much shorter period (runtime/period =
// sched_rt_runtime_us/sched_rt_period_us, period = the lab's lag
// threshold) is stopped for at most (1 - share) of that period at a time,
// 50 us of every 1 ms, which never makes an event late by itself; it
// preempts every fair and FIFO thread when it wakes. That is the default,
// PolicyDeadline. The kernel admits deadline threads only while their
// shares fit the CPUs' real-time bandwidth, 5% of each CPU being the
// kernel's fair server's (sched_setattr fails with EBUSY: on 2 CPUs one
// lab's 95% fits, a second's does not); a refused loop runs PolicyFair
// and says so. A fair-class thread is never throttled; at nice -20 it weighs 86
// times a nice-0 thread, and with a short slice (sched_attr's
// sched_runtime for SCHED_OTHER, Linux 6.12+ EEVDF) it preempts the
// running task as soon as it wakes, but a weight is not a bound: a thread
// busy 100% of the time was kept off its CPU up to 104 ms in 2 s at load
// 7 (labs/live/README.md).

// Policy names a scheduling policy for the loop's thread.
type Policy string

const (
	// PolicyDeadline: SCHED_DEADLINE with the kernel's real-time share
	// of a period equal to the lab's lag threshold (the default). Needs
	// root; the kernel refuses it when the CPUs' real-time bandwidth is
	// taken, and then the loop runs PolicyFair.
	PolicyDeadline Policy = "deadline"
	// PolicyFair: SCHED_OTHER at nice -20 with a 100 µs slice. Never
	// throttled; needs root (CAP_SYS_NICE).
	PolicyFair Policy = "fair"
	// PolicyFIFO: SCHED_FIFO priority 1. Preempts every fair-class task,
	// but the kernel throttles it for 50 ms a second when it stays busy.
	PolicyFIFO Policy = "fifo"
	// PolicyNormal leaves the thread as it is (nice 0, the default slice).
	PolicyNormal Policy = "normal"
)

// Policies lists the policies Up accepts, the default first.
func Policies() []Policy { return []Policy{PolicyDeadline, PolicyFair, PolicyFIFO, PolicyNormal} }

// ParsePolicy checks a policy name ("" means the default).
func ParsePolicy(s string) (Policy, error) {
	if s == "" {
		return PolicyDeadline, nil
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

// schedFlagResetOnFork keeps threads the loop's thread happens to create
// (the Go runtime starts new Ms from whatever thread needs one) at the
// default policy and nice level.
const schedFlagResetOnFork = 0x01

// applyPolicy sets the calling thread's scheduling and returns the policy
// in force and what it is and why, for status. period is the lab's lag
// threshold (PolicyDeadline's period). It never fails: a refused policy
// falls back (deadline to fair, fair and fifo to the thread as it was)
// and says so.
func applyPolicy(p Policy, period time.Duration) (Policy, string) {
	switch p {
	case PolicyNormal:
		return PolicyNormal, "normal (nice 0): asked for (--sched normal); a busy machine makes the loop late"
	case PolicyFIFO:
		attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1, Flags: schedFlagResetOnFork}
		if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
			return PolicyNormal, fmt.Sprintf("normal: SCHED_FIFO refused (%v)", err)
		}
		return PolicyFIFO, fmt.Sprintf("fifo (SCHED_FIFO 1): asked for (--sched fifo); the kernel stops it %s while it stays busy", rtThrottle())
	case PolicyDeadline:
		runtime, per, why := deadlineShare(period)
		attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_DEADLINE, Flags: schedFlagResetOnFork,
			Runtime: uint64(runtime), Deadline: uint64(per), Period: uint64(per)}
		if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
			pol, s := applyFair()
			return pol, fmt.Sprintf("%s; SCHED_DEADLINE refused (%v: the CPUs' real-time bandwidth is taken by other deadline threads, e.g. other labs)", s, err)
		}
		return PolicyDeadline, fmt.Sprintf("deadline (SCHED_DEADLINE %v of every %v): %s; preempts fair and fifo threads on wake-up, stopped at most %v at a time; SCHED_FIFO would be stopped %s while busy",
			runtime, per, why, per-runtime, rtThrottle())
	}
	return applyFair()
}

// resetPolicy returns the calling thread to SCHED_OTHER at nice 0, which
// frees a deadline thread's bandwidth. Errors are ignored: the thread is
// about to end.
func resetPolicy() {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}
	_ = unix.SchedSetAttr(0, &attr, 0)
}

// applyFair sets PolicyFair on the calling thread.
func applyFair() (Policy, string) {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL, Nice: -20, Runtime: uint64(fairSlice), Flags: schedFlagResetOnFork}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		return PolicyNormal, fmt.Sprintf("normal: nice -20 refused (%v); a busy machine makes the loop late", err)
	}
	slice := "default slice"
	if got, err := unix.SchedGetAttr(0, 0); err == nil && got.Runtime > 0 {
		slice = time.Duration(got.Runtime).String() + " slice"
	}
	return PolicyFair, fmt.Sprintf("fair (SCHED_OTHER nice -20, %s%s): never throttled, preempts on wake-up; SCHED_FIFO would be stopped %s while busy", slice, autogroupNice(), rtThrottle())
}

// deadlineShare is PolicyDeadline's runtime and period for a lab whose
// lag threshold is lag, and why. The share is what the kernel lets
// real-time threads have of each CPU (sched_rt_runtime_us /
// sched_rt_period_us; deadline admission uses the same limit), 95% when
// unlimited (-1) or unreadable, so other work on the loop's CPU keeps a
// slice. The period is the lag threshold, clamped to what the kernel
// accepts (sched_deadline_period_{min,max}_us: 100 µs to 4 s), so the
// longest stop, (1 - share) of it, is a twentieth of the lateness that
// counts an event late.
func deadlineShare(lag time.Duration) (runtime, period time.Duration, why string) {
	period = min(max(lag, 100*time.Microsecond), time.Second)
	rt, per, ok := rtLimits()
	share, src := 0.95, "95% (real-time share unlimited or unreadable)"
	if ok && rt >= 0 && per > 0 {
		share = float64(rt) / float64(per)
		src = fmt.Sprintf("the kernel's real-time share (sched_rt_runtime_us %d/%d)", rt, per)
	}
	runtime = time.Duration(share * float64(period))
	return runtime, period, fmt.Sprintf("%s of a period of the lag threshold", src)
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

// rtLimits reads /proc/sys/kernel/sched_rt_{runtime,period}_us.
func rtLimits() (rt, per int64, ok bool) {
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
	return rt, per, ok1 && ok2
}

// rtThrottle says how long the kernel's real-time throttling stops a busy
// SCHED_FIFO thread, from /proc/sys/kernel/sched_rt_{runtime,period}_us.
func rtThrottle() string {
	rt, per, ok := rtLimits()
	switch {
	case !ok:
		return "by real-time throttling"
	case rt < 0:
		return "never (sched_rt_runtime_us -1)"
	}
	stop := time.Duration(per-rt) * time.Microsecond
	return fmt.Sprintf("%v of every %v (sched_rt_runtime_us %d/%d)", stop, time.Duration(per)*time.Microsecond, rt, per)
}
