package sim

import (
	"fmt"
	"sync"
)

// Group runs a lab cut into partitions: one Loop per partition, each on its
// own goroutine, synchronized conservatively in windows (docs/engine.md).
//
// The contract that makes it exact:
//
//   - Partitions share no state. The only way one partition reaches another
//     is a Channel (a cut link direction), and everything sent on it
//     arrives at least Lookahead after it was sent.
//   - Windows are [T, T+L) where T is the earliest event of any loop and L
//     the lookahead (shortened to the next global event): no partition can
//     receive, inside a window, anything it was not handed before it.
//   - Channels are drained at each barrier into their destination loop,
//     where their head is armed with the key its sender gave it, so equal
//     times fire in (time, origin, seq) order as on one loop.
//   - Global events (the Group's own loop: timers with no origin, such as a
//     fault timeline or a workload's timeout) run at a barrier, alone,
//     before any partition event at the same time (origin 0 sorts first).
//
// With these, the events each partition runs, their order and their
// effects do not depend on the number of partitions or on the goroutine
// schedule: a run on 1, 2 or 8 partitions is the same run.
type Group struct {
	origins  Origins
	global   *Loop
	parts    []*Loop
	look     Time
	chans    []*Channel
	winEnd   Time // exclusive end of the running window
	windows  uint64
	stopped  bool
	errs     []error
	errMu    sync.Mutex
	parallel bool
	hooks    []func(w Time) Time
	ends     []func()
	held     Time // the earliest barrier a hook asked for
	grid     Time // windows never cross a multiple of grid (0: no grid)
}

// SetGrid makes every window end at or before the next multiple of step
// (> 0), so a barrier falls on every multiple of step that lies inside
// the run: something decided in a window (a workload's "every flow is
// done") can take effect, as a global event, at the next multiple,
// whatever the partitioning and the lookahead. Call it before Run.
func (g *Group) SetGrid(step Time) {
	if step > 0 {
		g.grid = step
	}
}

// GridAfter returns the first multiple of the grid step after t (t+1 when
// there is no grid).
func (g *Group) GridAfter(t Time) Time {
	if g.grid <= 0 {
		return t + 1
	}
	return (t/g.grid + 1) * g.grid
}

// OnBarrier adds fn, run alone at every barrier w (the end of the window
// just run) before channels are drained; it may Send on channels, messages
// at or after w. It returns the earliest time it needs a barrier after
// (Never: none): a sender that hands packets over at barriers (a cut link
// whose serialization ends inside a window) is owed one even when every
// loop is idle.
func (g *Group) OnBarrier(fn func(w Time) Time) { g.hooks = append(g.hooks, fn) }

// OnRunEnd adds fn, run alone when Run returns: what a barrier hook
// hands on at every barrier and a run that stops (Stop at a global event)
// leaves behind, such as observations made by the global event that
// ended the run.
func (g *Group) OnRunEnd(fn func()) { g.ends = append(g.ends, fn) }

func (g *Group) runHooks(w Time) {
	g.held = Never
	for _, fn := range g.hooks {
		g.held = min(g.held, fn(w))
	}
}

// NewGroup returns a group of n partition loops with lookahead look (> 0).
func NewGroup(n int, look Time) (*Group, error) {
	if n < 1 {
		return nil, fmt.Errorf("sim: a group needs at least 1 partition, not %d", n)
	}
	if look <= 0 {
		return nil, fmt.Errorf("sim: lookahead %v: a partitioned run needs a positive lookahead", look)
	}
	g := &Group{look: look, parallel: n > 1}
	g.global = NewLoopShared(&g.origins)
	for range n {
		g.parts = append(g.parts, NewLoopShared(&g.origins))
	}
	return g, nil
}

// Global returns the loop of global events (they run at barriers, alone).
func (g *Group) Global() *Loop { return g.global }

// Part returns partition i's loop.
func (g *Group) Part(i int) *Loop { return g.parts[i] }

// Parts returns the number of partitions.
func (g *Group) Parts() int { return len(g.parts) }

// Lookahead returns the window length.
func (g *Group) Lookahead() Time { return g.look }

// Windows returns the number of windows run.
func (g *Group) Windows() uint64 { return g.windows }

// Fired returns the events run by every loop of the group.
func (g *Group) Fired() uint64 {
	n := g.global.Fired()
	for _, l := range g.parts {
		n += l.Fired()
	}
	return n
}

// Now returns the group's time: the barrier time reached.
func (g *Group) Now() Time { return g.global.Now() }

// Stop ends Run at the next barrier. Partitions finish their window, so
// where a run stops does not depend on the partitioning.
func (g *Group) Stop() { g.stopped = true }

// Channel is one direction of a cut: a FIFO from a sending partition to a
// receiving one. Send is called by the sender's goroutine during a window;
// the receiver's fn runs on the receiver's loop at each message's time,
// with the key the sender gave it.
type Channel struct {
	g        *Group
	src, dst int
	fn       func(now Time, v any)
	out      []Mail // the sender's, during a window
	in       []Mail // the receiver's: drained at barriers, a queue
	inHead   int
	timer    Timer
}

