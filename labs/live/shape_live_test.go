package live

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestLiveSenderAboveLine: a host that sends UDP as fast as its CPU lets
// it, above its NIC's 1 Gbit/s (b2b), loses nothing on its own side, as a
// host at a real NIC would not: mr0's shaper (kernelShape) holds its
// packets in the kernel, where they stay charged to the socket, whose
// default send buffer then blocks the sender, so the sender is held to
// the NIC's rate and the lab reads every datagram. Without the shaper a
// TUN frees each packet as it queues it, the sender never blocks, and
// what it sends faster than the lab reads is dropped at mr0's ring
// (tx_dropped). The test does not judge a run during which the lab fell
// behind the wall clock or its loop may have been kept from its CPU long
// enough to matter (LOOP STARVED): it then reads late, whatever the
// kernel does.
func TestLiveSenderAboveLine(t *testing.T) {
	testenv.RequireNamespaces(t)
	l, _ := upLive(t, "b2b", "s", Options{})
	_, ns0 := hostAddr(t, l, "h0")
	h1, _ := hostAddr(t, l, "h1")
	dst := mustAddr(t, h1.Addr)
	ctx := context.Background()
	var fd int
	if err := ns0.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	before, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var w *lagWatch
	if err := l.pacer.Do(ctx, func(sim.Time) { w = l.pacer.watch() }); err != nil {
		t.Fatal(err)
	}
	// 30,000 datagrams of 1428 bytes are 343 ms at 1 Gbit/s: more than
	// mr0's ring (20 ms) and the NIC's host queue (20 ms) hold together.
	const n, size = 30000, 1400
	const ipSize = size + 28
	payload := make([]byte, size)
	to := &unix.SockaddrInet4{Port: 9, Addr: dst.As4()}
	var sendErrs int
	start := time.Now()
	for range n {
		if err := unix.Sendto(fd, payload, 0, to); err != nil {
			sendErrs++
		}
	}
	took := time.Since(start)
	// What the NIC still holds is read; let the lab drain it.
	var after Status
	for range 50 {
		time.Sleep(20 * time.Millisecond)
		if after, err = l.Status(ctx); err != nil {
			t.Fatal(err)
		}
		if k, k0 := after.Hosts[0].Kernel, before.Hosts[0].Kernel; k != nil && k0 != nil &&
			after.Hosts[0].FromKernel-before.Hosts[0].FromKernel+k.TxDropped-k0.TxDropped >= n {
			break
		}
	}
	var tm Timing
	if err := l.pacer.Do(ctx, func(sim.Time) { tm = w.stop() }); err != nil {
		t.Fatal(err)
	}
	k, k0 := after.Hosts[0].Kernel, before.Hosts[0].Kernel
	if k == nil || k0 == nil {
		t.Fatal("no kernel counters for h0's mr0")
	}
	var nic uint64
	for name, c := range after.Engine.NICs {
		nic += c["drops"] - before.Engine.NICs[name]["drops"]
	}
	read := after.Hosts[0].FromKernel - before.Hosts[0].FromKernel
	line := time.Duration(float64(n*ipSize*8) / DefaultMaxRate * float64(time.Second))
	t.Logf("sent %d datagrams in %v (%.2f Gbit/s; the NIC's line takes %v), %d send errors; the lab read %d; drops: mr0 qdisc %d, mr0 ring %d, NICs %d; %s; loop policy %s",
		n, took.Round(time.Millisecond), float64(n*ipSize*8)/took.Seconds()/1e9, line.Round(time.Millisecond), sendErrs,
		read, k.QdiscDropped-k0.QdiscDropped, k.TxDropped-k0.TxDropped, nic, tm.Verdict(), policyWord(l.pacer.Lag().Priority))
	ring := k.TxDropped - k0.TxDropped
	// The ring loses what the loop reads late, and the lab's lateness
	// does not see it: a packet enters the lab when it is read, so its
	// events run on time however long it waited in the ring (14,862 of
	// 30,000 in a CI run, the sender at 0.52 Gbit/s, below the line, and
	// the lab keeping real time). Two causes, traced (labs/live/README.md,
	// "Ring drops while the lab keeps real time"): the loop's CPU per
	// datagram (a write per round of a draining look made it read slower
	// than the line; fixed, TestDirectLookBatchesWrites), and a sleeping
	// loop woken by mr0 that waits for its CPU with no event due (forced
	// fair at load 11-12, 3 of 7 runs dropped 327-513, the loop 0.5-1.4 s
	// on the run queue, one run "real time kept"). The lab now counts
	// the second (runqueue.go: LOOP STARVED). A run that drops more than
	// 1% at the ring and says neither LAGGING nor LOOP STARVED is still a
	// known miss: in 56 runs at load 2.4-9, 10 of the 11 such runs were
	// LAGGING, the other said real time kept (deadline, 303 dropped, 9.8
	// ms late, the loop 17 ms on the run queue in 2 s), so the assertion
	// would not hold.
	if ring > n/100 && !tm.Lagging() && !tm.LoopStarved() {
		testenv.KnownMiss(t, "labs/live", "#26", "%d of %d datagrams dropped at mr0's ring, want at most 1%%, while the lab reported %q: it read them late (mr0 is paced) and neither its lateness nor its loop's run-queue wait says so; loop policy %s",
			ring, n, tm.Verdict(), policyWord(l.pacer.Lag().Priority))
	}
	if tm.Lagging() || tm.LoopStarved() {
		t.Skipf("the lab fell behind the wall clock or its loop may have been kept from its CPU during the run: %s", tm.Verdict())
	}
	if sendErrs != 0 || read+ring < n || k.QdiscDropped != k0.QdiscDropped || nic != 0 {
		t.Errorf("a sender faster than its NIC lost datagrams on its own side: %d send errors, %d of %d read by the lab, %d dropped at mr0's ring, %d at its qdisc, %d at the NICs",
			sendErrs, read, n, ring, k.QdiscDropped-k0.QdiscDropped, nic)
	}
	// Held to the NIC's rate: the sends took at least the line's time
	// less what the bucket and the socket's buffer let through at once
	// (a lower bound that no load can break: a slower sender only takes
	// longer).
	if ahead := 2*maxSuperPacket + 1<<20; took < line-time.Duration(float64(ahead*8)/DefaultMaxRate*float64(time.Second)) {
		t.Errorf("%d datagrams left h0 in %v, faster than its NIC's line (%v): mr0 is not paced", n, took, line)
	}
}

// policyWord is the policy in force at the head of LagStats.Priority
// ("deadline", "fair", ...).
func policyWord(priority string) string {
	if i := strings.IndexByte(priority, ' '); i > 0 {
		return priority[:i]
	}
	return priority
}
