package live

import (
	"fmt"
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
	armed        sim.Time // what tfd is armed for (sim.Never: disarmed)
	events       [2]unix.EpollEvent
}

func newWaiter() (*waiter, error) {
	w := &waiter{ep: -1, tfd: -1, efd: -1, armed: sim.Never}
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
		n, err := unix.EpollWait(w.ep, w.events[:], -1)
		if err == unix.EINTR {
			continue
		}
		p.sleeping.Store(false)
		var buf [8]byte
		for i := 0; i < n; i++ {
			fd := int(w.events[i].Fd)
			unix.Read(fd, buf[:])
			if fd == w.tfd {
				w.armed = sim.Never
			}
		}
		return
	}
}
