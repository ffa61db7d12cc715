package verbs

import (
	"context"
	"fmt"
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
}

// String is the verdict in one line.
func (t Timing) String() string {
	if !t.Lagging {
		return fmt.Sprintf("real time kept: lab time %v, wall time %v, worst lateness %v",
			t.LabTime.Round(time.Microsecond), t.WallTime.Round(time.Microsecond), t.MaxLateness.Round(time.Microsecond))
	}
	return fmt.Sprintf("LAGGING: the lab fell up to %v behind the wall clock (%d of %d events late) over %v of lab time and %v of wall time: rates and times measured meanwhile are not true in wall time (limit %.0f%%)",
		t.MaxLateness.Round(time.Microsecond), t.EventsLate, t.Events, t.LabTime.Round(time.Microsecond),
		t.WallTime.Round(time.Microsecond), 100*t.Limit)
}

// Stopwatch follows the lab's timing from StartTiming to Stop.
type Stopwatch struct {
	d *Device
	h uint32
}

// StartTiming starts following how the lab keeps real time; Stop says how
// it did. Bracket a measurement with them.
func (d *Device) StartTiming() (*Stopwatch, error) {
	r, _, err := d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpWatch})
	if err != nil {
		return nil, err
	}
	return &Stopwatch{d: d, h: r.Handle}, nil
}

// Stop ends the stopwatch and returns the lab's timing since StartTiming.
func (w *Stopwatch) Stop() (Timing, error) {
	r, _, err := w.d.call(context.Background(), &verbsabi.Request{Op: verbsabi.OpUnwatch, Watch: w.h})
	if err != nil {
		return Timing{}, err
	}
	return Timing{LabTime: time.Duration(r.LabNs), WallTime: time.Duration(r.WallNs), MaxLateness: time.Duration(r.MaxLateNs),
		Events: r.Events, EventsLate: r.EventsLate, Lagging: r.Lagging, Limit: float64(r.LimitPPM) / 1e6}, nil
}
