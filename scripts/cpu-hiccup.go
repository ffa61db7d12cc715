//go:build ignore

// cpu-hiccup measures how long this machine's CPUs stop running anything
// the guest kernel schedules: on every CPU a SCHED_FIFO 99 thread (the
// highest priority a lab can get short of SCHED_DEADLINE) spins 200 µs in
// user mode and sleeps 800 µs, for a bounded time. Two kinds of events:
//
//   - SPIN GAP: the clock jumped while the thread spun. Nothing the guest
//     schedules preempts FIFO 99 in user mode; only interrupts (short) or
//     the vCPU not running at all (the hypervisor) make a gap of
//     milliseconds.
//   - LATE WAKE: a sleep ended late; with run-queue wait ~0 the thread was
//     not woken on time (its timer interrupt came late: the vCPU was not
//     running), with run-queue wait it waited for the guest kernel (a
//     non-preemptible section: this VM's kernel is PREEMPT_NONE).
//
// Events at the same instant on every CPU, with no run-queue wait, are the
// machine stopping under the lab, which no scheduling policy in the guest
// can prevent. Run as root, beside a lab, and compare with the lab log's
// "cannot keep real time" lines (labs/live/README.md, "Stalls below the
// guest"):
//
//	go run scripts/cpu-hiccup.go -for 15s
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

func runQueueWait(tid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/schedstat", tid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	w, _ := strconv.ParseInt(f[1], 10, 64)
	return time.Duration(w)
}

func probe(cpu int, dur, report time.Duration, out chan<- string) error {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pinning to cpu%d: %w", cpu, err)
	}
	if err := unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 99}, 0); err != nil {
		return fmt.Errorf("SCHED_FIFO 99 on cpu%d (needs root): %w", cpu, err)
	}
	tid := unix.Gettid()
	stamp := func(t time.Time) string { return t.UTC().Format("15:04:05.000") }
	for start := time.Now(); time.Since(start) < dur; {
		s := time.Now()
		for prev := s; prev.Sub(s) < 200*time.Microsecond; {
			now := time.Now()
			if g := now.Sub(prev); g > report {
				out <- fmt.Sprintf("%s cpu%d SPIN GAP %v", stamp(now), cpu, g.Round(time.Microsecond))
			}
			prev = now
		}
		w0 := runQueueWait(tid)
		due := time.Now().Add(800 * time.Microsecond)
		ts := unix.NsecToTimespec(800_000)
		unix.Nanosleep(&ts, nil) // a raw sleep: no Go timer on the path
		if late := time.Since(due); late > report {
			out <- fmt.Sprintf("%s cpu%d LATE WAKE %v (run-queue wait %v)", stamp(time.Now()), cpu, late.Round(time.Microsecond), (runQueueWait(tid) - w0).Round(time.Microsecond))
		}
	}
	return nil
}

func main() {
	dur := flag.Duration("for", 15*time.Second, "how long to probe (bounded: at most 2m)")
	report := flag.Duration("report", time.Millisecond, "report gaps and late wake-ups longer than this")
	flag.Parse()
	if *dur > 2*time.Minute {
		*dur = 2 * time.Minute
	}
	out := make(chan string, 1024)
	var wg sync.WaitGroup
	for cpu := 0; cpu < runtime.NumCPU(); cpu++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := probe(cpu, *dur, *report, out); err != nil {
				out <- "error: " + err.Error()
			}
		}()
	}
	go func() { wg.Wait(); close(out) }()
	for l := range out {
		fmt.Println(l)
	}
}
