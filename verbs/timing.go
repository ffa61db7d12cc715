package verbs

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mrlab/mrlab/internal/verbsabi"
)

// Timing says how the lab kept real time while a program measured
// something. The lab runs the emulated network on one loop paced to the
// wall clock; on a busy machine the loop can fall behind, and then every
// delay and rate the program measures on the wall clock is stretched. A
// figure is trustworthy when Lagging is false.
type Timing struct {
	// LabTime and WallTime are the interval's length on the lab's clock
	// and on the wall clock.
	LabTime, WallTime time.Duration
	// MaxLateness is the furthest the lab fell behind the wall clock.
	MaxLateness time.Duration
	// Events ran in the lab meanwhile, EventsLate of them late.
	Events, EventsLate uint64
	// Lagging is the lab's verdict: it fell behind (or its clock lost on
	// the wall clock) by more than Limit of LabTime, and figures measured
	// over the interval are off by as much.
	Lagging bool
	Limit   float64
	// LoopStarved says the lab's loop thread waited for a CPU beyond
	// Limit (the lab's rule, labs/live/runqueue.go): what this program
	// handed the lab may have waited that long before entering it, which
	// MaxLateness does not count. A bound, not a measured distortion: it
	// does not make Lagging true, but the verdict no longer says real
	// time kept.
	LoopStarved bool
	// ClientWait is how long this program's threads waited for a CPU
	// (runnable, not running: the kernel's run_delay, summed over
	// threads) during the interval; negative when the kernel does not
	// say (no /proc schedstat). A figure the program measured includes
	// its own waits: a latency stretched by them, a rate lower if its
	// queues ran dry meanwhile. The lab's Lagging cannot see them.
	ClientWait time.Duration
}

// ClientStarved reports whether the program waited for a CPU longer than
// Limit of the interval's wall time: its own scheduling, not the lab,
// may have shaped what it measured.
func (t Timing) ClientStarved() bool {
	return t.ClientWait > 0 && float64(t.ClientWait) > t.Limit*float64(t.WallTime)
}

// clientNote says how long the program waited for a CPU, for the verdict.
func (t Timing) clientNote() string {
	switch {
	case t.ClientWait <= 0:
		return ""
	case t.ClientStarved():
		return fmt.Sprintf("; CLIENT STARVED: this program's threads waited %v for a CPU in all (%.1f%% of the wall time, summed over threads; limit %.0f%%), so latencies it measured include those waits and its rates are lower wherever its queues ran dry",
			t.ClientWait.Round(time.Microsecond), 100*float64(t.ClientWait)/float64(max(t.WallTime, 1)), 100*t.Limit)
	}
	return fmt.Sprintf(", this program's threads waited %v for a CPU", t.ClientWait.Round(time.Microsecond))
}

// loopNote adds the lab's loop starvation to a LAGGING verdict.
func (t Timing) loopNote() string {
	if t.LoopStarved {
		return "; LOOP STARVED too: the lab's loop waited for a CPU beyond the limit"
	}
	return ""
}

// String is the verdict in one line.
func (t Timing) String() string {
	if !t.Lagging && t.LoopStarved {
		return fmt.Sprintf("LOOP STARVED: the lab's loop waited for a CPU beyond %.0f%% of the run, so what this program handed it may have waited that long before entering the lab, which its lateness (worst %v) does not count; over %v of lab time and %v of wall time, rates and times measured meanwhile may not be true in wall time%s",
			100*t.Limit, t.MaxLateness.Round(time.Microsecond), t.LabTime.Round(time.Microsecond), t.WallTime.Round(time.Microsecond), t.clientNote())
	}
	if !t.Lagging {
		return fmt.Sprintf("real time kept: lab time %v, wall time %v, worst lateness %v%s",
			t.LabTime.Round(time.Microsecond), t.WallTime.Round(time.Microsecond), t.MaxLateness.Round(time.Microsecond), t.clientNote())
	}
	return fmt.Sprintf("LAGGING: the lab fell up to %v behind the wall clock (%d of %d events late) over %v of lab time and %v of wall time: rates and times measured meanwhile are not true in wall time (limit %.0f%%)%s",
		t.MaxLateness.Round(time.Microsecond), t.EventsLate, t.Events, t.LabTime.Round(time.Microsecond),
		t.WallTime.Round(time.Microsecond), 100*t.Limit, t.loopNote()+t.clientNote())
}

// Stopwatch follows the lab's timing from StartTiming to Stop.
type Stopwatch struct {
	d    *Device
	h    uint32
	wait time.Duration // the process's CPU wait at the start (-1: unknown)
}

// StartTiming starts following how the lab keeps real time; Stop says how
// it did. Bracket a measurement with them.
func (d *Device) StartTiming() (*Stopwatch, error) {
	r, _, err := d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpWatch})
	if err != nil {
		return nil, err
	}
	return &Stopwatch{d: d, h: r.Handle, wait: cpuWait()}, nil
}

// Stop ends the stopwatch and returns the lab's timing since StartTiming.
func (w *Stopwatch) Stop() (Timing, error) {
	r, _, err := w.d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpUnwatch, Watch: w.h})
	if err != nil {
		return Timing{}, err
	}
	wait := time.Duration(-1)
	if end := cpuWait(); end >= 0 && w.wait >= 0 {
		// Threads that exited meanwhile take their waits with them:
		// never less than nothing.
		wait = max(end-w.wait, 0)
	}
	return Timing{LabTime: time.Duration(r.LabNs), WallTime: time.Duration(r.WallNs), MaxLateness: time.Duration(r.MaxLateNs),
		Events: r.Events, EventsLate: r.EventsLate, Lagging: r.Lagging, LoopStarved: r.LoopStarved, Limit: float64(r.LimitPPM) / 1e6, ClientWait: wait}, nil
}

// cpuWait is how long this process's threads have waited on a run queue,
// summed (the second field of /proc/self/task/*/schedstat), or -1 when
// the kernel does not say.
func cpuWait() time.Duration {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return -1
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/schedstat")
		if err != nil {
			continue // exited meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return -1
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return -1
		}
		sum += time.Duration(ns)
	}
	return sum
}
