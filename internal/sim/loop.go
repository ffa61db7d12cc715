package sim

// Func is a timer callback. arg is the value given to Timer.Init; passing a
// pointer there lets one method value serve many timers without allocating.
type Func func(now Time, arg any)

// Timer is an event that a Loop fires once per arming. Its zero value is an
// unarmed timer with no callback; call Init before arming it. Timers are meant
// to be embedded in the structs that own them (a link, a connection, a packet
// buffer) so that arming one never allocates.
type Timer struct {
	at  Time
	seq uint64
	idx int // position in the heap plus one; 0 when not armed
	fn  Func
	arg any
}

// Init sets the callback and its argument.
func (t *Timer) Init(fn Func, arg any) { t.fn, t.arg = fn, arg }

// Armed reports whether t is scheduled.
func (t *Timer) Armed() bool { return t.idx != 0 }

// When returns the time t is armed for, or Never.
func (t *Timer) When() Time {
	if t.idx == 0 {
		return Never
	}
	return t.at
}

// Scheduler is what components see of the engine: the current time and
// timers. Both the virtual Loop and the live runtime's paced loop provide it.
type Scheduler interface {
	Now() Time
	Arm(t *Timer, at Time)
	Disarm(t *Timer)
}

// Loop is a discrete-event scheduler with a virtual clock. It is not safe for
// concurrent use: one goroutine owns it (that is the point).
type Loop struct {
	now     Time
	seq     uint64
	heap    []*Timer
	fired   uint64
	stopped bool
}

var _ Scheduler = (*Loop)(nil)

// NewLoop returns a loop at time 0.
func NewLoop() *Loop { return &Loop{heap: make([]*Timer, 0, 1024)} }

// Now returns the current virtual time.
func (l *Loop) Now() Time { return l.now }

// Fired returns the number of events run so far.
func (l *Loop) Fired() uint64 { return l.fired }

// Pending returns the number of armed timers.
func (l *Loop) Pending() int { return len(l.heap) }

// Arm schedules t at time at (clamped to now), replacing any earlier arming.
// Timers armed for the same time fire in the order they were armed.
func (l *Loop) Arm(t *Timer, at Time) {
	if at < l.now {
		at = l.now
	}
	l.seq++
	if t.idx != 0 {
		t.at, t.seq = at, l.seq
		i := t.idx - 1
		if !l.up(i) {
			l.down(i)
		}
		return
	}
	t.at, t.seq = at, l.seq
	l.heap = append(l.heap, t)
	t.idx = len(l.heap)
	l.up(len(l.heap) - 1)
}

// ArmAfter schedules t at now+d.
func (l *Loop) ArmAfter(t *Timer, d Time) { l.Arm(t, l.now+d) }

// Disarm cancels t if it is armed.
func (l *Loop) Disarm(t *Timer) {
	if t.idx == 0 {
		return
	}
	i := t.idx - 1
	last := len(l.heap) - 1
	if i != last {
		l.swap(i, last)
	}
	l.heap[last] = nil
	l.heap = l.heap[:last]
	t.idx = 0
	if i != last {
		if !l.up(i) {
			l.down(i)
		}
	}
}

// At runs fn at time at. It allocates a Timer, so it is for set-up and
// scripted events (a fault timeline), not for per-packet work.
func (l *Loop) At(at Time, fn func(now Time)) *Timer {
	t := &Timer{}
	t.Init(func(now Time, _ any) { fn(now) }, nil)
	l.Arm(t, at)
	return t
}

// Next returns the time of the earliest armed timer, or Never.
func (l *Loop) Next() Time {
	if len(l.heap) == 0 {
		return Never
	}
	return l.heap[0].at
}

// Step runs the earliest event, advancing the clock to its time. It returns
// false when nothing is armed.
func (l *Loop) Step() bool {
	if len(l.heap) == 0 {
		return false
	}
	t := l.heap[0]
	l.Disarm(t)
	l.now = t.at
	l.fired++
	t.fn(l.now, t.arg)
	return true
}

// RunUntil runs every event due at or before end, then leaves the clock at
// end. Stop ends it early.
func (l *Loop) RunUntil(end Time) {
	l.stopped = false
	for !l.stopped && len(l.heap) > 0 && l.heap[0].at <= end {
		l.Step()
	}
	if !l.stopped && end > l.now && end != Never {
		l.now = end
	}
}

// Run runs events until none is left or Stop is called.
func (l *Loop) Run() { l.RunUntil(Never) }

// Stop makes the current Run or RunUntil return after the running event.
func (l *Loop) Stop() { l.stopped = true }

// AdvanceTo moves the clock forward to t without running events. The live
// runtime uses it when wall time passes with nothing due. It never moves the
// clock past an armed timer or backwards.
func (l *Loop) AdvanceTo(t Time) {
	if n := l.Next(); t > n {
		t = n
	}
	if t > l.now {
		l.now = t
	}
}

func (l *Loop) less(i, j int) bool {
	a, b := l.heap[i], l.heap[j]
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

func (l *Loop) swap(i, j int) {
	h := l.heap
	h[i], h[j] = h[j], h[i]
	h[i].idx = i + 1
	h[j].idx = j + 1
}

func (l *Loop) up(i int) bool {
	moved := false
	for i > 0 {
		p := (i - 1) / 2
		if !l.less(i, p) {
			break
		}
		l.swap(i, p)
		i = p
		moved = true
	}
	return moved
}

func (l *Loop) down(i int) {
	n := len(l.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && l.less(r, c) {
			c = r
		}
		if !l.less(c, i) {
			return
		}
		l.swap(i, c)
		i = c
	}
}
