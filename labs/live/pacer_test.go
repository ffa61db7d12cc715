package live

import (
	"context"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

func startPacer(t *testing.T, cfg PacerConfig) *Pacer {
	t.Helper()
	p, err := NewPacer(sim.NewLoop(), packet.NewPool(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go p.Run(ctx)
	t.Cleanup(func() { cancel(); <-p.Done() })
	return p
}

// TestPacerRunsEventsNotBeforeTheirTime arms events through Do and checks
// each ran at or after its virtual time on the wall clock, in order.
func TestPacerRunsEventsNotBeforeTheirTime(t *testing.T) {
	p := startPacer(t, PacerConfig{})
	type ran struct {
		at   sim.Time
		wall time.Duration
	}
	var mu sync.Mutex
	var got []ran
	done := make(chan struct{})
	var t0 time.Time
	err := p.Do(context.Background(), func(now sim.Time) {
		t0 = p.start // wall time of virtual 0: the pacer's own clock
		for _, d := range []sim.Time{5 * sim.Millisecond, 1 * sim.Millisecond, 3 * sim.Millisecond, 200 * sim.Microsecond} {
			at := now + d
			p.Loop().At(at, func(now sim.Time) {
				mu.Lock()
				got = append(got, ran{at: now, wall: time.Since(t0)})
				n := len(got)
				mu.Unlock()
				if n == 4 {
					close(done)
				}
			})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("events did not run")
	}
	for i, r := range got {
		if i > 0 && r.at < got[i-1].at {
			t.Errorf("event %d at %v ran after one at %v", i, r.at, got[i-1].at)
		}
		// wall is read after the pacer's clock said the event was due,
		// on the same clock, so wall >= at holds exactly if the pacer
		// never runs early. (Deriving virtual 0 from time.Now in Do
		// placed it up to a microsecond late, which a loop that watches
		// the clock through gaps of up to 200 us turned into false
		// "early"s.)
		if r.wall < time.Duration(r.at) {
			t.Errorf("event for %v ran at wall %v: early", r.at, r.wall)
		}
	}
}

// TestPacerCountsLag makes one event hog the loop and checks the next one
// is counted late and the warning fires.
func TestPacerCountsLag(t *testing.T) {
	warned := make(chan string, 10)
	p := startPacer(t, PacerConfig{LagThreshold: time.Millisecond, WarnEvery: time.Millisecond, Warn: func(m string) {
		select {
		case warned <- m:
		default:
		}
	}})
	done := make(chan struct{})
	p.Do(context.Background(), func(now sim.Time) {
		p.Loop().At(now+sim.Millisecond, func(sim.Time) { time.Sleep(20 * time.Millisecond) })
		p.Loop().At(now+2*sim.Millisecond, func(sim.Time) {})
		p.Loop().At(now+30*sim.Millisecond, func(sim.Time) { close(done) })
	})
	<-done
	// The stats are published every 10ms of loop time; post a no-op later.
	time.Sleep(20 * time.Millisecond)
	p.Do(context.Background(), func(sim.Time) {})
	time.Sleep(20 * time.Millisecond)
	p.Do(context.Background(), func(sim.Time) {})
	lag := p.Lag()
	if lag.EventsLate < 1 || lag.MaxLag < 10*time.Millisecond {
		t.Errorf("lag = %+v, want at least one event late by >= 10ms", lag)
	}
	select {
	case m := <-warned:
		t.Logf("warning: %s", m)
	case <-time.After(5 * time.Second):
		t.Error("no 'cannot keep real time' warning")
	}
}

func TestPostAfterStop(t *testing.T) {
	p, err := NewPacer(sim.NewLoop(), packet.NewPool(), PacerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go p.Run(ctx)
	cancel()
	<-p.Done()
	if err := p.Post(func(sim.Time) {}); err != ErrStopped {
		t.Errorf("Post after stop: %v", err)
	}
	if err := p.Do(context.Background(), func(sim.Time) {}); err != ErrStopped {
		t.Errorf("Do after stop: %v", err)
	}
}

// TestKernelPathAllocs: handing a packet from an input slot into the loop
// and from the loop to an output allocates nothing.
func TestKernelPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under -race (the detector allocates)")
	}
	for _, inline := range []bool{false, true} {
		kernelPathAllocs(t, inline)
	}
}

// kernelPathAllocs is TestKernelPathAllocs with the loop handing batches
// to a writer (inline false) or writing them itself.
func kernelPathAllocs(t *testing.T, inline bool) {
	p, err := NewPacer(sim.NewLoop(), packet.NewPool(), PacerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	dev := &countDevice{}
	out := p.newOutput(dev, 64, packet.MaxSize, inline)
	in := p.newInput(8, 0, packet.MaxSize, func(_ sim.Time, b *packet.Buffer) {
		out.Send(b.Data())
		b.Free()
	})
	pkt := ipPacket(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), 1400)
	allocs := testing.AllocsPerRun(1000, func() {
		b := <-in.free
		for i := range b.bufs {
			b.sizes[i] = copy(b.bufs[i], pkt)
		}
		b.n = len(b.bufs)
		p.inject(b)
		in.free <- b
		p.flush()
		for len(out.queue) > 0 {
			ob := <-out.queue
			out.queued.Add(-int64(len(ob.ends)))
			ob.data, ob.ends = ob.data[:0], ob.ends[:0]
			out.free <- ob
		}
	})
	if allocs != 0 {
		t.Errorf("kernel path (inline writes %v): %v allocs per packet, want 0", inline, allocs)
	}
	if inline && dev.n.Load() == 0 {
		t.Errorf("inline writes: the loop wrote nothing")
	}
}

// TestDirectReadAllocs: the loop reading a kernel itself (direct.go),
// injecting its packets and writing them to another kernel allocates
// nothing, and it reads only while the device polls readable.
func TestDirectReadAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under -race (the detector allocates)")
	}
	p := idlePacer(t)
	pkt := ipPacket(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), 1400)
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	src := &pollCountDevice{fd: efd}
	src.read = func(bufs [][]byte, sizes []int, offset int) (int, error) {
		for i := range bufs {
			sizes[i] = copy(bufs[i][offset:], pkt)
		}
		return len(bufs), nil
	}
	dst := &countDevice{}
	out := p.newOutput(dst, 64, packet.MaxSize, true)
	readInto(t, p, src, func(b []byte) { out.Send(b) })
	if p.pollInputs() {
		t.Fatal("the loop read a device that does not poll readable")
	}
	unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	allocs := testing.AllocsPerRun(1000, func() {
		if !p.pollInputs() {
			t.Fatal("the loop did not read a readable device")
		}
		p.flush()
	})
	if allocs != 0 {
		t.Errorf("direct read: %v allocs per batch, want 0", allocs)
	}
	if dst.n.Load() == 0 {
		t.Error("nothing reached the other kernel")
	}
}

// pollCountDevice is a countDevice the loop reads itself: it polls as fd
// does.
type pollCountDevice struct {
	countDevice
	fd int
}

func (d *pollCountDevice) PollFD() (int, error) { return d.fd, nil }

// countDevice is a Device whose writes only count; reads call read.
type countDevice struct {
	n    atomic.Int64
	done chan struct{}
	read func(bufs [][]byte, sizes []int, offset int) (int, error)
}

func (d *countDevice) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	return d.read(bufs, sizes, offset)
}
func (d *countDevice) Write(b [][]byte, _ int) (int, error) {
	d.n.Add(int64(len(b)))
	return len(b), nil
}
func (d *countDevice) BatchSize() int { return 32 }
func (d *countDevice) MTU() int       { return 1500 }
func (d *countDevice) Close() error   { return nil }

