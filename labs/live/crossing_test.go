package live

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// numbered is a packet carrying i; number reads it back.
func numbered(pool *packet.Pool, i int) *packet.Buffer {
	b := pool.Get(64)
	b.SetLen(3)
	d := b.Data()
	d[0], d[1], d[2] = byte(i), byte(i>>8), byte(i>>16)
	return b
}

func number(b *packet.Buffer) int {
	d := b.Data()
	return int(d[0]) | int(d[1])<<8 | int(d[2])<<16
}

func TestCrossingCapacity(t *testing.T) {
	for _, tc := range []struct {
		ask, want int
		bad       bool
	}{{1, 2, false}, {2, 2, false}, {3, 4, false}, {1000, 1024, false}, {0, 0, true}, {-1, 0, true}, {1<<20 + 1, 0, true}} {
		c, err := newCrossing("x", tc.ask)
		if tc.bad {
			if err == nil {
				t.Errorf("capacity %d: no error", tc.ask)
			}
			continue
		}
		if err != nil || c.Cap() != tc.want {
			t.Errorf("capacity %d: got %v, %v; want %d", tc.ask, c, err, tc.want)
		}
	}
}

// TestCrossingBounded pushes more than the ring holds: the surplus is
// dropped on the sender's side, freed into its pool and counted; what was
// kept arrives in push order with its stamp and key, and every packet is
// accounted for (sent + dropped = pushed, received = sent).
func TestCrossingBounded(t *testing.T) {
	pool := packet.NewPool()
	c, err := newCrossing("s0->s1", 8)
	if err != nil {
		t.Fatal(err)
	}
	const pushed = 13
	kept := 0
	for i := range pushed {
		b := numbered(pool, i)
		if c.Push(sim.Time(100+i), uint64(i), b) {
			kept++
		}
	}
	if kept != 8 || c.Pending() != 8 {
		t.Fatalf("kept %d, pending %d; want 8 (the ring's size)", kept, c.Pending())
	}
	if got := pool.Outstanding(); got != 8 {
		t.Errorf("%d buffers outstanding after the drops; want 8 (dropped ones freed)", got)
	}
	var seen []int
	n := c.Drain(0, sim.Millisecond, func(at sim.Time, key uint64, b *packet.Buffer) {
		i := number(b)
		if at != sim.Time(100+i) || key != uint64(i) {
			t.Errorf("packet %d: stamp %v key %d; want %v, %d", i, at, key, 100+i, i)
		}
		seen = append(seen, i)
		b.Free()
	})
	if n != 8 {
		t.Fatalf("drained %d; want 8", n)
	}
	for i, v := range seen {
		if v != i {
			t.Fatalf("order %v: want 0..7", seen)
		}
	}
	s := c.Stats()
	want := CrossingStats{Name: "s0->s1", Sent: 8, Dropped: pushed - 8, Received: 8}
	if s != want {
		t.Errorf("stats %+v; want %+v", s, want)
	}
	// Room again once drained.
	if !c.Push(200, 0, pool.Get(64)) {
		t.Error("push after drain refused")
	}
	c.Drain(0, sim.Millisecond, func(_ sim.Time, _ uint64, b *packet.Buffer) { b.Free() })
	if pool.Outstanding() != 0 {
		t.Errorf("%d buffers leaked", pool.Outstanding())
	}
}

// TestCrossingLateness: a packet drained after its stamp is late by the
// difference, and counted late past the threshold.
func TestCrossingLateness(t *testing.T) {
	const thr = sim.Millisecond
	for _, tc := range []struct {
		name          string
		stamp, now    sim.Time
		lateAny, late uint64
		maxLate       time.Duration
		packetsLate   uint64
	}{
		{"early", 5 * sim.Millisecond, 1 * sim.Millisecond, 0, 0, 0, 0},
		{"on time", 5 * sim.Millisecond, 5 * sim.Millisecond, 0, 0, 0, 0},
		{"late within threshold", 5 * sim.Millisecond, 5*sim.Millisecond + 300*sim.Microsecond, 1, 0, 300 * time.Microsecond, 0},
		{"late past threshold", 5 * sim.Millisecond, 8 * sim.Millisecond, 1, 1, 3 * time.Millisecond, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := packet.NewPool()
			c, _ := newCrossing("x", 4)
			c.Push(tc.stamp, 0, pool.Get(64))
			c.Drain(tc.now, thr, func(at sim.Time, _ uint64, b *packet.Buffer) {
				if at != tc.stamp {
					t.Errorf("stamp %v; want %v unchanged", at, tc.stamp)
				}
				b.Free()
			})
			s := c.Stats()
			if s.LateAny != tc.lateAny || s.Late != tc.late || s.MaxLate != tc.maxLate {
				t.Errorf("late_any %d late %d max %v; want %d, %d, %v", s.LateAny, s.Late, s.MaxLate, tc.lateAny, tc.late, tc.maxLate)
			}
		})
	}
}

