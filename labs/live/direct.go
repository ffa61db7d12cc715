package live

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Direct reads: the loop reads a host's kernel itself. A reader goroutine
// blocked in Read is woken through the Go runtime's poller, then wakes the
// loop (an eventfd write): two thread wake-ups on every packet's path from
// a quiet host, and on this project's 2-core VM each costs more CPU than
// the read and tens of microseconds of a ping's round trip. A device that
// can say when a Read would not block (pollDevice; a TUN) is instead
// watched by the loop's own epoll: a sleeping loop is woken by the kernel
// straight from the host's send, and a running one looks (one epoll_wait
// with no timeout, for every such device at once) between events, as it
// looks at posts and the verbs rings.

// pollDevice is a Device whose readiness the loop can watch.
type pollDevice interface {
	Device
	// PollFD is a descriptor that polls readable while a Read would find
	// a packet at once. It stays valid until Close.
	PollFD() (int, error)
}

// directInputs is the loop's set of inputs it reads itself.
type directInputs struct {
	ep     int // epoll of the devices' descriptors; -1 when none
	ins    []*kernelInput
	events []unix.EpollEvent
	pfd    [1]unix.PollFd
}

// readDirect makes the loop read in from dev itself, if dev can be polled;
// it reports whether it does (otherwise run in.readFrom(dev)). Call it
// before Run.
func (p *Pacer) readDirect(in *kernelInput, dev Device) (bool, error) {
	pd, ok := dev.(pollDevice)
	if !ok {
		return false, nil
	}
	fd, err := pd.PollFD()
	if err != nil {
		return false, fmt.Errorf("polling a kernel's device: %w", err)
	}
	d := &p.direct
	if d.ep < 0 {
		if d.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
			return false, fmt.Errorf("creating the loop's input epoll: %w", err)
		}
		// A sleeping loop wakes when any device is readable.
		if err := unix.EpollCtl(p.w.ep, unix.EPOLL_CTL_ADD, d.ep, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(d.ep)}); err != nil {
			return false, fmt.Errorf("the loop's epoll: %w", err)
		}
	}
	if err := unix.EpollCtl(d.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(len(d.ins))}); err != nil {
		return false, fmt.Errorf("the loop's input epoll: %w", err)
	}
	in.dev, in.fd = dev, fd
	d.ins = append(d.ins, in)
	d.events = make([]unix.EpollEvent, len(d.ins))
	// The loop's own batch: direct inputs do not hand batches over.
	in.own = <-in.free
	return true, nil
}

// pollInputs reads every direct input whose kernel has packets queued and
// injects them; it reports whether there were any. Loop goroutine only.
func (p *Pacer) pollInputs() bool {
	d := &p.direct
	if len(d.ins) == 0 {
		return false
	}
	n, err := unix.EpollWait(d.ep, d.events, 0)
	if err != nil || n <= 0 {
		return false
	}
	got := false
	for _, ev := range d.events[:n] {
		in := d.ins[ev.Fd]
		if in.closed {
			continue
		}
		b := in.own
		k, err := in.fill(b, in.dev, in.readable)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				// Teardown closes devices after the loop stops; a device
				// closed under it is read no more.
				in.closed = true
				unix.EpollCtl(d.ep, unix.EPOLL_CTL_DEL, in.fd, nil)
			}
			// Anything else is one bad packet from the host (a
			// malformed offload header), already consumed.
			in.readErrs++
		}
		if k <= 0 {
			continue
		}
		b.n, b.at = k, p.elapsed()
		p.inject(b)
		got = true
	}
	return got
}

// readable reports whether in's device has a packet queued, without
// blocking (and without allocating, unlike a RawConn).
func (in *kernelInput) readable() bool {
	pfd := &in.p.direct.pfd
	pfd[0] = unix.PollFd{Fd: int32(in.fd), Events: unix.POLLIN}
	n, err := unix.Poll(pfd[:], 0)
	return err == nil && n > 0 && pfd[0].Revents&unix.POLLIN != 0
}

func (d *directInputs) close() {
	if d.ep >= 0 {
		unix.Close(d.ep)
		d.ep = -1
	}
}
