// Package live runs a lab in real time: the lab's event loop paced to the
// wall clock, one network namespace per host with a TUN device that is the
// host NIC's netdev, and a control server on a Unix socket that the mrlab CLI
// talks to (status, faults, perf runs, teardown).
//
// The fabric and NICs run unchanged from sim mode, inside one sim.Loop owned
// by one goroutine (the Pacer). Everything that touches the OS — reading and
// writing TUN devices, the control server, timers — happens on other
// goroutines that talk to the loop goroutine through channels, so the code
// under transport/, fabric/ and softnic/ stays single-threaded and clock-free.
package live

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	// Spin is the horizon below which the pacer waits for the next event by
	// yielding instead of sleeping: the OS wakes a sleeping thread tens of
	// microseconds late, which would add that much to every hop. Default
	// 50us; negative disables spinning (less CPU, more lag).
	Spin time.Duration
	// WarnEvery is the period of the "cannot keep real time" check. Default 1s.
	WarnEvery time.Duration
	// Warn receives that warning (a period with at least 1% of its events
	// late, or one late by over ten times LagThreshold); nil discards it.
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

	posts  chan func(now sim.Time)
	input  chan inbound
	poller Poller
	wake   chan struct{}
	tfd    int
	tfile  *os.File

	stopped atomic.Bool
	done    chan struct{}

	// Loop-goroutine state.
	lag      LagStats
	curLag   time.Duration // lateness of the event running now
	winLate  uint64        // late events in the current warning window
	winRun   uint64        // events run in the current warning window
	winMax   time.Duration
	winStart time.Duration

	// published is a copy of lag the loop refreshes for other goroutines.
	mu        sync.Mutex
	published LagStats
}

// inbound is one packet a reader goroutine read, waiting in its slot.
type inbound struct {
	in   *Input
	slot int32
	n    int32
}

// NewPacer returns a pacer for loop. pool is the loop's packet pool (packets
// from inputs are copied into it on the loop goroutine).
func NewPacer(loop *sim.Loop, pool *packet.Pool, cfg PacerConfig) (*Pacer, error) {
	if cfg.LagThreshold <= 0 {
		cfg.LagThreshold = time.Millisecond
	}
	if cfg.Spin == 0 {
		cfg.Spin = 50 * time.Microsecond
	}
	if cfg.WarnEvery <= 0 {
		cfg.WarnEvery = time.Second
	}
	// A timerfd wakes the poller at the armed time with microsecond
	// precision; Go's own timers round sub-millisecond sleeps up to about a
	// millisecond (the netpoller's epoll timeout is in ms).
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("creating the pacer's timerfd: %w", err)
	}
	p := &Pacer{
		cfg:   cfg,
		loop:  loop,
		pool:  pool,
		posts: make(chan func(sim.Time), 64),
		input: make(chan inbound, 1024),
		wake:  make(chan struct{}, 1),
		tfd:   fd,
		tfile: os.NewFile(uintptr(fd), "pacer-timerfd"),
		done:  make(chan struct{}),
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

// CurrentLag returns how late the running event is. Call it only on the loop
// goroutine (host delivery uses it to count late packets).
func (p *Pacer) CurrentLag() time.Duration { return p.curLag }

// CountLatePacket records a packet delivered late. Loop goroutine only.
func (p *Pacer) CountLatePacket() { p.lag.PacketsLate++ }

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
	defer func() {
		p.stopped.Store(true)
		p.tfile.Close()
		p.publish()
		close(p.done)
	}()
	p.start = time.Now()
	// One goroutine turns timerfd expiries into wakes. It ends when the
	// file is closed.
	go func() {
		var b [8]byte
		for {
			if _, err := p.tfile.Read(b[:]); err != nil {
				return
			}
			select {
			case p.wake <- struct{}{}:
			default:
			}
		}
	}()
	var lastPublish sim.Time
	armed := sim.Never
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		now := p.runDue()
		p.drain()
		if p.poller != nil {
			p.poller.Poll(p.loop.Now())
		}
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
		if p.cfg.Spin > 0 && wait < p.cfg.Spin {
			runtime.Gosched()
			continue
		}
		if p.poller != nil && p.poller.Sleeping(now, next) {
			continue
		}
		if next != armed {
			p.arm(wait, next)
			armed = next
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case fn := <-p.posts:
			p.sync()
			fn(p.loop.Now())
		case in := <-p.input:
			p.sync()
			p.inject(in)
		case <-p.wake:
			armed = sim.Never
		}
	}
}

