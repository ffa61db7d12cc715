package live

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/sim"
)

// Direct reads: the loop reads a host's kernel itself. A reader goroutine
// blocked in Read is woken through the Go runtime's poller, then wakes the
// loop (an eventfd write): two thread wake-ups on every packet's path from
// a quiet host, and on this project's 2-core VM each costs more CPU than
// the read and tens of microseconds of a ping's round trip. A device that
// can say when a Read would not block (pollDevice; a TUN) is instead
// watched by the loop itself: a sleeping loop is woken by the kernel
// straight from the host's send (the devices' descriptors are in the
// epoll it sleeps in, which also says which devices woke it), and a
// running one looks (one epoll_wait with no timeout, for every such
// device at once) between events, as it looks at posts and the verbs
// rings.
//
// System calls are the cost to count: one costs about 2 µs on this
// project's VM (a paravirtualized guest; 80 ns for a clock read), more
// than the loop's own work on a packet. So a wake-up's readiness is used
// as it comes (no second epoll_wait to learn which device it was), and
// whether a device holds more is an epoll_wait for all devices at once
// (the next look's, which the loop makes anyway, or the next round's of a
// look draining a queue that built up: pollInputs), never a poll(2)
// after every read (a ping's every leg paid three calls more than its
// read); within a draining round, a device that can say it is empty
// (tryDevice) is asked by reading it again.

// pollDevice is a Device whose readiness the loop can watch.
type pollDevice interface {
	Device
	// PollFD is a descriptor that polls readable while a Read would find
	// a packet at once. It stays valid until Close.
	PollFD() (int, error)
}

// runtimePolled is a device whose descriptor the Go runtime's network
// poller watches (hostns.TUN, an os.File of a non-blocking descriptor).
// Every packet the host's kernel queues on it, and every packet the loop
// writes to it once the kernel frees it, is an edge the runtime's epoll
// reports: an idle runtime thread blocked there (one is whenever a
// goroutine of the process waits on a socket: the control server's
// listener) wakes, finds no goroutine waiting on the device, and sleeps
// again. A thread wake-up per packet, the loop's own included, for a
// device nothing but the loop reads, and only when its own epoll says
// it is readable: at 10% of the 1 Gbit/s cap (b2b, BenchmarkUDPFlood)
// the lab process's CPU per datagram was the loop's plus 18-33 us.
// So the loop takes such a device out of the runtime's poller.
type runtimePolled interface {
	DetachRuntimePoller() error
}

// tryDevice is a device that can be read without knowing whether a
// packet is queued (hostns.TUN.TryRead): with none it returns 0 at once.
// A look draining a queue reads such a device until it says it is empty,
// instead of asking the epoll before every read: a queue of datagrams
// cost the loop two system calls a datagram (epoll_wait and read), now
// one and a read that finds nothing per round.
type tryDevice interface {
	TryRead(bufs [][]byte, sizes []int, offset int) (int, error)
}

// directInputs is the loop's set of inputs it reads itself.
type directInputs struct {
	ep     int // epoll of the devices' descriptors; -1 when none
	ins    []*kernelInput
	events []unix.EpollEvent
	// woken are the inputs the loop's sleep found readable (their
	// indices), for the next pollInputs to read without asking again.
	woken []int
	// lookCost is what a look that found nothing cost lately (a moving
	// average of its epoll_wait's wall time): a loop watching the clock
	// for an event closer than that does not look (spinLook).
	lookCost time.Duration
	// backlog: the last look found packets, so the next drains.
	backlog bool
	// deferred: a pass put its look off to its sleep (lookNow); until a
	// sleep has watched the devices, the next pass looks.
	deferred bool
	// attached are the errors of devices readDirect could not take
	// out of the runtime's poller (runtimePolled), for the lab's log.
	attached []error
}

// spinLook reports whether a loop watching the clock with wait left
// before its next event should look at its devices: a look costs a
// system call, and one made with less than its cost to go makes the
// event late by the difference, while a packet that arrives meanwhile
// waits no longer for being read after the event (the look would have
// delayed the event instead). Loop goroutine only.
func (d *directInputs) spinLook(wait time.Duration) bool {
	return len(d.ins) > 0 && wait > d.lookCost
}

