package live

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// TestDirectLookDrains: a look reads a readable device once per round;
// after a look that found packets it makes rounds until its devices are
// empty (a kernel's queue of k packets is read in two looks, k reads), or
// until its budget is spent (a device that never empties does not hold
// the loop for longer); after an empty look, one round (no call to ask
// for more where packets come one at a time). And a
// sleep woken by a device hands its readiness to the next look, which
// reads that device without another epoll_wait: here the device is taken
// out of the look's own epoll, so only the sleep's word can get it read.
func TestDirectLookDrains(t *testing.T) {
	p := idlePacer(t)
	pkt := ipPacket(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), 1400)
	// The device polls readable while its eventfd's count is not zero:
	// queued packets, taken one per read.
	efd, queue := packetQueue(t)
	reads, endless := 0, false
	src := &pollCountDevice{fd: efd}
	src.read = func(bufs [][]byte, sizes []int, offset int) (int, error) {
		reads++
		if !endless {
			var b [8]byte
			unix.Read(efd, b[:]) // one packet off the queue
		}
		sizes[0] = copy(bufs[0][offset:], pkt)
		return 1, nil
	}
	got := 0
	readInto(t, p, src, func([]byte) { got++ })
	if p.pollInputs() || reads != 0 {
		t.Fatalf("an empty device: read %d times", reads)
	}
	queue(5)
	if !p.pollInputs() || reads != 1 || got != 1 {
		t.Fatalf("5 packets queued, the look before empty: the look read %d times, %d packets; want one round", reads, got)
	}
	if !p.pollInputs() || reads != 5 || got != 5 {
		t.Fatalf("the look after one that found packets read %d times in all, %d packets; want the other 4 (a queue building up is drained)", reads, got)
	}
	if p.pollInputs() || reads != 5 {
		t.Fatalf("the look after it read %d times, want none (the queue is empty)", reads-5)
	}
	// Status's counters: a round for each of the 5 reads, none cut.
	p.publish()
	if l := p.Lag(); l.LookRounds != 5 || l.LooksCut != 0 {
		t.Fatalf("after 5 packets read in 5 rounds: status says %d rounds, %d looks cut; want 5, 0", l.LookRounds, l.LooksCut)
	}

	// A kernel that never runs dry: the second look ends on its budget.
	endless = true
	queue(1)
	if !p.pollInputs() || reads != 6 {
		t.Fatalf("a readable device after an empty look: %d reads, want 1", reads-5)
	}
	start := time.Now()
	if !p.pollInputs() {
		t.Fatal("a readable device was not read")
	}
	if took := time.Since(start); reads < 8 || p.lag.LooksCut != 1 || took < p.lookBudget() {
		t.Fatalf("an endless device: the look read %d times in %v and was cut %d times; want more than one round, ended by its budget of %v", reads-6, took, p.lag.LooksCut, p.lookBudget())
	}
	// Empty it, and the sleep below is the first wake-up after an empty
	// look.
	endless = false
	var b [8]byte
	unix.Read(efd, b[:])
	p.pollInputs()
	queue(1)

	// The sleep: woken by the device at once (it is readable).
	p.sleep(sim.Never, 0)
	if len(p.direct.woken) != 1 || p.direct.woken[0] != 0 {
		t.Fatalf("the sleep's wake-up named inputs %v, want [0]", p.direct.woken)
	}
	if err := unix.EpollCtl(p.direct.ep, unix.EPOLL_CTL_DEL, efd, nil); err != nil {
		t.Fatal(err)
	}
	before := reads
	if !p.pollInputs() || reads != before+1 {
		t.Fatalf("after the wake-up: %d reads, want 1 (the device the sleep named; the look's epoll no longer sees it)", reads-before)
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

// writeCallDevice counts the Write calls a kernel gets and the packets
// in them.
type writeCallDevice struct {
	countDevice
	calls int
}

func (d *writeCallDevice) Write(b [][]byte, offset int) (int, error) {
	d.calls++
	return d.countDevice.Write(b, offset)
}

// TestDirectLookBatchesWrites: what a draining look's rounds hand to a
// kernel is written once, when the look ends (or when a write batch
// fills), not once a round: in a queue of datagrams a round is one
// packet, and a write per round made the loop's cost per datagram three
// system calls, its read rate lower than a sender's, and the sender's
// ring overflow while the lab kept real time. Nothing is left unwritten
// when the look ends, drained or cut on its budget.
func TestDirectLookBatchesWrites(t *testing.T) {
	p := idlePacer(t)
	// A budget no loaded machine's rounds run out of, until the cut below.
	p.cfg.LagThreshold = time.Hour
	pkt := ipPacket(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), 1400)
	efd, queue := packetQueue(t)
	endless := false
	src := &pollCountDevice{fd: efd}
	src.read = func(bufs [][]byte, sizes []int, offset int) (int, error) {
		if !endless {
			var b [8]byte
			unix.Read(efd, b[:])
		}
		sizes[0] = copy(bufs[0][offset:], pkt)
		return 1, nil
	}
	// Every packet read is handed straight to the far kernel, as the
	// events of a datagram read a round before are in the lab.
	dst := &writeCallDevice{}
	out := p.newOutput(dst, 1<<20, packet.MaxSize, true)
	readInto(t, p, src, func(b []byte) { out.Send(b) })
	batch := len(newWriteBufs(dst, packet.MaxSize))
	queue(uint64(2 * batch))
	// The look after an empty one: one round, written by the loop's pass.
	if !p.pollInputs() {
		t.Fatal("a readable device was not read")
	}
	p.flush()
	calls, sent := dst.calls, dst.n.Load()
	// The draining look: 2*batch-1 rounds.
	if !p.pollInputs() {
		t.Fatal("the draining look read nothing")
	}
	rounds := 2*batch - 1
	if got := dst.n.Load() - sent; got != int64(rounds) {
		t.Fatalf("the draining look read %d packets and left %d of them unwritten when it ended", rounds, int64(rounds)-got)
	}
	if got, want := dst.calls-calls, 2; got > want {
		t.Fatalf("the draining look's %d rounds wrote to the kernel %d times, want at most %d (a batch of %d filled, then the look ended)", rounds, got, want, batch)
	}
	// A look cut on its budget writes what it read too.
	p.cfg.LagThreshold = time.Millisecond
	endless = true
	queue(1)
	calls, sent = dst.calls, dst.n.Load()
	// The look before found packets: this one drains, and is cut.
	if !p.pollInputs() || p.lag.LooksCut != 1 {
		t.Fatalf("an endless device's look was cut %d times, want 1", p.lag.LooksCut)
	}
	if len(p.flushes) != 0 {
		t.Fatal("a cut look left packets for a kernel unwritten")
	}
	got := dst.n.Load() - sent
	if most := got/int64(batch) + 1; int64(dst.calls-calls) > most {
		t.Fatalf("a cut look wrote %d packets in %d writes, want at most %d", got, dst.calls-calls, most)
	}
}

// packetQueue is a test device's readiness: an eventfd in semaphore mode
// that polls readable while its count (packets queued, taken one per
// read) is not zero, and queue, which adds k to the count. The eventfd
// closes with the test.
func packetQueue(t *testing.T) (int, func(k uint64)) {
	t.Helper()
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC|unix.EFD_SEMAPHORE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(efd) })
	return efd, func(k uint64) {
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], k)
		if _, err := unix.Write(efd, b[:]); err != nil {
			t.Fatal(err)
		}
	}
}

// readInto has p read dev directly (readDirect), handing each packet's
// bytes to sink before it frees the packet.
func readInto(t *testing.T, p *Pacer, dev Device, sink func([]byte)) {
	t.Helper()
	in := p.newInput(8, 0, packet.MaxSize, func(_ sim.Time, b *packet.Buffer) {
		sink(b.Data())
		b.Free()
	})
	if ok, err := p.readDirect(in, dev); !ok || err != nil {
		t.Fatalf("readDirect: %v, %v", ok, err)
	}
}
