package live

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

func TestTimingLagging(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    Timing
		want bool
	}{
		{"on time", Timing{LabTime: 2 * time.Second, WallTime: 2*time.Second + time.Millisecond, MaxLateness: 3 * time.Millisecond}, false},
		{"a stall of 2% of the run", Timing{LabTime: 2 * time.Second, WallTime: 2 * time.Second, MaxLateness: 40 * time.Millisecond}, true},
		{"wall time far past lab time", Timing{LabTime: 2 * time.Second, WallTime: 13970 * time.Millisecond, MaxLateness: 11900 * time.Millisecond}, true},
		{"the same stall in a long run", Timing{LabTime: 10 * time.Second, WallTime: 10 * time.Second, MaxLateness: 40 * time.Millisecond}, false},
	} {
		if got := tc.t.Lagging(); got != tc.want {
			t.Errorf("%s: Lagging() = %v, want %v", tc.name, got, tc.want)
		}
		if v := tc.t.Verdict(); strings.HasPrefix(v, "LAGGING") != tc.want {
			t.Errorf("%s: verdict %q", tc.name, v)
		}
	}
}

// TestPerfOnALaggingLab: a lab whose loop is kept busy for 160ms from the
// middle of a 200ms run falls at least 60ms behind: the result says so
// and its status is not "ok".
func TestPerfOnALaggingLab(t *testing.T) {
	l, eng, _, _ := upFake(t, "lagperf", 2, sim.Millisecond)
	eng.busy, eng.busyEvents = 160*time.Millisecond, 1
	r, err := l.Perf(context.Background(), PerfRequest{From: "h0", To: "h1", Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	tm := r.Timing
	t.Logf("timing %+v; status %q", tm, r.Status)
	if tm.MaxLateness < 60*time.Millisecond || !tm.Lagging() || !strings.HasPrefix(r.Status, "LAGGING") {
		t.Errorf("a run behind by >= 60ms of 200ms: lateness %v, lagging %v, status %q", tm.MaxLateness, tm.Lagging(), r.Status)
	}
	if tm.LabTime < 200*time.Millisecond || tm.WallTime < tm.LabTime-tm.MaxLateness {
		t.Errorf("lab time %v, wall time %v for a 200ms run", tm.LabTime, tm.WallTime)
	}
}

// TestPerfClientGone: a perf client that goes away (its request's context
// ends: a closed connection, Ctrl-C) cancels the run in the lab, which is
// then free for the next one.
func TestPerfClientGone(t *testing.T) {
	l, eng, _, dir := upFake(t, "goneperf", 2, sim.Millisecond)
	c := NewClient(l.Name(), socketPath(dir, l.Name()))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Perf(ctx, PerfRequest{From: "h0", To: "h1", Duration: time.Hour})
		errc <- err
	}()
	// Wait (boundedly) until the lab has the hour-long run.
	for i := 0; ; i++ {
		var on bool
		if err := l.Pacer().Do(context.Background(), func(sim.Time) { on = eng.perfOn }); err != nil {
			t.Fatal(err)
		}
		if on {
			break
		}
		if i == 1000 {
			t.Fatal("the long run never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled client: %v", err)
	}
	// The next run is accepted once the lab has heard; the bound is a
	// hang guard only.
	for i := 0; ; i++ {
		r, err := l.Perf(context.Background(), PerfRequest{From: "h0", To: "h1", Duration: 10 * time.Millisecond})
		if err == nil {
			if r.Status != "ok" && !r.Timing.Lagging() {
				t.Errorf("next run: %+v", r)
			}
			break
		}
		if !errors.Is(err, errPerfBusy) || i == 1000 {
			t.Fatalf("next run after the client went away: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLiveKeysDifferPerLab: two live labs built from the same lab file
// (same seed) hand out different rkeys, connection ids and region
// addresses: a host cannot predict another lab's, or another run's.
func TestLiveKeysDifferPerLab(t *testing.T) {
	type ids struct {
		rkey uint32
		addr uint64
		conn uint32
	}
	build := func() ids {
		eng, err := NewLabEngine(loadTestLab(t, "b2b"), EngineConfig{MaxRate: DefaultMaxRate})
		if err != nil {
			t.Fatal(err)
		}
		loop := sim.NewLoop()
		if err := eng.Start(loop, packet.NewPool(), func(int, sim.Time, []byte) {}); err != nil {
			t.Fatal(err)
		}
		nic := eng.(*labEngine).nics[0]
		mr, err := nic.AllocPD().Register(make([]byte, 4096), transport.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		c, err := nic.Dial(eng.Hosts()[1].Addr, softnic.ConnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ids{mr.RKey(), mr.Addr(), c.ID()}
	}
	a, b := build(), build()
	if a.rkey == b.rkey || a.addr == b.addr || a.conn == b.conn {
		t.Errorf("two live labs from one file: %+v and %+v; want every field different", a, b)
	}
}