// TestCrossingNoAlloc: a push and a drain allocate nothing.
func TestCrossingNoAlloc(t *testing.T) {
	c, _ := newCrossing("x", 64)
	pool := packet.NewPool()
	bufs := make([]*packet.Buffer, 16)
	for i := range bufs {
		bufs[i] = pool.Get(1500)
	}
	got := make([]*packet.Buffer, 0, len(bufs))
	fn := func(_ sim.Time, _ uint64, b *packet.Buffer) { got = append(got, b) }
	allocs := testing.AllocsPerRun(100, func() {
		for i, b := range bufs {
			c.Push(sim.Time(i), uint64(i), b)
		}
		got = got[:0]
		c.Drain(0, sim.Millisecond, fn)
		copy(bufs, got)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per 16 packets pushed and drained; want 0", allocs)
	}
}

// TestCrossingConcurrent runs a producer and a consumer on two goroutines
// (run it with -race): every packet is either received, in order, or
// counted as dropped.
func TestCrossingConcurrent(t *testing.T) {
	const n = 20000
	c, _ := newCrossing("x", 64)
	// Each side has its own pool, as partitions do: the receiver rehomes
	// what it receives.
	send, recv := packet.NewPool(), packet.NewPool()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			b := numbered(send, i)
			c.Push(sim.Time(i), uint64(i), b)
			if i%512 == 0 {
				runtime.Gosched()
			}
		}
	}()
	last, got := -1, 0
	deadline := time.Now().Add(20 * time.Second)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for finished := false; ; {
		c.Drain(0, sim.Millisecond, func(at sim.Time, key uint64, b *packet.Buffer) {
			i := number(b)
			if i <= last || at != sim.Time(i) || key != uint64(i) {
				t.Errorf("packet %d (stamp %v) after %d", i, at, last)
			}
			last = i
			got++
			b.Rehome(recv)
			b.Free()
		})
		if finished {
			break
		}
		select {
		case <-done:
			finished = true // one more drain picks up the rest
		default:
			if time.Now().After(deadline) {
				t.Fatal("producer did not finish in 20s")
			}
			runtime.Gosched()
		}
	}
	s := c.Stats()
	if s.Sent+s.Dropped != n || s.Received != s.Sent || uint64(got) != s.Received {
		t.Errorf("stats %+v, received %d: want sent+dropped = %d, received = sent", s, got, n)
	}
}

// BenchmarkCrossing is a packet's cost to cross partitions and come back
// to its pool: one goroutine pushes packets on a crossing, another drains
// them and hands each buffer back on a second crossing, as two
// partitions' loops would. The sender waits for room instead of dropping,
// so every op is one packet across.
//
//	go test ./labs/live -run '^$' -bench Crossing -count 3
func BenchmarkCrossing(b *testing.B) {
	out, _ := newCrossing("a->b", 256)
	back, _ := newCrossing("b->a", 512)
	pool := packet.NewPool()
	var free []*packet.Buffer
	for range out.Cap() { // back holds them all: it never fills
		free = append(free, pool.Get(1500))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		fn := func(at sim.Time, key uint64, p *packet.Buffer) { back.Push(at, key, p) }
		for {
			if out.Drain(0, sim.Millisecond, fn) == 0 {
				select {
				case <-stop:
					return
				default:
					runtime.Gosched()
				}
			}
		}
	}()
	reuse := func(_ sim.Time, _ uint64, p *packet.Buffer) { free = append(free, p) }
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for len(free) == 0 || out.Pending() == out.Cap() {
			if back.Drain(0, sim.Millisecond, reuse) == 0 {
				runtime.Gosched()
			}
		}
		p := free[len(free)-1]
		free = free[:len(free)-1]
		out.Push(sim.Time(i), uint64(i), p)
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	if s := out.Stats(); s.Dropped != 0 || back.Stats().Dropped != 0 {
		b.Fatalf("drops on a crossing with room: %+v %+v", s, back.Stats())
	}
}

// sleeper is a receiving partition's sleep, as the pacer's: a flag and an
// eventfd in an epoll.
type sleeper struct {
	asleep atomic.Bool
	efd    int
	ep     int
	ev     [1]unix.EpollEvent
}

