package live

import (
	"context"
	"fmt"
	"hash/crc32"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// BenchmarkPacedPartitions is what a second paced partition buys on this
// machine, before a lab is split across two: packets go round between
// two halves of a lab, each hop a fixed piece of work (a copy and a CRC
// of the packet's 1500 bytes, a few hundred nanoseconds, as a fabric or
// NIC event is) and one microsecond of link delay (the shipped labs'),
// with the halves on one pacer or on two, whose hops cross through
// crossings (crosspoll.go). Every hop is due a microsecond after the last,
// so the pacers run flat out: the figure is hops per wall second, with
// the process's CPU (cores) and the lateness the run counted. Pacers run
// under mrlab up's default scheduling. Compare parts=1 and parts=2 in one
// run; the machine's load moves both.
//
//	go test ./labs/live -run '^$' -bench PacedPartitions -benchtime 2000000x -count 3
func BenchmarkPacedPartitions(b *testing.B) {
	for _, parts := range []int{1, 2} {
		b.Run(fmt.Sprintf("parts=%d", parts), func(b *testing.B) { benchPaced(b, parts) })
	}
	crossSpin = 250 * sim.Microsecond
	b.Run("parts=2-spin", func(b *testing.B) { benchPaced(b, 2) })
	crossSpin = 0
}

// pacedHalf is one half of the benchmark's lab: its pacer and the
// crossing its hops leave on (nil: the other half is on the same loop).
type pacedHalf struct {
	p    *Pacer
	out  *crossing
	hops *atomic.Int64
	stop *atomic.Bool // hops end: a pacer that never catches up never returns
	buf  []byte
}

// hop is a packet's event on half h: the work, then on to the other half
// a microsecond later.
func (h *pacedHalf) hop(now sim.Time, arg any) {
	b := arg.(*packet.Buffer)
	copy(h.buf, b.Data())
	b.Data()[0] = byte(crc32.ChecksumIEEE(h.buf))
	h.hops.Add(1)
	if h.stop.Load() {
		return
	}
	if h.out == nil {
		h.p.loop.Arm(&b.Timer, now+sim.Microsecond)
		return
	}
	h.out.Push(now+sim.Microsecond, 0, b)
}

func benchPaced(b *testing.B, parts int) {
	const inFlight = 64
	var hops atomic.Int64
	var stop atomic.Bool
	halves := make([]*pacedHalf, parts)
	for i := range halves {
		p, err := NewPacer(sim.NewLoop(), packet.NewPool(), PacerConfig{})
		if err != nil {
			b.Fatal(err)
		}
		halves[i] = &pacedHalf{p: p, hops: &hops, stop: &stop, buf: make([]byte, 1500)}
	}
	if parts == 2 {
		for i, h := range halves {
			far := halves[1-i]
			c, err := newCrossing(fmt.Sprintf("%d->%d", i, 1-i), 4*inFlight)
			if err != nil {
				b.Fatal(err)
			}
			h.out = c
			if err := newCrossPoller(far.p).add(c, h.p, func(now sim.Time, pk *packet.Buffer) { far.hop(now, pk) }); err != nil {
				b.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	for _, h := range halves {
		go h.p.Run(ctx)
	}
	defer func() {
		stop.Store(true)
		cancel()
		for _, h := range halves {
			<-h.p.Done()
		}
	}()
	// Packets start on every half, each owned by its half's pool.
	for i, h := range halves {
		err := h.p.Do(ctx, func(now sim.Time) {
			for range inFlight / parts {
				pk := h.p.pool.Get(1500)
				pk.SetLen(1500)
				pk.Timer.Init(h.hop, pk)
				h.p.loop.Arm(&pk.Timer, now+sim.Microsecond)
			}
		})
		if err != nil {
			b.Fatalf("starting half %d: %v", i, err)
		}
	}
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start, h0 := time.Now(), hops.Load()
	b.ResetTimer()
	deadline := start.Add(60 * time.Second)
	for hops.Load()-h0 < int64(b.N) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	el, got := time.Since(start), hops.Load()-h0
	b.StopTimer()
	stop.Store(true)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	if got < int64(b.N) {
		b.Fatalf("%d of %d hops in %v", got, b.N, el)
	}
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	var late uint64
	var worst time.Duration
	for _, h := range halves {
		h.p.Do(ctx, func(sim.Time) {
			late += h.p.lag.EventsLate
			worst = max(worst, h.p.lag.MaxLag)
		})
	}
	var crossed, crossLate, drops uint64
	for _, h := range halves {
		if h.out != nil {
			s := h.out.Stats()
			crossed, crossLate, drops = crossed+s.Received, crossLate+s.LateAny, drops+s.Dropped
		}
	}
	b.ReportMetric(float64(got)/el.Seconds()/1e6, "Mhops/s")
	b.ReportMetric(cpu.Seconds()/el.Seconds(), "cores")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(got), "cpu-ns/hop")
	b.ReportMetric(float64(late), "late-events")
	b.ReportMetric(float64(worst.Microseconds())/1000, "max-lag-ms")
	if parts > 1 {
		b.ReportMetric(100*float64(crossLate)/float64(max(crossed, 1)), "crossed-late-%")
		b.ReportMetric(float64(drops), "drops")
	}
}
