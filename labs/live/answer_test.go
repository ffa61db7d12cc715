package live

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/sim"
	"golang.org/x/sys/unix"
)

// TestLoopReadsImmediateAnswerInSamePass: a kernel that answers inside
// the lab's write to it (an echo reply, an ACK: a TUN write runs the
// kernel's receive path) has its answer read in the same pass of the
// loop, not after a sleep: the loop writes what its due events handed to
// kernels before it looks at its devices. Each round trip here (h0 ->
// h1, answered inside the write, -> h0, across a 1 µs wire) then costs
// the loop one sleep, waiting for the next request; writing after the
// look cost two (BenchmarkPingStages: one echo's dlv-back). A count,
// not a time: a slow machine makes passes slower, not more sleeps.
func TestLoopReadsImmediateAnswerInSamePass(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	req, ans := ipPacket(a, b, 40), ipPacket(b, a, 40)
	efd0, queue0 := packetQueue(t)
	efd1, queue1 := packetQueue(t)
	take := func(efd int) {
		var x [8]byte
		unix.Read(efd, x[:])
	}
	client := &answerDevice{pollCountDevice: pollCountDevice{fd: efd0}, wrote: make(chan struct{}, 1)}
	client.read = func(bufs [][]byte, sizes []int, offset int) (int, error) {
		take(efd0)
		sizes[0] = copy(bufs[0][offset:], req)
		return 1, nil
	}
	server := &answerDevice{pollCountDevice: pollCountDevice{fd: efd1}, answer: func() { queue1(1) }}
	server.read = func(bufs [][]byte, sizes []int, offset int) (int, error) {
		take(efd1)
		sizes[0] = copy(bufs[0][offset:], ans)
		return 1, nil
	}
	eng := newWireEngine(2, sim.Microsecond)
	l, err := Up(context.Background(), testLabName("ans"), eng, Options{RunDir: t.TempDir(), Devices: []Device{client, server}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rtt := func() {
		queue0(1)
		select {
		case <-client.wrote:
		case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
			t.Fatal("no answer came back")
		}
	}
	// The loop's own counters, read on the loop (Lag publishes them
	// every 10 ms).
	counts := func() (sleeps, spins uint64) {
		if err := l.pacer.Do(context.Background(), func(sim.Time) { sleeps, spins = l.pacer.lag.Sleeps, l.pacer.lag.Spins }); err != nil {
			t.Fatal(err)
		}
		return sleeps, spins
	}
	rtt() // the loop's first passes
	const rounds = 100
	sleeps0, spins0 := counts()
	for range rounds {
		rtt()
	}
	sleeps, spins := counts()
	sleeps -= sleeps0
	t.Logf("%d round trips: %d sleeps, %d spins", rounds, sleeps, spins-spins0)
	if sleeps > rounds*3/2 {
		t.Errorf("%d round trips cost the loop %d sleeps, want about one each: a kernel's immediate answer waited for a sleep before it was read", rounds, sleeps)
	}
}

// answerDevice is a pollable test kernel: answer runs inside each write
// (as a kernel's receive path runs inside a TUN write), and wrote is
// signalled after it.
type answerDevice struct {
	pollCountDevice
	answer func()
	wrote  chan struct{}
}

func (d *answerDevice) Write(b [][]byte, offset int) (int, error) {
	n, err := d.pollCountDevice.Write(b, offset)
	if d.answer != nil {
		d.answer()
	}
	if d.wrote != nil {
		select {
		case d.wrote <- struct{}{}:
		default:
		}
	}
	return n, err
}
