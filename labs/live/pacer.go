// Package live runs a lab in real time: the lab's event loop paced to the
// wall clock, one network namespace per host with a TUN device that is the
// host NIC's netdev, and a control server on a Unix socket that the mrlab CLI
// talks to (status, faults, perf runs, teardown).
//
// The fabric and NICs run unchanged from sim mode, inside one sim.Loop owned
// by one goroutine (the Pacer), so the code under transport/, fabric/ and
// softnic/ stays single-threaded and clock-free. The loop goroutine reads
// and writes the hosts' TUN devices itself (direct.go, device.go: a
// thread hand-off per batch cost more than the I/O), handing writes to a
// writer goroutine only while that one is busy; the control server and the
// verbs endpoint run on other goroutines that reach the loop through Post.
package live

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// ErrStopped is returned by Post and Do after the pacer has stopped.
var ErrStopped = errors.New("live: lab loop stopped")

// PacerConfig tunes a Pacer. The zero value is usable.
type PacerConfig struct {
	// LagThreshold is how late an event may run before it counts as late.
	// Default 1ms.
	LagThreshold time.Duration
	// Spin fixes the horizon below which the pacer waits for the next
	// event by watching the clock instead of sleeping; negative disables
	// spinning. Zero (the default) measures it: the loop arms its timer
	// that much before the next event and watches the clock for the
	// rest, the horizon being the 99th percentile of the timer's wake-up
	// latency in the last WarnEvery (for waits of the same class) less
	// the lateness an event may have (LagThreshold/20 with the kernel's
	// default real-time share), at most LagThreshold/4; when that
	// percentile is under the tolerance it arms the timer the
	// difference after the event instead (a batch); and it sleeps only
	// when the wait is longer than the horizon plus a sleep's measured
	// CPU cost (spin.go).
	// A loop under PolicyFIFO spins at most minSpin: it would stay busy
	// through busy periods, and the kernel throttles a real-time thread
	// that never sleeps (for 50ms of every second, by default).
	Spin time.Duration
	// Policy is the loop thread's scheduling (sched.go); "" means
	// PolicyDeadline.
	Policy Policy
	// NoRealtime keeps the loop's thread at normal priority: Policy
	// PolicyNormal, whatever Policy says.
	NoRealtime bool
	// WarnEvery is the period of the "cannot keep real time" check. Default 1s.
	WarnEvery time.Duration
	// Warn receives that warning (a period during which the loop fell
	// behind by more than MaxLagFraction of it); nil discards it.
	Warn func(msg string)
}