// arm sets the timerfd to fire after wait (0 disarms, so never pass 0).
func (p *Pacer) arm(wait time.Duration, next sim.Time) {
	if next == sim.Never {
		wait = 0 // disarm
	}
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(wait))}
	// Settime fails only on a bad descriptor or value: nothing to recover.
	_ = unix.TimerfdSettime(p.tfd, 0, &its, nil)
}

// runDue runs every event due by the wall clock, counting lateness, and
// returns the wall time it last read.
func (p *Pacer) runDue() sim.Time {
	now := p.elapsed()
	thr := sim.Time(p.cfg.LagThreshold)
	ran := 0
	for {
		next := p.loop.Next()
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
		if lag > time.Duration(thr) {
			p.lag.EventsLate++
			p.winLate++
		}
		p.lag.MaxLag = max(p.lag.MaxLag, lag)
		p.winMax = max(p.winMax, lag)
		p.lag.Events++
		p.winRun++
		p.loop.Step()
		ran++
		// Re-read the clock after every event: one slow event makes the
		// ones queued behind it late, and lateness measured against a
		// stale clock would hide exactly that.
		now = p.elapsed()
		if ran&63 == 0 {
			// A long run of events does not starve inputs, posts and
			// the poller's clients.
			p.drain()
			if p.poller != nil {
				p.poller.Poll(p.loop.Now())
			}
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
		default:
			return
		}
	}
}

// inject copies an input packet into the loop's pool, returns the slot to
// its reader and hands the packet to the input's sink.
func (p *Pacer) inject(in inbound) {
	src := in.in.slots[in.slot][:in.n]
	b := p.pool.Get(len(src))
	b.SetLen(copy(b.Tail()[:len(src)], src))
	in.in.free <- in.slot // cannot block: free has room for every slot
	in.in.sink(p.loop.Now(), b)
}

// checkWarn emits the "cannot keep real time" warning when the last window
// fell behind in a sustained way: at least 1% of its events late, or one
// event late by more than ten times the threshold. A stray late event (the
// OS preempted the loop once) is counted in the stats but not warned about.
func (p *Pacer) checkWarn(now sim.Time) {
	if time.Duration(now)-p.winStart < p.cfg.WarnEvery {
		return
	}
	if p.winLate > 0 && (p.winLate*100 >= p.winRun || p.winMax > 10*p.cfg.LagThreshold) {
		p.lag.Warnings++
		if p.cfg.Warn != nil {
			p.cfg.Warn(fmt.Sprintf("lab cannot keep real time: %d events ran more than %v late in the last %v (worst %v); delays and rates are distorted",
				p.winLate, p.cfg.LagThreshold, p.cfg.WarnEvery, p.winMax.Round(time.Microsecond)))
		}
	}
	p.winLate, p.winRun, p.winMax, p.winStart = 0, 0, 0, time.Duration(now)
}

func (p *Pacer) publish() {
	p.mu.Lock()
	p.published = p.lag
	p.mu.Unlock()
}

// Input is a source of packets from outside the loop (a TUN reader). Its
// goroutine reads into fixed slots, so reading allocates nothing; the loop
// copies each packet into its own pool and returns the slot.
type Input struct {
	p     *Pacer
	slots [][]byte
	free  chan int32
	sink  func(now sim.Time, b *packet.Buffer)
}

// NewInput returns an input with n slots of size bytes. sink runs on the
// loop goroutine for every packet and takes ownership of it.
func (p *Pacer) NewInput(n, size int, sink func(now sim.Time, b *packet.Buffer)) *Input {
	in := &Input{p: p, slots: make([][]byte, n), free: make(chan int32, n), sink: sink}
	for i := range in.slots {
		in.slots[i] = make([]byte, size)
		in.free <- int32(i)
	}
	return in
}

// ReadFrom runs read into free slots and pushes each packet to the loop until
// read fails or the pacer stops; it returns read's error (nil when the
// pacer stopped). read must fill b and return the packet length; a length
// of 0 is skipped. Run it on its own goroutine.
func (in *Input) ReadFrom(read func(b []byte) (int, error)) error {
	for {
		var slot int32
		select {
		case slot = <-in.free:
		case <-in.p.done:
			return nil
		}
		n, err := read(in.slots[slot])
		if err != nil {
			in.free <- slot
			return err
		}
		if n <= 0 {
			in.free <- slot
			continue
		}
		select {
		case in.p.input <- inbound{in: in, slot: slot, n: int32(n)}:
		case <-in.p.done:
			return nil
		}
	}
}