// wakeTag is the epoll user data of direct input i in the loop's own
// epoll (the waiter's, whose other descriptors are tagged with their
// numbers, never negative).
func wakeTag(i int) int32 { return int32(-1 - i) }

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
	}
	if err := unix.EpollCtl(d.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(len(d.ins))}); err != nil {
		return false, fmt.Errorf("the loop's input epoll: %w", err)
	}
	// A sleeping loop wakes when the device is readable, and knows it.
	if err := unix.EpollCtl(p.w.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: wakeTag(len(d.ins))}); err != nil {
		return false, fmt.Errorf("the loop's epoll: %w", err)
	}
	if rp, ok := dev.(runtimePolled); ok {
		// Only the loop's epolls watch it from here on (read only
		// when they say it is readable); a device left in the
		// runtime's poller still works, at a wake-up per packet.
		if err := rp.DetachRuntimePoller(); err != nil {
			d.attached = append(d.attached, err)
		}
	}
	in.dev, in.fd = dev, fd
	in.try, _ = dev.(tryDevice)
	d.ins = append(d.ins, in)
	d.events = make([]unix.EpollEvent, len(d.ins))
	d.woken = make([]int, 0, len(d.ins))
	p.w.events = make([]unix.EpollEvent, 2+len(d.ins))
	// The loop's own batch: direct inputs do not hand batches over.
	in.own = <-in.free
	return true, nil
}

// pollInputs reads every direct input whose kernel has packets queued and
// injects them; it reports whether there were any. Loop goroutine only.
//
// A look reads each readable device once per round. When the look before
// it found packets too (a queue may be building up), it makes rounds
// while one finds packets (its epoll_wait is the question "is there
// more?" for every device at once), until the devices are empty or the
// look has taken lookBudget; otherwise one round (at low rates a second
// would cost a call that finds nothing). One round per look made the
// loop's read rate its rate of passes: a loop busy with the events of
// the packets it had read read one packet a pass, kept every event on time, and let the sender's mr0
// ring overflow (UDP at 80% of the cap lost 17-19% at the ring on a quiet
// box). Events do not wait for a long look: inject runs the events due
// before each packet's read time first.
//
// What those events hand to a kernel is written when the draining look
// ends (and whenever a device's write batch fills: kernelOutput.Send),
// not after every round. In a queue of datagrams every round is one
// packet, so a write per round made each datagram cost the loop three
// system calls (epoll_wait, read, and the write of the datagram a round
// before, now at the far end); the loop's read rate is its CPU per
// packet, and no lateness shows it: every packet enters the lab when it
// is read and its events run on time, so a loop reading slower than a
// host sends keeps real time while the host's ring overflows (a b2b
// sender at 74 kpps, the loop reading 64 kpps: 8,274 of 60,000 dropped at
// h0's ring, worst lateness 3 ms). Written per look, 0.06-0.55 writes a
// datagram instead of 1.0, and 25-30% less of the loop's CPU per
// datagram. A packet for a kernel then waits at most the look, whose
// budget already bounds everything else a look defers.
func (p *Pacer) pollInputs() bool {
	d := &p.direct
	if len(d.ins) == 0 {
		return false
	}
	got := false
	start := p.elapsed()
	for {
		var n int
		if len(d.woken) > 0 {
			// The sleep's epoll said which: no need to ask again.
			for i, x := range d.woken {
				d.events[i].Fd = int32(x)
			}
			n, d.woken = len(d.woken), d.woken[:0]
		} else {
			var err error
			t := p.elapsed()
			if n, err = unix.EpollWait(d.ep, d.events, 0); err != nil || n <= 0 {
				d.backlog = got
				if got {
					// A draining look ends: write what its rounds'
					// events handed to kernels.
					p.flush()
				} else {
					// An empty look's cost, averaged over the last eight.
					d.lookCost += (time.Duration(p.elapsed()-t) - d.lookCost) / 8
				}
				return got
			}
		}
		found, more := p.readRound(d.events[:n], d.backlog, start)
		if !found {
			d.backlog = false
			if got {
				p.flush()
			}
			return got
		}
		got = true
		p.lag.LookRounds++
		if !d.backlog {
			// The look before found nothing: no queue is building up,
			// and asking for more would cost a call per look that
			// finds nothing (the next look asks anyway).
			d.backlog = true
			return true
		}
		if time.Duration(p.elapsed()-start) >= p.lookBudget() {
			p.lag.LooksCut++
			p.flush()
			return true
		}
		if !more {
			// Every device read was read until it said it was empty:
			// no need to ask the epoll (a call per round; in a queue
			// of datagrams, one per datagram before TryRead).
			p.flush()
			return true
		}
	}
}