// BenchmarkKernelHandoff pushes packets through the whole kernel-side path
// of a live host: a reader goroutine fills input slots, the loop goroutine
// copies each into its pool and hands it to the sink, which sends it to an
// output whose writer goroutine writes it to a device. The "chan" baseline
// is the bare cost of handing an int between two goroutines, measured in
// the same run.
func BenchmarkKernelHandoff(b *testing.B) {
	b.Run("chan-baseline", func(b *testing.B) {
		ch := make(chan int, 1024)
		done := make(chan struct{})
		go func() {
			for range ch {
			}
			close(done)
		}()
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			ch <- i
		}
		close(ch)
		<-done
	})
	b.Run("pacer", func(b *testing.B) {
		p, err := NewPacer(sim.NewLoop(), packet.NewPool(), PacerConfig{})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go p.Run(ctx)
		defer func() { cancel(); <-p.Done() }()
		dev := &countDevice{done: make(chan struct{})}
		out := p.newOutput(dev, 1024, 1500, false)
		go out.WriteTo(dev)
		in := p.newInput(dev.BatchSize(), 0, 1500, func(_ sim.Time, pk *packet.Buffer) {
			for !out.Send(pk.Data()) {
				runtime.Gosched() // the benchmark wants every packet through
			}
			pk.Free()
		})
		pkt := ipPacket(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), 1400)
		left := b.N
		b.ReportAllocs()
		b.SetBytes(int64(len(pkt)))
		b.ResetTimer()
		dev.read = func(bufs [][]byte, sizes []int, offset int) (int, error) {
			if left == 0 {
				<-dev.done
				return 0, os.ErrClosed
			}
			k := min(left, len(bufs))
			for i := range k {
				sizes[i] = copy(bufs[i][offset:], pkt)
			}
			left -= k
			return k, nil
		}
		go in.readFrom(dev)
		for dev.n.Load() < int64(b.N) {
			runtime.Gosched()
		}
		b.StopTimer()
		close(dev.done)
	})
}