// LagStats says how well the loop keeps real time. A live lab that runs
// events late distorts delays and rates; these numbers say by how much.
type LagStats struct {
	Events      uint64        `json:"events"`       // events run
	EventsLate  uint64        `json:"events_late"`  // events run later than LagThreshold
	MaxLag      time.Duration `json:"max_lag_ns"`   // worst lateness seen
	PacketsLate uint64        `json:"packets_late"` // packets handed to a host kernel late
	Warnings    uint64        `json:"warnings"`     // periods that fell behind in a sustained way (see PacerConfig.Warn)
	Behind      time.Duration `json:"behind_ns"`    // how far the loop trails the wall clock now
	// Priority is the loop thread's scheduling policy in force and why
	// (sched.go): what was asked for unless the system refused it (then
	// lateness is likelier on a busy machine).
	Priority string `json:"priority,omitempty"`
	// Spin is the horizon in force for the waits the loop slept for most
	// often in the last window (spin.go keeps one per class of wait):
	// the loop wakes this long before an event and watches the clock
	// until it is due (PacerConfig.Spin).
	Spin time.Duration `json:"spin_ns"`
	// WakeLatency is the worst timer wake-up latency of the loop's
	// thread in the last complete window.
	WakeLatency time.Duration `json:"wake_latency_ns"`
	// WakeP99 is the 99th percentile of the wake-ups of Spin's class of
	// waits (1 µs buckets): the horizon is it less the events'
	// tolerance, the batch the tolerance less it (spin.go).
	WakeP99 time.Duration `json:"wake_p99_ns"`
	// SleepCost is what a sleep costs the loop's thread in CPU time
	// (measured, a moving average): it sleeps only through waits longer
	// than the horizon plus this.
	SleepCost time.Duration `json:"sleep_cost_ns"`
	// Batch is how long after its next event the sleeping loop's timer
	// is armed when its wake-ups are on time within the events'
	// tolerance: one wake-up runs every event due meanwhile (spin.go;
	// Spin's class of waits).
	Batch time.Duration `json:"batch_ns"`
	// Sleeps counts the loop's passes that ended asleep (epoll_wait),
	// Spins those that watched the clock for their next event instead.
	Sleeps uint64 `json:"sleeps"`
	Spins  uint64 `json:"spins"`
	// SpinTime is the wall time the loop spent watching the clock (with
	// the looks and polls made meanwhile).
	SpinTime time.Duration `json:"spin_time_ns"`
	// LoopCPU is the CPU time the loop's thread has used (user and
	// system), read every 10 ms.
	LoopCPU time.Duration `json:"loop_cpu_ns"`
	// LookRounds counts the rounds of reads of the hosts' kernels that
	// found packets (direct.go: one read per readable device a round).
	LookRounds uint64 `json:"look_rounds"`
	// LooksCut counts the looks that ended on their budget with devices
	// still readable: the loop read the kernels as fast as it could and
	// still left packets queued (their senders' mr0 rings fill next).
	LooksCut uint64 `json:"looks_cut"`
	// LoopWait is the loop thread's time on a CPU run queue (runnable,
	// not running) since Run, summed per window; negative when the
	// kernel does not say. LoopWaitWindow is the last complete window's;
	// StarvedWindows counts the windows, not late, in which runqueue.go's
	// rule says inputs may have waited longer than MaxLagFraction of the
	// window to enter the lab, which lateness does not count (logged
	// through Warn; not in Warnings, which count measured distortion).
	LoopWait       time.Duration `json:"loop_cpu_wait_ns"`
	LoopWaitWindow time.Duration `json:"loop_cpu_wait_window_ns"`
	StarvedWindows uint64        `json:"starved_windows"`
	// LoopWaitMax is the last complete window's largest run-queue wait
	// between two samples (every 10 ms of the loop's passes): no single
	// wait of the loop in it was longer.
	LoopWaitMax time.Duration `json:"loop_cpu_wait_max_ns"`
}

// Pacer owns a sim.Loop and runs it paced to the wall clock: virtual time is
// wall time since Start (monotonic). It runs due events, sleeps until the
// next one, and wakes early for closures posted with Post and packets pushed
// with an Input. Only the goroutine running Run touches the loop; everything
// else goes through Post.
type Pacer struct {
	cfg   PacerConfig
	loop  *sim.Loop
	pool  *packet.Pool
	start time.Time

	posts   chan func(now sim.Time)
	input   chan *inBatch
	started chan struct{} // closed once start is set
	w       *waiter
	poller  Poller
	direct  directInputs // inputs the loop reads itself (direct.go)

	sleeping atomic.Bool // the loop is (about to be) in epoll_wait
	stopping atomic.Bool // Run's context ended

	stopped atomic.Bool
	done    chan struct{}

	// Loop-goroutine state.
	injecting bool            // inject is running events up to a batch's read time
	watches   []*lagWatch     // open measurements' lateness watches
	flushes   []*kernelOutput // outputs holding a batch being filled
	lag       LagStats
	curLag    time.Duration // lateness of the event running now
	winLate   uint64        // late events in the current warning window
	winRun    uint64        // events run in the current warning window
	winMax    time.Duration
	winStart  time.Duration
	inForce   Policy        // the loop thread's policy, once Run applied it
	winStep   time.Duration // the window's longest single step of the loop
	winWhat   string        // what that step was
	spin      spinner
	waitFor   time.Duration // the wait to its next event the loop sleeps for (spin.go's class)
	rq        runQueue      // the loop thread's run-queue wait (runqueue.go)
	winRQ     time.Duration // its reading at the window's start (-1: unknown)
	lastRQ    time.Duration // its last sample (-1: unknown)
	winRQMax  time.Duration // the window's largest wait between samples
	winCut    uint64        // LooksCut at the window's start

	// published is a copy of lag the loop refreshes for other goroutines.
	mu        sync.Mutex
	published LagStats
}

