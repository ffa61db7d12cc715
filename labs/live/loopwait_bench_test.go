package live

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// BenchmarkLoopWait is what the loop's waiting costs with nothing but
// events to run (no host kernels, no iperf3: the machine's load moves it
// less than BenchmarkLoopCPU): the events of 1400-byte datagrams crossing
// four 1 Gbit/s hops (five events 11.2 µs apart, each datagram's) at 10%
// and 80% of the rate, 2 s each, under the default policy. It reports the
// loop thread's CPU seconds per second, the fraction of its passes that
// slept and its worst lateness.
//
//	sudo go test ./labs/live -run '^$' -bench LoopWait -benchtime 1x
func BenchmarkLoopWait(b *testing.B) {
	const ser = 11200 * sim.Nanosecond // 1400 bytes at 1 Gbit/s
	for _, frac := range []float64{0.1, 0.8} {
		b.Run(fmt.Sprintf("%.0fpct", 100*frac), func(b *testing.B) {
			p, err := NewPacer(sim.NewLoop(), packet.NewPool(), PacerConfig{})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			go p.Run(ctx)
			defer func() { cancel(); <-p.Done() }()
			gap := sim.Time(float64(ser) / frac)
			var arrive func(now sim.Time)
			arrive = func(now sim.Time) {
				for k := sim.Time(1); k <= 4; k++ {
					p.Loop().At(now+k*ser, func(sim.Time) {})
				}
				p.Loop().At(now+gap, arrive)
			}
			// A second to measure the wake-ups, then the window.
			p.Do(ctx, func(now sim.Time) { p.Loop().At(now+gap, arrive) })
			time.Sleep(1100 * time.Millisecond)
			z := p.Lag()
			time.Sleep(2 * time.Second)
			a := p.Lag()
			passes := float64(a.Sleeps - z.Sleeps + a.Spins - z.Spins)
			cpu := float64(a.LoopCPU-z.LoopCPU) / float64(2*time.Second)
			slept := float64(a.Sleeps-z.Sleeps) / max(passes, 1)
			b.Logf("%.0f%%: loop thread %.3f CPU s/s, %.0f passes/s, %.3f slept, watching the clock %.3f s/s; %d of %d events late, worst %v; wake-up p99 %v, spin %v, batch %v, sleep cost %v; load %s; %.40s",
				100*frac, cpu, passes/2, slept, float64(a.SpinTime-z.SpinTime)/float64(2*time.Second), a.EventsLate-z.EventsLate, a.Events-z.Events, a.MaxLag, a.WakeP99, a.Spin, a.Batch, a.SleepCost, loadAvg(), a.Priority)
			b.ReportMetric(cpu, "loop-cpu-s/s")
			b.ReportMetric(slept, "slept-frac")
			b.ReportMetric(float64(a.MaxLag)/1e3, "max-lag-us")
		})
	}
}