// look reads the hosts' devices unless the pass is about to sleep
// (lookNow). Loop goroutine only.
func (p *Pacer) look() {
	if p.lookNow() {
		p.pollInputs()
	}
}

// lookNow reports whether a pass of the loop should look at its devices
// now: not when it is about to sleep (no event due within the waiting
// rule's horizon, no post or input queued, no wake-up's word to use and
// no queue being drained), since the sleep's own epoll_wait watches every
// device and returns at once, saying which, if one is readable: the look
// before it would be a second system call for the same answer (at 10% of
// b2b's cap, one a datagram). A pass that put its look off and then did
// not sleep (the verbs poller found work) makes the next pass look, so
// input waits at most a pass for it. Loop goroutine only.
func (p *Pacer) lookNow() bool {
	d := &p.direct
	if len(d.woken) > 0 || d.backlog || d.deferred {
		d.deferred = false
		return true
	}
	next, now := p.loop.Next(), p.elapsed()
	if len(d.ins) == 0 || next <= now || len(p.posts) > 0 || len(p.input) > 0 || !p.spin.sleeps(time.Duration(next-now)) {
		return true
	}
	d.deferred = true
	return false
}

// lookBudget is how long one look may keep reading while its devices
// still hold packets: what it defers (posts, the verbs rings; events and
// writes run between its rounds) then waits at most a quarter of the lag
// threshold, the share of the lateness the lab counts that the spin
// horizon may also take (spin.go).
func (p *Pacer) lookBudget() time.Duration { return p.cfg.LagThreshold / 4 }

// readRound reads from each input evs name and injects what it read; it
// reports whether any packet came, and whether any input may hold more
// (more rounds would find packets). Without drain, or from a device that
// cannot say it is empty (no TryRead), it reads each once. With drain it
// reads a device that can (tryDevice) until it says it is empty, or until
// the round has taken a batch of packets from it (every readable device
// gets its batch in turn) or the look (begun at start) its budget.
func (p *Pacer) readRound(evs []unix.EpollEvent, drain bool, start sim.Time) (got, more bool) {
	d := &p.direct
	for _, ev := range evs {
		in := d.ins[ev.Fd]
		b := in.own
		for taken := 0; !in.closed; {
			// The first read finds a packet (the device is readable);
			// later ones ask by reading (TryRead returns 0 when empty).
			var k int
			var err error
			if in.try != nil {
				k, err = in.try.TryRead(b.bufs, b.sizes, in.offset)
			} else {
				k, err = in.fill(b, in.dev, nil)
			}
			if err != nil {
				if errors.Is(err, os.ErrClosed) {
					// Teardown closes devices after the loop stops; a
					// device closed under it is read no more.
					in.closed = true
					unix.EpollCtl(d.ep, unix.EPOLL_CTL_DEL, in.fd, nil)
					unix.EpollCtl(p.w.ep, unix.EPOLL_CTL_DEL, in.fd, nil)
					break
				}
				// Anything else is one bad packet from the host (a
				// malformed offload header), already consumed.
				in.readErrs++
				k = 0
				taken++
			} else if k <= 0 {
				break // empty
			}
			if k > 0 {
				b.n, b.at = k, p.elapsed()
				p.inject(b)
				got = true
				taken += k
			}
			if !drain || in.try == nil || taken >= len(b.bufs) || time.Duration(p.elapsed()-start) >= p.lookBudget() {
				more = true
				break
			}
		}
	}
	return got, more
}

func (d *directInputs) close() {
	if d.ep >= 0 {
		unix.Close(d.ep)
		d.ep = -1
	}
}
