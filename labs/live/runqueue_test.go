package live

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/sim"
)

func TestParseSchedstat(t *testing.T) {
	line := []byte("3342444 12799552 3\n")
	if n := testing.AllocsPerRun(100, func() { parseSchedstat(line) }); n != 0 {
		t.Errorf("parseSchedstat allocates %.0f times a line: the loop reads one every 10 ms", n)
	}
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
		{"  7\t42", 42, true},
		{"1 99999999999999999999 3", 0, false},
	} {
		got, err := parseSchedstat([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseSchedstat(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestSchedLoopStarvedWindows is the rule on its own: a window's
// run-queue wait (the loop thread's schedstat at its start and end), its
// largest growth between the 10 ms samples, and the looks cut in it,
// against MaxLagFraction of the window. One wait that may pass the limit
// starves it; so does a total past it while input stayed queued (cut
// looks); a total past it in waits too short to matter, with the loop
// draining its inputs, does not. Unknown readings (-1) never starve.
func TestSchedLoopStarvedWindows(t *testing.T) {
	const every = time.Second
	for _, tc := range []struct {
		name          string
		from, to      time.Duration // schedstat's run_delay at the window's start and end
		wmax          time.Duration
		cut           uint64
		length        time.Duration
		maxLate       time.Duration
		late, starved bool
	}{
		{"deadline, 60k wake-ups: 13 ms in sub-microsecond waits, nothing queued", 5 * ms, 18 * ms, 300 * time.Microsecond, 0, every, ms, false, false},
		{"the same total with looks cut: input queued across the waits", 5 * ms, 18 * ms, 300 * time.Microsecond, 12, every, ms, false, true},
		{"fair at load 11-12: 400 ms of waits while reads fell behind", 0, 400 * ms, 4 * ms, 900, every, 0, false, true},
		{"one wait of 15 ms, no look cut", 0, 16 * ms, 15 * ms, 0, every, 0, false, true},
		{"a 15 ms wait in a window 2 s long", 0, 16 * ms, 15 * ms, 0, 2 * every, 0, false, false},
		{"just at the limit", 0, 10 * ms, 10 * ms, 3, every, 0, false, false},
		{"late but not starved", 0, ms, 100 * time.Microsecond, 0, every, 20 * ms, true, false},
		{"late and starved", 0, 60 * ms, 30 * ms, 5, every, 20 * ms, true, true},
		{"unknown (no schedstat)", -1, -1, -1, 40, every, 0, false, false},
	} {
		late, starved := windowLag(tc.maxLate, waitSince(tc.from, tc.to), tc.wmax, tc.cut, every, tc.length)
		if late != tc.late || starved != tc.starved {
			t.Errorf("%s: late %v starved %v, want %v %v", tc.name, late, starved, tc.late, tc.starved)
		}
	}
}

const ms = time.Millisecond

// TestTimingLoopStarved: a run whose loop waited for its CPU beyond the
// limit does not claim real time kept, even with no event late (the
// fair-policy runs that dropped at mr0's ring), though it is not Lagging
// (a bound, not a measured distortion); one within it does and says how
// long the loop waited; a late run that was also starved says both.
func TestTimingLoopStarved(t *testing.T) {
	for _, tc := range []struct {
		name    string
		t       Timing
		lagging bool
		prefix  string
		has     string
	}{
		{"starved, on time", Timing{LabTime: 3600 * ms, WallTime: 3601 * ms, MaxLateness: 900 * time.Microsecond, LoopWait: 1400 * ms, LoopWaitMax: 6 * ms, LooksCut: 700},
			false, "LOOP STARVED", "waited 1.4s for a CPU (38.9% of the wall time, at most 6ms at once; 700 looks left input queued), so what the hosts' kernels and verbs clients handed it may have waited up to 1.4s"},
		{"one long wait", Timing{LabTime: time.Second, WallTime: time.Second, LoopWait: 40 * ms, LoopWaitMax: 30 * ms},
			false, "LOOP STARVED", "may have waited up to 30ms"},
		{"deadline's many tiny waits", Timing{LabTime: 3 * time.Second, WallTime: 3 * time.Second, MaxLateness: 3 * ms, LoopWait: 40 * ms, LoopWaitMax: ms / 2},
			false, "real time kept", "loop's CPU wait 40ms (at most 500µs at once; 0 looks"},
		{"late and starved", Timing{LabTime: 2 * time.Second, WallTime: 2 * time.Second, MaxLateness: 84 * ms, LoopWait: 500 * ms, LoopWaitMax: 5 * ms, LooksCut: 1},
			true, "LAGGING", "LOOP STARVED too"},
		{"unknown wait", Timing{LabTime: 2 * time.Second, WallTime: 2 * time.Second, LoopWait: -1, LoopWaitMax: -1, LooksCut: 9},
			false, "real time kept", ""},
	} {
		if tc.t.LoopStarved() != (tc.prefix == "LOOP STARVED" || strings.Contains(tc.has, "STARVED")) {
			t.Errorf("%s: LoopStarved() = %v", tc.name, tc.t.LoopStarved())
		}
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
// STARVED (not lagging: nothing was late), the window counts as starved
// and is logged, and LagStats has the wait. Skipped where the kernel keeps no schedstat.
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
	var stop atomic.Bool
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // the thread ends with the goroutine
			if err := unix.SchedSetaffinity(0, &cpu); err != nil {
				t.Error(err)
				return
			}
			for !stop.Load() {
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
	stop.Store(true)
	wg.Wait()
	var tm Timing
	if err := p.Do(ctx, func(sim.Time) { tm = w.stop() }); err != nil {
		t.Fatal(err)
	}
	// The window rolls on a pass once WarnEvery has gone by since the
	// last roll; on a busy machine the pass after the watch stopped can
	// come first. Passes, 50 ms apart, until one has rolled it (at most
	// 2 s).
	var lag LagStats
	for range 40 {
		if err := p.Do(ctx, func(sim.Time) {}); err != nil {
			t.Fatal(err)
		}
		if lag = p.Lag(); lag.StarvedWindows > 0 {
			break
		}
		time.Sleep(50 * ms)
	}
	t.Logf("%s; lag stats: loop CPU wait %v (last window %v, at most %v at once), %d starved windows, %d warnings", tm.Verdict(), lag.LoopWait, lag.LoopWaitWindow, lag.LoopWaitMax, lag.StarvedWindows, lag.Warnings)
	// A third of 300 ms is 100 ms the loop ran at most; it waited the
	// rest, less whatever the spinners lost to the rest of the machine.
	if tm.LoopWait < busy/10 || !tm.LoopStarved() || !strings.HasPrefix(tm.Verdict(), "LOOP STARVED") {
		t.Errorf("a loop that shared its CPU with two spinners for %v: %s", busy, tm.Verdict())
	}
	// The window rolled just before the watch stopped: its total holds
	// all but the last microseconds of the watch's.
	if lag.LoopWait < tm.LoopWait/2 || lag.StarvedWindows == 0 || lag.Warnings != 0 || tm.Lagging() {
		t.Errorf("lag stats after a starved window, no event late: loop CPU wait %v (the watch's %v), %d starved windows, %d warnings (want 0: nothing was late), watch lagging %v", lag.LoopWait, tm.LoopWait, lag.StarvedWindows, lag.Warnings, tm.Lagging())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(warned) == 0 || !strings.Contains(strings.Join(warned, "\n"), "waited") {
		t.Errorf("no warning of the starved window: %q", warned)
	}
}