// NewPacer returns a pacer for loop. pool is the loop's packet pool (packets
// from inputs are copied into it on the loop goroutine).
func NewPacer(loop *sim.Loop, pool *packet.Pool, cfg PacerConfig) (*Pacer, error) {
	if cfg.LagThreshold <= 0 {
		cfg.LagThreshold = time.Millisecond
	}
	if cfg.WarnEvery <= 0 {
		cfg.WarnEvery = time.Second
	}
	pol, err := ParsePolicy(string(cfg.Policy))
	if err != nil {
		return nil, err
	}
	if cfg.NoRealtime {
		pol = PolicyNormal
	}
	cfg.Policy = pol
	w, err := newWaiter()
	if err != nil {
		return nil, err
	}
	p := &Pacer{
		cfg:     cfg,
		loop:    loop,
		pool:    pool,
		posts:   make(chan func(sim.Time), 64),
		input:   make(chan *inBatch, 256),
		started: make(chan struct{}),
		w:       w,
		done:    make(chan struct{}),
		direct:  directInputs{ep: -1},
		rq:      runQueue{fd: -1},
		winRQ:   -1,
		lastRQ:  -1,
	}
	return p, nil
}

// Poller is work the pacer looks for between events: shared-memory queues
// of programs outside the lab (the verbs endpoint's clients), served
// without a system call per request. All methods run on the loop
// goroutine.
type Poller interface {
	// Poll serves what is waiting; it reports whether there was any.
	Poll(now sim.Time) bool
	// Sleeping runs before the pacer blocks until its next event at
	// until (sim.Never: none): the poller may ask its clients to wake the
	// pacer (through Post) and looks once more; true means work arrived
	// and the pacer does not block.
	Sleeping(now, until sim.Time) bool
}

// SetPoller sets the pacer's poller. Call it before Run.
func (p *Pacer) SetPoller(pl Poller) { p.poller = pl }

// Now returns the loop's time. Call it only on the loop goroutine.
func (p *Pacer) Now() sim.Time { return p.loop.Now() }

// Loop returns the loop the pacer drives. Touch it only from closures run
// by the pacer (Post, Do) or before Run starts.
func (p *Pacer) Loop() *sim.Loop { return p.loop }

// Pool returns the loop goroutine's packet pool.
func (p *Pacer) Pool() *packet.Pool { return p.pool }

// Post queues fn to run on the loop goroutine between events, with the
// loop's current time. It blocks while the queue is full and fails once the
// pacer has stopped.
func (p *Pacer) Post(fn func(now sim.Time)) error {
	if p.stopped.Load() {
		return ErrStopped
	}
	select {
	case p.posts <- fn:
		p.kick()
		return nil
	case <-p.done:
		return ErrStopped
	}
}

