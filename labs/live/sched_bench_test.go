package live

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkPolicyStalls measures what each loop policy costs a thread in
// stalls: a thread under the policy watches the clock for 2 s, busy the
// whole time or 80% of each millisecond (sleeping the rest), and reports
// its longest gap between two clock reads (max-gap-ms), the gaps over
// 1 ms and its time off the CPU. Each runs in a process of its own that
// leads its session, as a background lab does (so fair gets its autogroup
// at nice -20). Run it beside whatever load the lab is to face:
//
//	sudo go test ./labs/live -run '^$' -bench PolicyStalls -benchtime 1x
//
// A busy thread under fifo is throttled for sched_rt_period_us -
// sched_rt_runtime_us (50 ms) of every second; under deadline for 50 µs
// of every millisecond; fair has no bound.
func BenchmarkPolicyStalls(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("policies need root")
	}
	for _, duty := range []float64{1, 0.8} {
		for _, pol := range []Policy{PolicyDeadline, PolicyFair, PolicyFIFO} {
			b.Run(fmt.Sprintf("%s-busy%.0f%%", pol, 100*duty), func(b *testing.B) {
				cmd := exec.Command(os.Args[0], "-test.run=^TestPolicyStallsHelper$")
				cmd.Env = append(os.Environ(), fmt.Sprintf("MRLAB_STALL_HELPER=%s,%g", pol, duty))
				cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
				out, err := cmd.CombinedOutput()
				if err != nil {
					b.Fatalf("helper: %v\n%s", err, out)
				}
				var maxGap, off time.Duration
				var over1ms int
				var inForce string
				for _, line := range strings.Split(string(out), "\n") {
					if _, err := fmt.Sscanf(line, "stalls %d %d %d %s", &maxGap, &over1ms, &off, &inForce); err == nil {
						break
					}
				}
				if inForce != string(pol) {
					b.Fatalf("policy in force %q, want %s:\n%s", inForce, pol, out)
				}
				b.ReportMetric(float64(maxGap)/1e6, "max-gap-ms")
				b.ReportMetric(float64(over1ms), "gaps>1ms")
				b.ReportMetric(float64(off)/1e6, "off-cpu-ms")
			})
		}
	}
}

// TestPolicyStallsHelper is BenchmarkPolicyStalls's thread, in its own
// process; it does nothing unless run by it.
func TestPolicyStallsHelper(t *testing.T) {
	spec := os.Getenv("MRLAB_STALL_HELPER")
	if spec == "" {
		t.Skip("run by BenchmarkPolicyStalls")
	}
	name, dutyS, _ := strings.Cut(spec, ",")
	duty, _ := strconv.ParseFloat(dutyS, 64)
	runtime.LockOSThread()
	pol, _ := applyPolicy(Policy(name), time.Millisecond)
	const dur = 2 * time.Second
	busy := time.Duration(duty * float64(time.Millisecond))
	start := time.Now()
	last, until := start, start.Add(busy)
	var maxGap, off time.Duration
	over1ms := 0
	for {
		now := time.Now()
		if g := now.Sub(last); g > 20*time.Microsecond {
			off += g
			maxGap = max(maxGap, g)
			if g > time.Millisecond {
				over1ms++
			}
		}
		if now.Sub(start) > dur {
			break
		}
		last = now
		if duty < 1 && now.After(until) {
			time.Sleep(time.Millisecond - busy)
			last = time.Now()
			until = last.Add(busy)
		}
	}
	fmt.Printf("stalls %d %d %d %s\n", maxGap, over1ms, off, pol)
}
