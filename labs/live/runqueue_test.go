package live

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/sim"
)

func TestParseSchedstat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"3342444 12799552 3\n", 12799552, true},
		{"0 0 0", 0, true},
		{"3342444", 0, false},
		{"", 0, false},
		{"1 x 3", 0, false},
		{"1 -5 3", 0, false},
	} {
		got, err := parseSchedstat(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseSchedstat(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestSchedLoopStarvedWindows is the rule on its own: the loop thread's
// schedstat read at each window's end, each window's run-queue wait
// against MaxLagFraction of the window. A window's wait beyond it is
// starved whatever its lateness; an unknown reading (-1) never is.
func TestSchedLoopStarvedWindows(t *testing.T) {
	const every = time.Second
	for _, tc := range []struct {
		name        string
		samples     []time.Duration // run_delay at the start and at each window's end
		lengths     []time.Duration
		maxLate     []time.Duration
		late, starv []bool
	}{
		{"deadline at load 11-20: 6-11 ms in 2-4 s, a few ms a window",
			[]time.Duration{0, 3 * ms, 6 * ms, 9 * ms}, []time.Duration{every, every, every}, []time.Duration{ms, 0, 2 * ms},
			[]bool{false, false, false}, []bool{false, false, false}},
		{"fair at load 11-12: 0.5-1.4 s in 1.7-3.6 s, no event late",
			[]time.Duration{0, 400 * ms, 700 * ms, 705 * ms}, []time.Duration{every, every, every}, []time.Duration{0, 0, 0},
			[]bool{false, false, false}, []bool{true, true, false}},
		{"just past the limit, and a longer window that holds it",
			[]time.Duration{0, 10*ms + 1, 25*ms + 1}, []time.Duration{every, 1500 * ms}, []time.Duration{0, 0},
			[]bool{false, false}, []bool{true, false}},
		{"late and starved are separate rules",
			[]time.Duration{0, 0, 50 * ms}, []time.Duration{every, every}, []time.Duration{20 * ms, 20 * ms},
			[]bool{true, true}, []bool{false, true}},
		{"unknown (no schedstat)",
			[]time.Duration{-1, -1, -1}, []time.Duration{every, every}, []time.Duration{0, 0},
			[]bool{false, false}, []bool{false, false}},
	} {
		for i, length := range tc.lengths {
			late, starved := windowLag(tc.maxLate[i], waitSince(tc.samples[i], tc.samples[i+1]), every, length)
			if late != tc.late[i] || starved != tc.starv[i] {
				t.Errorf("%s: window %d: late %v starved %v, want %v %v", tc.name, i, late, starved, tc.late[i], tc.starv[i])
			}
		}
	}
}

const ms = time.Millisecond

// TestTimingLoopStarved: a run whose loop waited for its CPU beyond the
// limit does not claim real time kept, even with no event late (the
// fair-policy runs that dropped at mr0's ring); one within it does and
// says how long the loop waited; a late run that was also starved says
// both.
func TestTimingLoopStarved(t *testing.T) {
	for _, tc := range []struct {
		name    string
		t       Timing
		lagging bool
		prefix  string
		has     string
	}{
		{"starved, on time", Timing{LabTime: 3600 * ms, WallTime: 3601 * ms, MaxLateness: 900 * time.Microsecond, LoopWait: 1400 * ms},
			true, "LOOP STARVED", "waited 1.4s for a CPU (38.9% of the wall time"},
		{"deadline's few ms", Timing{LabTime: 3 * time.Second, WallTime: 3 * time.Second, MaxLateness: 3 * ms, LoopWait: 11 * ms},
			false, "real time kept", "loop's CPU wait 11ms"},
		{"late and starved", Timing{LabTime: 2 * time.Second, WallTime: 2 * time.Second, MaxLateness: 84 * ms, LoopWait: 500 * ms},
			true, "LAGGING", "LOOP STARVED too"},
		{"unknown wait", Timing{LabTime: 2 * time.Second, WallTime: 2 * time.Second, LoopWait: -1},
			false, "real time kept", ""},
	} {
		if got := tc.t.Lagging(); got != tc.lagging {
			t.Errorf("%s: Lagging() = %v, want %v", tc.name, got, tc.lagging)
		}
		v := tc.t.Verdict()
		if !strings.HasPrefix(v, tc.prefix) || !strings.Contains(v, tc.has) {
			t.Errorf("%s: verdict %q, want it to start %q and hold %q", tc.name, v, tc.prefix, tc.has)
		}
		if tc.t.LoopWait < 0 && strings.Contains(v, "CPU wait") {
			t.Errorf("%s: verdict %q reports an unknown wait", tc.name, v)
		}
	}
}

// TestPacerCountsLoopCPUWait: the pacer reads its own thread's run-queue
// wait. Its loop thread, at normal priority, is kept busy by a posted
// closure for 300 ms on one CPU beside two threads spinning there: the
// kernel gives each about a third, so the loop waits about 200 ms with
// no event due, which lateness cannot see. The watch over it says LOOP
// STARVED, the window counts as starved and warned, and LagStats has the
// wait. Skipped where the kernel keeps no schedstat.
func TestPacerCountsLoopCPUWait(t *testing.T) {
	if rq := openRunQueue(); rq.wait() < 0 {
		t.Skip("the kernel keeps no schedstat")
	} else {
		rq.close()
	}
	var mu sync.Mutex
	var warned []string
	p := startPacer(t, PacerConfig{Policy: PolicyNormal, WarnEvery: 50 * ms, Warn: func(m string) {
		mu.Lock()
		warned = append(warned, m)
		mu.Unlock()
	}})
	ctx := context.Background()
	var w *lagWatch
	if err := p.Do(ctx, func(sim.Time) { w = p.watch() }); err != nil {
		t.Fatal(err)
	}
	const busy = 300 * ms
	var cpu unix.CPUSet
	cpu.Set(0)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // the thread ends with the goroutine
			if err := unix.SchedSetaffinity(0, &cpu); err != nil {
				t.Error(err)
				return
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	var aff unix.CPUSet
	if err := p.Do(ctx, func(sim.Time) {
		if err := unix.SchedGetaffinity(0, &aff); err != nil {
			t.Error(err)
			return
		}
		if err := unix.SchedSetaffinity(0, &cpu); err != nil {
			t.Error(err)
			return
		}
		for end := time.Now().Add(busy); time.Now().Before(end); {
		}
		if err := unix.SchedSetaffinity(0, &aff); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	var tm Timing
	if err := p.Do(ctx, func(sim.Time) { tm = w.stop() }); err != nil {
		t.Fatal(err)
	}
	// The pass that stopped the watch rolls the window after it: the
	// next pass's closure runs once it has.
	if err := p.Do(ctx, func(sim.Time) {}); err != nil {
		t.Fatal(err)
	}
	lag := p.Lag()
	t.Logf("%s; lag stats: loop CPU wait %v (last window %v), %d starved windows, %d warnings", tm.Verdict(), lag.LoopWait, lag.LoopWaitWindow, lag.StarvedWindows, lag.Warnings)
	// A third of 300 ms is 100 ms the loop ran at most; it waited the
	// rest, less whatever the spinners lost to the rest of the machine.
	if tm.LoopWait < busy/10 || !tm.LoopStarved() || !strings.HasPrefix(tm.Verdict(), "LOOP STARVED") {
		t.Errorf("a loop that shared its CPU with two spinners for %v: %s", busy, tm.Verdict())
	}
	// The window rolled just before the watch stopped: its total holds
	// all but the last microseconds of the watch's.
	if lag.LoopWait < tm.LoopWait/2 || lag.StarvedWindows == 0 || lag.Warnings == 0 {
		t.Errorf("lag stats after a starved window: loop CPU wait %v (the watch's %v), %d starved windows, %d warnings", lag.LoopWait, tm.LoopWait, lag.StarvedWindows, lag.Warnings)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(warned) == 0 || !strings.Contains(strings.Join(warned, "\n"), "waited") {
		t.Errorf("no warning of the starved window: %q", warned)
	}
}
