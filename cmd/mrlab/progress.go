package main

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/mrlab/mrlab/internal/sim"
)

// A long run says how far it got: a bar on a terminal; elsewhere (a log, a
// CI job) a line after the first progressAfter of wall time and then every
// progressEvery, so a big lab is never silent for minutes.
const (
	progressAfter = 3 * time.Second
	progressEvery = 10 * time.Second
)

// progress follows one run's virtual time.
type progress struct {
	w      io.Writer // stderr
	label  string
	total  sim.Time // 0 when the run's length is not known
	bar    *progressbar.ProgressBar
	start  time.Time
	next   time.Time
	now    func() time.Time // wall clock (tests replace it)
	closed bool
}

// newProgress starts following a run on stderr w.
func newProgress(w io.Writer, label string, total sim.Time) *progress {
	p := &progress{w: w, label: label, total: total, now: time.Now}
	p.start = p.now()
	p.next = p.start.Add(progressAfter)
	if isTerminal(w) {
		max := int64(-1) // a spinner when the length is unknown
		if total > 0 {
			max = 1000
		}
		p.bar = progressbar.NewOptions64(max,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(label),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionSetPredictTime(total > 0),
			progressbar.OptionThrottle(100*time.Millisecond),
		)
	}
	return p
}

// update reports virtual time t reached. It is cheap enough to call every
// few thousand events.
func (p *progress) update(t sim.Time) {
	if p == nil || p.closed {
		return
	}
	if p.bar != nil {
		if p.total > 0 {
			_ = p.bar.Set64(int64(1000 * float64(t) / float64(p.total)))
		} else {
			p.bar.Describe(fmt.Sprintf("%s: %v virtual", p.label, t))
			_ = p.bar.Add(1)
		}
		return
	}
	wall := p.now()
	if wall.Before(p.next) {
		return
	}
	p.next = wall.Add(progressEvery)
	elapsed := wall.Sub(p.start).Round(time.Second)
	if p.total > 0 {
		fmt.Fprintf(p.w, "mrlab: %s: %v of %v virtual (%.0f%%), %v elapsed\n", p.label, t, p.total, 100*float64(t)/float64(p.total), elapsed)
	} else {
		fmt.Fprintf(p.w, "mrlab: %s: %v virtual, %v elapsed\n", p.label, t, elapsed)
	}
}

// finish ends the bar.
func (p *progress) finish() {
	if p == nil || p.closed {
		return
	}
	p.closed = true
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
