package live

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs/hostns"
)

// tryCountDevice is a pollCountDevice that can say it is empty
// (tryDevice): TryRead takes a packet off its eventfd semaphore's queue,
// or returns 0 when it is empty.
type tryCountDevice struct {
	pollCountDevice
	tries   int
	endless bool
	pkt     []byte
}

func (d *tryCountDevice) TryRead(bufs [][]byte, sizes []int, offset int) (int, error) {
	d.tries++
	if !d.endless {
		var b [8]byte
		if _, err := unix.Read(d.fd, b[:]); err == unix.EAGAIN {
			return 0, nil
		}
	}
	sizes[0] = copy(bufs[0][offset:], d.pkt)
	return 1, nil
}

// TestDirectDrainTries: a look draining a queue reads a device that can
// say it is empty (tryDevice) until it does, in one round (one epoll_wait
// for the whole queue, not one a packet), and then ends without asking
// the epoll again; a device that never empties gives a round at most a
// batch of packets and the look its budget. After an empty look it is
// read once, as any device (no read that finds nothing where packets
// come one at a time).
func TestDirectDrainTries(t *testing.T) {
	p := idlePacer(t)
	efd, queue := packetQueue(t)
	src := &tryCountDevice{pollCountDevice: pollCountDevice{fd: efd}, pkt: ipPacket(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), 1400)}
	src.read = func([][]byte, []int, int) (int, error) { t.Fatal("Read of a device that has TryRead"); return 0, nil }
	got := 0
	readInto(t, p, src, func([]byte) { got++ })
	queue(5)
	if !p.pollInputs() || src.tries != 1 || got != 1 {
		t.Fatalf("5 queued after no look: %d tries, %d packets; want 1 and 1 (one round, one read)", src.tries, got)
	}
	rounds := p.lag.LookRounds
	if !p.pollInputs() || got != 5 || src.tries != 6 || p.lag.LookRounds != rounds+1 {
		t.Fatalf("the draining look: %d packets, %d tries, %d rounds; want the other 4, 5 tries (the last finds none), 1 round", got-1, src.tries-1, p.lag.LookRounds-rounds)
	}
	if p.pollInputs() || src.tries != 6 {
		t.Fatalf("a look at the empty device tried it %d times, want 0 (its epoll says it is empty)", src.tries-6)
	}

	// A device that never runs dry.
	src.endless = true
	queue(1)
	p.pollInputs() // finds it after an empty look: one read
	start, tries, rounds := time.Now(), src.tries, p.lag.LookRounds
	if !p.pollInputs() {
		t.Fatal("a readable device was not read")
	}
	took, r := time.Since(start), p.lag.LookRounds-rounds
	if r < 2 || src.tries-tries > 8*int(r) || p.lag.LooksCut != 1 || took < p.lookBudget() {
		t.Fatalf("an endless device: %d tries in %d rounds over %v, %d looks cut; want at most 8 (a batch) a round, rounds until the budget of %v", src.tries-tries, r, took, p.lag.LooksCut, p.lookBudget())
	}
}

// TestLiveMr0OutOfRuntimePoller: in a running lab every host's mr0 is
// watched by the loop's epolls only, not edge-triggered by the Go
// runtime's (whose wake-ups on every packet the loop paid for: see
// runtimePolled); ReaderOnly labs, whose readers block in the runtime's
// poller, keep it there.
func TestLiveMr0OutOfRuntimePoller(t *testing.T) {
	testenv.RequireNamespaces(t)
	for _, tc := range []struct {
		name string
		opts Options
		want int
	}{{"loop", Options{}, 0}, {"reader-goroutines", Options{ReaderOnly: true}, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := upLive(t, "b2b", "rp", tc.opts)
			for _, h := range l.hosts {
				tun, ok := h.dev.(*hostns.TUN)
				if !ok {
					t.Fatalf("host %s: device %T, want a TUN", h.label, h.dev)
				}
				fd, err := tun.PollFD()
				if err != nil {
					t.Fatal(err)
				}
				if n := edgeWatchesOf(t, fd); n != tc.want {
					t.Errorf("host %s: mr0 watched edge-triggered by %d epolls of the process, want %d", h.label, n, tc.want)
				}
			}
		})
	}
}

// edgeWatchesOf counts this process's epolls that watch descriptor fd
// edge-triggered (as the Go runtime's poller does), by their fdinfo.
func edgeWatchesOf(t *testing.T, fd int) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fdinfo")
	if err != nil {
		t.Fatal(err)
	}
	want, n := fmt.Sprintf("tfd: %8d events: ", fd), 0
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(l, want); ok && len(rest) >= 8 && rest[0] >= '8' {
				n++
			}
		}
	}
	return n
}

// TestLookNowDefersToSleep: a pass about to sleep puts its look off to
// the sleep's epoll_wait, which watches the same devices; a pass with an
// event due, input or posts queued, a wake-up's word or a queue being
// drained looks; and a pass after one that put its look off without
// sleeping looks, so input waits at most a pass.
func TestLookNowDefersToSleep(t *testing.T) {
	p := idlePacer(t)
	p.spin = newSpinner(10*time.Microsecond, PolicyFair, p.cfg.LagThreshold, eventTolerance(p.cfg.LagThreshold))
	efd, queue := packetQueue(t)
	src := &tryCountDevice{pollCountDevice: pollCountDevice{fd: efd}, pkt: ipPacket(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), 1400)}
	in := p.newInput(8, 0, packet.MaxSize, func(_ sim.Time, b *packet.Buffer) { b.Free() })
	if ok, err := p.readDirect(in, src); !ok || err != nil {
		t.Fatalf("readDirect: %v, %v", ok, err)
	}
	if p.lookNow() {
		t.Fatal("nothing due, nothing queued: the pass looks before it sleeps")
	}
	if !p.lookNow() {
		t.Fatal("the pass after one that put its look off and did not sleep does not look")
	}
	// Put off, then a sleep: the device is readable, so the sleep's wait
	// returns at once, naming it, and the next pass reads it.
	if p.lookNow() {
		t.Fatal("nothing due: the pass looks")
	}
	queue(1)
	p.sleep(sim.Never, 0)
	if p.direct.deferred || len(p.direct.woken) != 1 {
		t.Fatalf("after the sleep: look still put off %v, devices named %v; want false, [0]", p.direct.deferred, p.direct.woken)
	}
	if !p.lookNow() || !p.pollInputs() {
		t.Fatal("the device the sleep named was not read")
	}
	if !p.lookNow() {
		t.Fatal("after a look that found packets (a queue may be building up) the pass does not look")
	}
	p.pollInputs() // empty: the queue is gone
	// An event due within the waiting rule's horizon: the loop watches
	// the clock rather than sleep, so it looks.
	p.loop.At(p.elapsed()+sim.Time(time.Microsecond), func(sim.Time) {})
	if !p.lookNow() {
		t.Fatal("an event due within the horizon: the pass does not look")
	}
}