func newSleeper(tb testing.TB) *sleeper {
	s := &sleeper{}
	var err error
	if s.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		tb.Fatal(err)
	}
	if s.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		tb.Fatal(err)
	}
	if err := unix.EpollCtl(s.ep, unix.EPOLL_CTL_ADD, s.efd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(s.efd)}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { unix.Close(s.ep); unix.Close(s.efd) })
	return s
}

// sleep waits for c to hold a packet, up to ms milliseconds; it reports
// whether it slept (the ring was empty when it looked).
func (s *sleeper) sleep(c *crossing, ms int) bool {
	s.asleep.Store(true)
	if c.Pending() > 0 {
		s.asleep.Store(false)
		return false
	}
	unix.EpollWait(s.ep, s.ev[:], ms)
	s.asleep.Store(false)
	var buf [8]byte
	unix.Read(s.efd, buf[:])
	return true
}

// TestCrossingWakes: a receiver asleep on its eventfd is woken by a push
// (the 10 s sleep is a hang guard, not a timing assertion).
func TestCrossingWakes(t *testing.T) {
	c, _ := newCrossing("x", 4)
	s := newSleeper(t)
	c.SetWake(&s.asleep, s.efd)
	pool := packet.NewPool()
	go func() {
		for !s.asleep.Load() {
			runtime.Gosched()
		}
		c.Push(1, 0, numbered(pool, 7))
	}()
	t0 := time.Now()
	for c.Pending() == 0 && time.Since(t0) < 10*time.Second {
		s.sleep(c, 10000)
	}
	got := -1
	c.Drain(0, sim.Millisecond, func(_ sim.Time, _ uint64, b *packet.Buffer) { got = number(b) })
	if got != 7 {
		t.Fatalf("woke with packet %d after %v; want 7", got, time.Since(t0))
	}
}

// BenchmarkCrossingWake is how late a packet reaches a partition that
// sleeps: the sender, on a thread of its own, stamps each packet one
// microsecond ahead (the shipped labs' link delay: the lookahead) and
// pushes it every 50 µs, sparse traffic such as a ping's, so each one
// finds the receiver asleep in epoll_wait and wakes it. The lateness
// percentiles are what a partitioned live lab adds to a packet that
// crosses partitions when the receiver has nothing else to do; each is
// counted in its lag figures. The receiver's thread runs under the lab
// loop's default scheduling (--sched deadline, fair where refused).
//
//	go test ./labs/live -run '^$' -bench CrossingWake -benchtime 2000x -count 3
func BenchmarkCrossingWake(b *testing.B) {
	c, _ := newCrossing("x", 4096)
	s := newSleeper(b)
	c.SetWake(&s.asleep, s.efd)
	start := time.Now()
	lat := make([]time.Duration, 0, b.N)
	done := make(chan struct{})
	pol := make(chan string, 1)
	go func() {
		runtime.LockOSThread()
		defer close(done)
		// The receiver runs as a lab's loop does (mrlab up's default
		// --sched), then gives its thread back as it was.
		_, why := applyPolicy(PolicyDeadline, time.Millisecond)
		pol <- why
		defer func() { resetPolicy(); runtime.UnlockOSThread() }()
		// The receiver only measures: the sender reuses its buffers.
		fn := func(at sim.Time, _ uint64, _ *packet.Buffer) {
			lat = append(lat, max(time.Since(start)-time.Duration(at), 0))
		}
		for uint64(len(lat))+c.Stats().Dropped < uint64(b.N) {
			if c.Drain(sim.Time(time.Since(start)), sim.Millisecond, fn) == 0 {
				s.sleep(c, 1000)
			}
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pool := packet.NewPool()
	bufs := make([]*packet.Buffer, 64)
	for i := range bufs {
		bufs[i] = pool.Get(64)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for t := time.Now(); time.Since(t) < 50*time.Microsecond; {
		}
		c.Push(sim.Time(time.Since(start)+time.Microsecond), uint64(i), bufs[i%len(bufs)])
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		b.Fatalf("receiver got %d of %d packets in 10s", len(lat), b.N)
	}
	b.StopTimer()
	if len(lat) == 0 {
		b.Fatal("nothing received")
	}
	slices.Sort(lat)
	q := func(f float64) float64 { return float64(lat[min(len(lat)-1, int(f*float64(len(lat))))].Microseconds()) }
	b.ReportMetric(q(0.5), "p50-late-us")
	b.ReportMetric(q(0.99), "p99-late-us")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-late-us")
	st := c.Stats()
	b.ReportMetric(100*float64(st.LateAny)/float64(max(st.Received, 1)), "late-%")
	b.ReportMetric(float64(st.Dropped), "drops")
	b.Logf("receiver's scheduling: %s", <-pol)
}