// Mail is one message on a Channel.
type Mail struct {
	At  Time
	Key uint64
	V   any
}

// NewChannel returns a channel from partition src to dst whose messages are
// handed to fn on dst's loop. Create channels before Run.
func (g *Group) NewChannel(src, dst int, fn func(now Time, v any)) *Channel {
	c := &Channel{g: g, src: src, dst: dst, fn: fn}
	c.timer.Init(func(now Time, _ any) { c.land(now) }, nil)
	g.chans = append(g.chans, c)
	return c
}

// Send posts v to arrive at at with key key. Messages on one channel must
// come in (at, key) order and at least the lookahead after the sender's
// now; a message that would land inside the running window is an error
// Run reports (the cut's lookahead was wrong), and it is delivered at the
// window's end instead.
func (c *Channel) Send(at Time, key uint64, v any) {
	if c.g.parallel && at < c.g.winEnd {
		c.g.fail(fmt.Errorf("sim: channel %d->%d: message for %v inside the window ending %v (lookahead %v too long for this cut)",
			c.src, c.dst, at, c.g.winEnd, c.g.look))
		at = c.g.winEnd
	}
	c.out = append(c.out, Mail{At: at, Key: key, V: v})
}

// land runs the head message and arms the next.
func (c *Channel) land(now Time) {
	m := c.in[c.inHead]
	c.in[c.inHead] = Mail{}
	c.inHead++
	if c.inHead == len(c.in) {
		c.in, c.inHead = c.in[:0], 0
	} else {
		h := &c.in[c.inHead]
		c.g.parts[c.dst].ArmKey(&c.timer, h.At, h.Key)
	}
	c.fn(now, m.V)
}

// flush moves what was sent in the window to the receiver (at a barrier).
func (c *Channel) flush() {
	if len(c.out) == 0 {
		return
	}
	wasEmpty := c.inHead == len(c.in)
	c.in = append(c.in, c.out...)
	clear(c.out)
	c.out = c.out[:0]
	if wasEmpty {
		h := &c.in[c.inHead]
		c.g.parts[c.dst].ArmKey(&c.timer, h.At, h.Key)
	}
}

// Fail makes Run return err: the run broke the partitioning's contract.
func (c *Channel) Fail(err error) { c.g.fail(err) }

func (g *Group) fail(err error) {
	g.errMu.Lock()
	if len(g.errs) < 8 {
		g.errs = append(g.errs, err)
	}
	g.errMu.Unlock()
}

// next returns the earliest event of any loop.
func (g *Group) next() Time {
	t := g.global.Next()
	for _, l := range g.parts {
		t = min(t, l.Next())
	}
	return t
}

// Run runs windows until nothing is armed, end is passed, or Stop. It
// leaves every loop's clock at the last barrier (or end). It returns the
// first lookahead violation, if any.
func (g *Group) Run(end Time) error {
	g.stopped = false
	g.runHooks(g.Now())
	for _, c := range g.chans {
		c.flush()
	}
	var cr *crew
	if g.parallel {
		cr = newCrew(g)
		defer cr.stop()
	}
	for !g.stopped {
		t := min(g.next(), g.held)
		if t == Never || t > end {
			break
		}
		g.setNow(t)
		// Global events at t run first, alone (origin 0 sorts first on
		// one loop too), then the window.
		if g.global.Next() == t {
			g.global.RunUntil(t)
			if g.global.stopped() {
				g.stopped = true
			}
			if g.stopped {
				break
			}
		}
		win := t + g.look
		if win < t { // a lookahead of Never (nothing is cut)
			win = Never
		}
		win = min(win, g.global.Next())
		if g.grid > 0 {
			win = min(win, g.GridAfter(t))
		}
		if end < win {
			win = end + 1 // end < Never here
		}
		g.winEnd = win
		g.windows++
		if cr == nil {
			g.runPart(g.parts[0], win)
		} else {
			cr.window(win)
		}
		for _, l := range g.parts {
			if l.stopped() {
				l.clearStop()
				g.stopped = true
			}
		}
		g.runHooks(win)
		for _, c := range g.chans {
			c.flush()
		}
		g.setNow(win - 1)
	}
	if end != Never && !g.stopped && min(g.next(), g.held) > end {
		g.setNow(end)
	}
	for _, fn := range g.ends { // every window is over: alone
		fn()
	}
	g.errMu.Lock()
	defer g.errMu.Unlock()
	if len(g.errs) > 0 {
		return g.errs[0]
	}
	return nil
}

// runPart runs one partition's events before win. A Stop inside it is
// remembered (l.stopped()) and takes effect at the barrier: the partition
// finishes its window like the others.
func (g *Group) runPart(l *Loop, win Time) {
	stop := false
	for len(l.heap) > 0 && l.heap[0].at < win {
		l.RunUntil(win - 1)
		stop = stop || l.stopped()
	}
	if stop {
		l.Stop()
	}
}

// setNow moves every clock to t (never backwards, never past an armed
// event: all are at or after t at a barrier).
func (g *Group) setNow(t Time) {
	for _, l := range g.parts {
		l.now = max(l.now, t)
	}
	g.global.now = max(g.global.now, t)
}