// TestWarnOnlyWhenFiguresAreOff: a window in which a few events ran a few
// milliseconds late (a busy machine preempting an idle lab) warns nobody;
// one in which the lab fell behind by more than 1% of the window does.
func TestWarnOnlyWhenFiguresAreOff(t *testing.T) {
	var warned []string
	p, err := NewPacer(sim.NewLoop(), packet.NewPool(), PacerConfig{WarnEvery: time.Second, Warn: func(m string) { warned = append(warned, m) }})
	if err != nil {
		t.Fatal(err)
	}
	p.winLate, p.winRun, p.winMax = 3, 3, 3*time.Millisecond // idle: every event late, by 3ms
	p.checkWarn(sim.Second)
	if len(warned) != 0 || p.lag.Warnings != 0 {
		t.Errorf("idle lab 3ms late warned: %q", warned)
	}
	p.winLate, p.winRun, p.winMax = 5, 100000, 25*time.Millisecond
	p.checkWarn(2 * sim.Second)
	if len(warned) != 1 || p.lag.Warnings != 1 || !strings.Contains(warned[0], "25ms behind") {
		t.Errorf("lab 25ms behind in a second: warnings %q", warned)
	}
}

// TestWarnNamesLongestStep: a window in which one piece of the loop's
// work held it up warns naming that step and how long it took.
func TestWarnNamesLongestStep(t *testing.T) {
	warns := make(chan string, 16)
	p := startPacer(t, PacerConfig{WarnEvery: 50 * time.Millisecond, Warn: func(m string) {
		select {
		case warns <- m:
		default:
		}
	}})
	const hold = 60 * time.Millisecond
	err := p.Do(context.Background(), func(now sim.Time) {
		p.Loop().At(now+sim.Millisecond, func(sim.Time) {})
		time.Sleep(hold) // a posted closure holding up the loop
	})
	if err != nil {
		t.Fatal(err)
	}
	// Events keep the loop's warning check running.
	for range 20 {
		p.Do(context.Background(), func(now sim.Time) { p.Loop().At(now+sim.Millisecond, func(sim.Time) {}) })
		time.Sleep(10 * time.Millisecond)
		select {
		case m := <-warns:
			if !strings.Contains(m, "its longest step ") || !strings.Contains(m, ": posted work and kernel input") {
				t.Fatalf("warning %q does not name the posted work as the longest step", m)
			}
			i := strings.Index(m, "its longest step ")
			if i < 0 {
				t.Fatalf("warning %q has no longest step", m)
			}
			f := strings.Fields(m[i+len("its longest step "):])
			step, err := time.ParseDuration(strings.TrimSuffix(f[0], ":"))
			if err != nil || step < hold {
				t.Fatalf("warning %q: longest step %v (%v), want at least %v", m, step, err, hold)
			}
			return
		default:
		}
	}
	t.Fatal("no warning after the loop was held up")
}