// Do runs fn on the loop goroutine and waits for it to return.
func (p *Pacer) Do(ctx context.Context, fn func(now sim.Time)) error {
	ran := make(chan struct{})
	if err := p.Post(func(now sim.Time) { fn(now); close(ran) }); err != nil {
		return err
	}
	select {
	case <-ran:
		return nil
	case <-p.done:
		// The loop may have run fn just before stopping.
		select {
		case <-ran:
			return nil
		default:
			return ErrStopped
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Lag returns the latest lag statistics. Safe from any goroutine.
func (p *Pacer) Lag() LagStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.published
}

// currentLag returns how late the running event is. Call it only on the loop
// goroutine (host delivery uses it to count late packets).
func (p *Pacer) currentLag() time.Duration { return p.curLag }

// countLatePacket records a packet delivered late. Loop goroutine only.
func (p *Pacer) countLatePacket() { p.lag.PacketsLate++ }

// LagThreshold returns the configured threshold.
func (p *Pacer) LagThreshold() time.Duration { return p.cfg.LagThreshold }

// Done is closed when Run has returned.
func (p *Pacer) Done() <-chan struct{} { return p.done }

// elapsed returns wall time since Start as loop time.
func (p *Pacer) elapsed() sim.Time { return sim.Time(time.Since(p.start)) }

// Run paces the loop until ctx is cancelled. It must be called once; it
// returns ctx's error. The loop's virtual clock must be at 0 (a fresh loop):
// virtual time is wall time since Run started.
func (p *Pacer) Run(ctx context.Context) error {
	// The loop keeps this thread (never unlocked: the runtime retires it
	// with the goroutine, its scheduling policy and all).
	runtime.LockOSThread()
	p.inForce, p.lag.Priority = applyPolicy(p.cfg.Policy, p.cfg.LagThreshold)
	// Give the thread back its default scheduling before the goroutine
	// ends: a locked thread on which a goroutine ends is terminated,
	// except the process's main thread, which the runtime parks for
	// good, and a parked deadline thread keeps its share of the CPUs'
	// real-time bandwidth until the process exits (every later deadline
	// lab in the process was refused).
	defer resetPolicy()
	p.openRQ()
	p.spin = newSpinner(p.cfg.Spin, p.inForce, p.cfg.LagThreshold, eventTolerance(p.cfg.LagThreshold))
	p.lag.Spin, _, _ = p.spin.report()
	defer func() {
		p.stopped.Store(true)
		p.direct.close()
		p.w.close()
		p.rq.close()
		p.rq = runQueue{fd: -1}
		p.publish()
		close(p.done)
	}()
	// Deferred after the function that closes done, so it runs before:
	// a stopped pacer (Done closed) has given its P back.
	defer holdP()()
	p.start = time.Now()
	close(p.started)
	stop := context.AfterFunc(ctx, func() {
		p.stopping.Store(true)
		p.kick()
	})
	defer stop()
	var lastPublish sim.Time
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		now := p.runDue()
		t := p.elapsed()
		p.flush() // before the look: an answer made inside the write is read now (writeBeforeLook)
		p.drain()
		p.look()
		t = p.noteStep(t, "posted work and kernel input")
		if p.poller != nil {
			p.poller.Poll(p.loop.Now())
			t = p.noteStep(t, "serving verbs clients' rings")
		}
		p.flush()
		p.noteStep(t, "writing to hosts' kernels")
		if now-lastPublish > sim.Millisecond*10 {
			p.checkWarn(now)
			p.publish()
			lastPublish = now
		}
		next := p.loop.Next()
		now = p.elapsed()
		if next <= now {
			continue
		}
		wait := time.Duration(next - now)
		if !p.spin.sleeps(wait) {
			p.lag.Spins++
			spun := now
			// Closer than a sleep's wake-up: watch the clock, the
			// queues and the poller's clients instead.
			for now := p.elapsed(); now < next && len(p.posts) == 0 && len(p.input) == 0 && !p.stopping.Load(); now = p.elapsed() {
				if p.direct.spinLook(time.Duration(next-now)) && p.pollInputs() {
					break // a kernel sent: its packets may be due sooner
				}
				if p.poller == nil {
					continue
				}
				p.sync() // what a client posts now enters the lab now
				if p.poller.Poll(p.loop.Now()) {
					break // served a client: its work may be due sooner
				}
			}
			p.lag.SpinTime += time.Duration(p.elapsed() - spun)
			continue
		}
		if p.poller != nil && p.poller.Sleeping(now, next) {
			continue
		}
		// Wake a horizon early and watch the clock for the rest (a
		// timer wakes the thread some microseconds late, and on a busy
		// machine the thread must also win its CPU back), or, when
		// wake-ups are on time within the events' tolerance, a batch
		// late, running every event due by then at once (spin.go).
		p.waitFor = wait
		if next != sim.Never {
			off := p.spin.offset(wait)
			next, wait = next+sim.Time(off), wait+off
		}
		p.lag.Sleeps++
		p.sleep(next, wait)
	}
}

// runDue runs every event due by the wall clock, counting lateness, and
// returns the wall time it last read.
func (p *Pacer) runDue() sim.Time { return p.runUntil(sim.Never) }

// runUntil runs every event due by the wall clock and not after limit,
// counting lateness, and returns the wall time it last read.
func (p *Pacer) runUntil(limit sim.Time) sim.Time {
	now := p.elapsed()
	thr := sim.Time(p.cfg.LagThreshold)
	ran := 0
	for {
		next := p.loop.Next()
		if next > limit {
			break
		}
		if next > now {
			if ran == 0 {
				break
			}
			// Events may have become due while the batch ran.
			now, ran = p.elapsed(), 0
			if next > now {
				break
			}
		}
		lag := time.Duration(now - next)
		p.curLag = lag
		p.noteLag(lag, time.Duration(thr))
		p.lag.Events++
		p.winRun++
		p.loop.Step()
		ran++
		// Re-read the clock after every event: one slow event makes the
		// ones queued behind it late, and lateness measured against a
		// stale clock would hide exactly that.
		before := now
		now = p.elapsed()
		if d := time.Duration(now - before); d > p.winStep {
			p.winStep, p.winWhat = d, "one event"
		}
		if ran&63 == 0 {
			// A long run of events does not starve inputs, posts and
			// the poller's clients. Inputs and posts wait while a
			// batch's catch-up runs (inject would nest); polling
			// injects nothing, so clients are served then too.
			if !p.injecting {
				p.drain()
				p.pollInputs()
			}
			if p.poller != nil {
				p.poller.Poll(p.loop.Now())
			}
			p.flush()
		}
	}
	p.curLag = 0
	if next := p.loop.Next(); next <= now {
		p.lag.Behind = time.Duration(now - next)
	} else {
		p.lag.Behind = 0
	}
	return now
}

// noteStep records a step of the loop that began at t (wall time since
// start) as the window's longest if it is, and returns the time now.
// Loop goroutine only.
func (p *Pacer) noteStep(t sim.Time, what string) sim.Time {
	now := p.elapsed()
	if d := time.Duration(now - t); d > p.winStep {
		p.winStep, p.winWhat = d, what
	}
	return now
}

// flush hands every output's partly filled batch to its writer. Loop
// goroutine only.
//
// writeBeforeLook: each pass of Run writes what its due events handed to
// kernels before it looks at its devices. A TUN write runs the kernel's
// receive path, so a kernel that answers at once (an echo reply, an ACK)
// has its answer queued before the write returns, and the look just
// after reads it; written after the look, it waited for a sleep's
// epoll_wait and another pass (two sleeps a ping instead of one:
// TestLoopReadsImmediateAnswerInSamePass, BenchmarkPingStages' dlv-back).
func (p *Pacer) flush() {
	for _, o := range p.flushes {
		o.flush()
		o.dirty = false
	}
	p.flushes = p.flushes[:0]
}

// sync moves the loop's clock up to the wall clock before outside input is
// handled, so input is stamped with the time it arrived (never past a due
// event: AdvanceTo stops at the next armed timer).
func (p *Pacer) sync() { p.loop.AdvanceTo(p.elapsed()) }

// drain handles queued posts and inputs without blocking, a bounded number
// so events are not starved either.
func (p *Pacer) drain() {
	p.sync()
	for i := 0; i < 256; i++ {
		select {
		case fn := <-p.posts:
			fn(p.loop.Now())
		case in := <-p.input:
			p.inject(in)
			in.in.free <- in // cannot block: free has room for every batch
		default:
			return
		}
	}
}

// inject hands a batch of input packets to their sink, each copied into
// the loop's pool. The packets enter
// the lab at the time they were read, not when the loop gets to them: if
// the loop is behind, it first runs the events due before that time, so a
// loop that fell behind does not turn evenly spaced packets into a burst.
func (p *Pacer) inject(b *inBatch) {
	if b.at > p.loop.Now() {
		p.injecting = true
		p.runUntil(b.at)
		p.injecting = false
		p.loop.AdvanceTo(b.at)
	}
	now := p.loop.Now()
	for i := 0; i < b.n; i++ {
		src := b.bufs[i][b.in.offset : b.in.offset+b.sizes[i]]
		pb := p.pool.Get(len(src))
		pb.SetLen(copy(pb.Tail()[:len(src)], src))
		b.in.sink(now, pb)
	}
	b.n = 0
}

// publish copies the loop's figures for other goroutines. Loop goroutine
// only (it reads the loop thread's CPU time).
func (p *Pacer) publish() {
	p.sampleRQ()
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) == nil {
		p.lag.LoopCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	p.mu.Lock()
	p.published = p.lag
	p.mu.Unlock()
}

// noteLag counts an event lag late against the wall clock in the lab's
// figures and perf's timing watches: late beyond thr. Loop goroutine only.
func (p *Pacer) noteLag(lag, thr time.Duration) {
	late := lag > thr
	if late {
		p.lag.EventsLate++
		p.winLate++
	}
	for _, w := range p.watches {
		w.observe(lag, late)
	}
	p.lag.MaxLag = max(p.lag.MaxLag, lag)
	p.winMax = max(p.winMax, lag)
}
