package live

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkLoopCPU is what the loop's waiting costs the machine, in
// figures the machine's load does not move much: on the loss-free default
// lab at its 1 Gbit/s cap, with iperf3 UDP at 80% of the cap from h0 to a
// host across the spines (3 s), at 10% (a rate any build reaches, so its
// CPU is at a fixed offered rate) and then idle (1 s), -kernel.reps times:
// the lab process's CPU seconds per second (getrusage: the lab; iperf3
// runs in child processes), the loop thread's alone, the fraction of the
// loop's passes that slept rather than watched the clock, and its
// lateness (worst, and the wake-up p99 the waiting rule follows), beside
// the UDP loss and where it was lost (spin.go's rule, labs/live/README.md).
//
//	sudo go test ./labs/live -run '^$' -bench LoopCPU -benchtime 1x -kernel.reps 3
func BenchmarkLoopCPU(b *testing.B) {
	p := pairUp(b, lossFreeDefault(b), 1e9, true)
	var cpu, loopCPU, slept, loss, cpu10 []float64
	// window measures one stretch of the lab's life and logs it.
	window := func(what string, run func() (string, int)) {
		before, _ := p.lab.Status(context.Background())
		c0, t0 := cpuTime(), time.Now()
		detail, pkts := run()
		c, wall := cpuTime()-c0, time.Since(t0)
		after, _ := p.lab.Status(context.Background())
		a, z := after.Lag, before.Lag
		passes := float64(a.Sleeps - z.Sleeps + a.Spins - z.Spins)
		sl := float64(a.Sleeps-z.Sleeps) / max(passes, 1)
		lc := float64(a.LoopCPU-z.LoopCPU) / float64(wall)
		b.Logf("%s: lab %.3f CPU s/s (loop thread %.3f, %.1f us a datagram; watching the clock %.3f s/s), %.0f passes/s, %.3f slept; %d of %d events late, max lag %v; wake-up p99 %v, worst %v, spin %v, sleep cost %v, batch %v; load %s; %s",
			what, float64(c)/float64(wall), lc, float64(a.LoopCPU-z.LoopCPU)/1e3/float64(max(pkts, 1)), float64(a.SpinTime-z.SpinTime)/float64(wall), passes/wall.Seconds(), sl, a.EventsLate-z.EventsLate, a.Events-z.Events, a.MaxLag, a.WakeP99, a.WakeLatency, a.Spin, a.SleepCost, a.Batch, loadAvg(), detail)
		switch what {
		case "udp 80%":
			cpu, loopCPU, slept = append(cpu, float64(c)/float64(wall)), append(loopCPU, lc), append(slept, sl)
		case "udp 10%":
			cpu10 = append(cpu10, float64(c)/float64(wall))
		}
	}
	b.ResetTimer()
	for i := 0; i < *kernelReps; i++ {
		for _, frac := range []float64{0.8, 0.1} {
			window(fmt.Sprintf("udp %.0f%%", 100*frac), func() (string, int) {
				before, _ := p.lab.Status(context.Background())
				rcv0 := udpRcvbufErrors(b, p.ls)
				r, err := iperf3Run(b, p.lc, p.ls, p.laddr, "-u", "-b", fmt.Sprintf("%.0f", frac*p.cap), "-l", "1400", "-w", "4M", "-t", "3")
				if err != nil {
					b.Fatal(err)
				}
				if frac == 0.8 {
					loss = append(loss, r.LostPercent)
				}
				after, _ := p.lab.Status(context.Background())
				return udpDropsWhere(r, before, after, udpRcvbufErrors(b, p.ls)-rcv0), r.Packets
			})
		}
		window("idle", func() (string, int) { time.Sleep(time.Second); return "", 0 })
	}
	b.StopTimer()
	b.Logf("udp 80%%: lab CPU s/s %s; loop thread %s; slept %s; loss %% %s; udp 10%%: lab CPU s/s %s", spread(cpu), spread(loopCPU), spread(slept), spread(loss), spread(cpu10))
	b.ReportMetric(median(cpu), "lab-cpu-s/s")
	b.ReportMetric(median(loopCPU), "loop-cpu-s/s")
	b.ReportMetric(median(slept), "slept-frac")
	b.ReportMetric(median(loss), "loss-%")
	b.ReportMetric(median(cpu10), "lab-cpu-s/s-at-10%")
}
