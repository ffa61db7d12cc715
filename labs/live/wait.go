package live

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/sim"
)

// The loop's waiting. The loop goroutine keeps its OS thread and, where
// the system allows it (root), runs it at a priority that wakes it on time
// (sched.go): a thread of normal priority that sleeps is woken
// milliseconds late on a busy machine, which is every lab's lateness. It
// sleeps in epoll_wait on two descriptors of its own, a timerfd armed for
// the next event (microsecond precision; Go's timers round sub-millisecond
// sleeps up to a millisecond) and an eventfd that posts and inputs write
// when they find it asleep, so a wake-up goes straight from the kernel to
// this thread, never through a goroutine of normal priority.

// waiter is the loop thread's sleeping machinery.
type waiter struct {
	ep, tfd, efd int
	armed        sim.Time          // what tfd is armed for (sim.Never: disarmed)
	events       []unix.EpollEvent // tfd, efd and the direct inputs' devices
}

func newWaiter() (*waiter, error) {
	w := &waiter{ep: -1, tfd: -1, efd: -1, armed: sim.Never, events: make([]unix.EpollEvent, 2)}
	var err error
	if w.tfd, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("creating the pacer's timerfd: %w", err)
	}
	if w.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		w.close()
		return nil, fmt.Errorf("creating the pacer's eventfd: %w", err)
	}
	if w.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		w.close()
		return nil, fmt.Errorf("creating the pacer's epoll: %w", err)
	}
	for _, fd := range []int{w.tfd, w.efd} {
		if err := unix.EpollCtl(w.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			w.close()
			return nil, fmt.Errorf("pacer's epoll: %w", err)
		}
	}
	return w, nil
}

func (w *waiter) close() {
	for _, fd := range []int{w.ep, w.tfd, w.efd} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// kick wakes the loop if it sleeps. Any goroutine.
func (p *Pacer) kick() {
	if p.sleeping.CompareAndSwap(true, false) {
		var one = [8]byte{1}
		unix.Write(p.w.efd, one[:]) // EAGAIN: a wake is pending already
	}
}

// sleep waits until the wall clock reaches next (sim.Never: until kicked)
// or a post or input arrives. Loop goroutine only.
func (p *Pacer) sleep(next sim.Time, wait time.Duration) {
	w := p.w
	var cpu0 time.Duration
	timed := p.spin.timeSleep()
	if timed {
		cpu0 = threadCPU()
	}
	if next != w.armed {
		its := unix.ItimerSpec{}
		if next != sim.Never {
			its.Value = unix.NsecToTimespec(max(int64(wait), 1))
		}
		// Settime fails only on a bad descriptor or value: nothing to
		// recover; the eventfd still wakes the loop.
		_ = unix.TimerfdSettime(w.tfd, 0, &its, nil)
		w.armed = next
	}
	p.sleeping.Store(true)
	if len(p.posts) > 0 || len(p.input) > 0 || p.stopping.Load() {
		p.sleeping.Store(false)
		return
	}
	for {
		n, err := unix.EpollWait(w.ep, w.events, -1)
		if err == unix.EINTR {
			continue
		}
		p.sleeping.Store(false)
		// The wait watched every device: the look put off is done.
		p.direct.deferred = false
		var buf [8]byte
		for i := 0; i < n; i++ {
			fd := int(w.events[i].Fd)
			if fd < 0 {
				// A direct input's device (direct.go): the loop reads it
				// next, knowing it is readable.
				p.direct.woken = append(p.direct.woken, -1-fd)
				continue
			}
			unix.Read(fd, buf[:])
			if fd == w.tfd {
				if next != sim.Never {
					p.spin.woke(p.waitFor, time.Duration(p.elapsed()-next))
				}
				w.armed = sim.Never
			}
		}
		if timed {
			// What arming, sleeping, waking and reading the wake-up
			// cost this thread.
			p.spin.slept(threadCPU() - cpu0)
		}
		return
	}
}

// threadCPU is the calling thread's CPU time, user and system.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// holdPMu serializes pacers' changes to GOMAXPROCS.
var holdPMu sync.Mutex

// holdP adds a P to the runtime for the calling pacer's loop thread and
// returns the function that takes it away again. The loop's goroutine
// keeps its thread, and a thread back from epoll_wait must get a P before
// it runs: with as many Ps as CPUs, the TUN readers and writers (and the
// control server, and the verbs endpoint) hold them, and a loop woken on
// time waits for one of them to give one up. With one P more the
// runtime's Ps outnumber the CPUs, so the woken loop finds one idle.
// Measured with BenchmarkLabPacketRate at load 35, same run: 0.87-1.04
// Mpps (256-byte packets, 10 Gbit/s) and 434-507 kpps (1500 bytes,
// 100 Gbit/s) without, 1.17-1.28 Mpps and 789-817 kpps with; ping across
// the default lab's spines the same (277-320 against 313-318 us).
func holdP() (release func()) {
	holdPMu.Lock()
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1)
	holdPMu.Unlock()
	return func() {
		holdPMu.Lock()
		runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0)-1, 1))
		holdPMu.Unlock()
	}
}
