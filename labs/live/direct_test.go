package live

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// TestDirectReadOncePerLook: the loop reads a readable device once per
// look, never asking the kernel (a system call, ~2 µs on the project's
// VM) whether it holds more: the next look's epoll_wait says so. And a
// sleep woken by a device hands its readiness to the next look, which
// reads that device without another epoll_wait: here the device is taken
// out of the look's own epoll, so only the sleep's word can get it read.
func TestDirectReadOncePerLook(t *testing.T) {
	p := idlePacer(t)
	pkt := ipPacket(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), 1400)
	// An eventfd nobody reads: the device polls readable for good, as a
	// kernel with a deep queue would.
	efd, err := unix.Eventfd(1, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	reads := 0
	src := &pollCountDevice{fd: efd}
	src.read = func(bufs [][]byte, sizes []int, offset int) (int, error) {
		reads++
		sizes[0] = copy(bufs[0][offset:], pkt)
		return 1, nil
	}
	got := 0
	in := p.newInput(8, 0, packet.MaxSize, func(_ sim.Time, b *packet.Buffer) {
		got++
		b.Free()
	})
	if ok, err := p.readDirect(in, src); !ok || err != nil {
		t.Fatalf("readDirect: %v, %v", ok, err)
	}
	for look := 1; look <= 3; look++ {
		if !p.pollInputs() {
			t.Fatalf("look %d: the readable device was not read", look)
		}
		if reads != look || got != look {
			t.Fatalf("look %d: %d reads, %d packets; want one read (of one packet) per look", look, reads, got)
		}
	}

	// The sleep: woken by the device at once (it is readable).
	p.sleep(sim.Never, 0)
	if len(p.direct.woken) != 1 || p.direct.woken[0] != 0 {
		t.Fatalf("the sleep's wake-up named inputs %v, want [0]", p.direct.woken)
	}
	if err := unix.EpollCtl(p.direct.ep, unix.EPOLL_CTL_DEL, efd, nil); err != nil {
		t.Fatal(err)
	}
	if !p.pollInputs() || reads != 4 {
		t.Fatalf("after the wake-up: %d reads, want 4 (the device the sleep named)", reads)
	}
	if p.pollInputs() {
		t.Fatal("a look with no wake-up to use read a device its epoll does not watch")
	}
}

// TestSpinLookCost: a loop watching the clock looks at its devices only
// with more time to go than an empty look has cost (measured, not set):
// a look closer to the event would make the event late.
func TestSpinLookCost(t *testing.T) {
	p := idlePacer(t)
	if p.direct.spinLook(time.Hour) {
		t.Fatal("a loop with no devices looks at them")
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	src := &pollCountDevice{fd: efd}
	src.read = func([][]byte, []int, int) (int, error) { t.Fatal("read an idle device"); return 0, nil }
	in := p.newInput(8, 0, packet.MaxSize, func(_ sim.Time, b *packet.Buffer) { b.Free() })
	if ok, err := p.readDirect(in, src); !ok || err != nil {
		t.Fatalf("readDirect: %v, %v", ok, err)
	}
	for range 16 {
		if p.pollInputs() {
			t.Fatal("an idle device was read")
		}
	}
	c := p.direct.lookCost
	if c <= 0 {
		t.Fatalf("empty looks cost %v: not measured", c)
	}
	for _, tc := range []struct {
		wait time.Duration
		want bool
	}{{c / 2, false}, {c, false}, {c + 1, true}, {100 * c, true}} {
		if got := p.direct.spinLook(tc.wait); got != tc.want {
			t.Errorf("spinLook(%v) with looks costing %v = %v, want %v", tc.wait, c, got, tc.want)
		}
	}
}

// idlePacer is a pacer whose loop does not run: the test drives its
// devices' reads by hand. Its clock starts now, as Run sets it (reads are
// stamped with the time since).
func idlePacer(t *testing.T) *Pacer {
	t.Helper()
	p, err := NewPacer(sim.NewLoop(), packet.NewPool(), PacerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.w.close()
		p.direct.close()
	})
	p.start = time.Now()
	return p
}
