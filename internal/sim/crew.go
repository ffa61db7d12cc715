package sim

import (
	"runtime"
	"sync/atomic"
)

// crew runs a group's partitions 1..n-1 on goroutines that live for one
// Run, handed each window through atomics: a window's start and end cost a
// few hundred nanoseconds when the goroutines spin, instead of a goroutine
// start and a WaitGroup wake-up (microseconds) per window. A goroutine
// that waits longer than spinLimit rounds sleeps on its channel and is
// woken by the next window, so an idle or oversubscribed machine (more
// partitions than cores) is not kept busy by spinning.
//
// Every hand-over is an atomic operation (sequentially consistent in Go's
// memory model), so what a window's goroutine wrote to its loop is visible
// to the barrier that follows, and what the barrier wrote to the next
// window: the race detector sees the same edges.
type crew struct {
	g      *Group
	gen    atomic.Uint64 // window number; the workers run window gen
	win    atomic.Int64  // the running window's end
	run    []atomic.Bool // run[i]: partition i has events in this window
	left   atomic.Int64  // workers still running this window
	quit   atomic.Bool
	sleepy []sleeper // by partition (0: the coordinator, waiting for left)
}

// sleeper is a goroutine that may block on wake after spinning.
type sleeper struct {
	asleep atomic.Bool
	wake   chan struct{}
}

// spinLimit is how many rounds a waiting goroutine polls (yielding to the
// scheduler after spinFast) before it sleeps.
const (
	spinFast  = 64
	spinLimit = 4096
)

func newCrew(g *Group) *crew {
	c := &crew{g: g, run: make([]atomic.Bool, len(g.parts)), sleepy: make([]sleeper, len(g.parts))}
	for i := range c.sleepy {
		c.sleepy[i].wake = make(chan struct{}, 1)
	}
	for i := 1; i < len(g.parts); i++ {
		go c.work(i)
	}
	return c
}

// wait returns when ready() holds, spinning then sleeping as s. A wake-up
// is only a hint: a poke meant for an earlier round can arrive late (its
// poker was descheduled between changing the condition and poking), so
// the condition is checked again after every one.
func (s *sleeper) wait(ready func() bool) {
	for {
		for i := 0; i < spinLimit; i++ {
			if ready() {
				return
			}
			if i >= spinFast {
				runtime.Gosched()
			}
		}
		s.asleep.Store(true)
		if ready() {
			if !s.asleep.CompareAndSwap(true, false) {
				<-s.wake // a poker saw us asleep and sends: take its token
			}
			return
		}
		<-s.wake
	}
}

// poke wakes s if it sleeps.
func (s *sleeper) poke() {
	if s.asleep.CompareAndSwap(true, false) {
		s.wake <- struct{}{}
	}
}

// work is partition i's goroutine.
func (c *crew) work(i int) {
	var last uint64
	s := &c.sleepy[i]
	for {
		s.wait(func() bool { return c.gen.Load() != last })
		last = c.gen.Load()
		if c.quit.Load() {
			return
		}
		if c.run[i].Load() {
			c.g.runPart(c.g.parts[i], Time(c.win.Load()))
		}
		if c.left.Add(-1) == 0 {
			c.sleepy[0].poke()
		}
	}
}

// window runs every partition's events before win: partition 0 on the
// calling goroutine, the others on theirs when they have events in it (a
// window with work in one partition only runs it here, waking nobody).
func (c *crew) window(win Time) {
	busy, only := 0, 0
	for i, l := range c.g.parts {
		has := len(l.heap) > 0 && l.heap[0].at < win
		c.run[i].Store(has)
		if has {
			busy++
			only = i
		}
	}
	if busy <= 1 {
		if busy == 1 {
			c.g.runPart(c.g.parts[only], win)
		}
		return
	}
	c.win.Store(int64(win))
	c.left.Store(int64(len(c.g.parts) - 1))
	c.gen.Add(1)
	for i := 1; i < len(c.sleepy); i++ {
		c.sleepy[i].poke()
	}
	if c.run[0].Load() {
		c.g.runPart(c.g.parts[0], win)
	}
	c.sleepy[0].wait(func() bool { return c.left.Load() == 0 })
}

// stop ends the workers (at the end of Run).
func (c *crew) stop() {
	c.quit.Store(true)
	c.gen.Add(1)
	for i := 1; i < len(c.sleepy); i++ {
		c.sleepy[i].poke()
	}
}
