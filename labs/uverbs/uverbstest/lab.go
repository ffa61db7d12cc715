// Package uverbstest runs verbs endpoints on an in-process lab for tests:
// two NICs back to back on a real-time pacer, each serving its endpoint
// on an abstract socket of the test's own network namespace, so a test
// can drive them with package verbs without root or namespaces.
package uverbstest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/verbsabi"
	"github.com/mrlab/mrlab/labs/live"
	"github.com/mrlab/mrlab/labs/uverbs"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

// Lab is a running in-process lab with two hosts, h0 and h1.
type Lab struct {
	// Net is the fabric: two hosts with a direct link per plane,
	// "p<plane>-h0-h1". Touch it only on the loop (Pacer.Do).
	Net   *fabric.Network
	Pacer *live.Pacer
	Set   *uverbs.Set
	NICs  []*softnic.NIC
	// Endpoints are the hosts' endpoint names (verbs.OpenEndpoint).
	Endpoints []string
	Hosts     []string

	once sync.Once
	stop func()
}

var seq atomic.Int64

// Options tune Start.
type Options struct {
	// Rate is the links' rate (default 1 Gbit/s, what a live lab runs).
	Rate float64
	// Limits are the endpoints' per-process limits (zero: defaults).
	Limits verbsabi.Limits
	// MaxHostQPs is each endpoint's QP limit across its clients (zero:
	// uverbs.DefaultMaxHostQPs).
	MaxHostQPs int
	// Trace receives the endpoints' and transports' trace lines.
	Trace func(host, line string)
	// Netns, if set, is the namespace the endpoints admit (default: the
	// test's own).
	Netns *uverbs.NetnsID
	// Quiet drops the endpoints' log lines (a fuzz target's t cannot take
	// them from the lab's goroutines).
	Quiet bool
}

// Start brings the lab up; t.Cleanup stops it and checks that every
// client's resources were released.
func Start(t testing.TB, o Options) *Lab {
	t.Helper()
	if o.Rate == 0 {
		o.Rate = 1e9
	}
	topo, err := fabric.BackToBack(fabric.BackToBackParams{Planes: 2, Link: fabric.LinkParams{Rate: o.Rate}})
	if err != nil {
		t.Fatal(err)
	}
	loop := sim.NewLoop()
	pool := packet.NewPool()
	net, err := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	opts := workload.NICOptions{}
	if o.Trace != nil {
		opts.TraceFor = func(host string) transport.Tracer { return tracer{host, o.Trace} }
	}
	cl, err := workload.NewCluster("uverbstest", loop, pool, net, 1, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The live default policy (deadline): the clients' tests measure the
	// verbs ABI's own economy (no doorbell while the loop is awake), which
	// needs a loop that wakes when its timer fires. 800 64 KiB WRITEs
	// (TestSteadyStateNoSyscalls) at load 19-20 rang 5-14 doorbells under
	// deadline, 4-40 under fifo and 97-145 under fair
	// (labs/live/README.md).
	p, err := live.NewPacer(loop, pool, live.PacerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	set := uverbs.NewSet(p)
	p.SetPoller(set)
	ns, err := uverbs.NetnsOf("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if o.Netns != nil {
		ns = *o.Netns
	}
	l := &Lab{Net: net, Pacer: p, Set: set, NICs: cl.NICs, Hosts: cl.Hosts}
	n := seq.Add(1)
	for i, nic := range cl.NICs {
		name := fmt.Sprintf("mrlab-verbs-test-%d-%d-%s", os.Getpid(), n, cl.Hosts[i])
		ln, err := uverbs.Listen(name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := uverbs.Config{Host: cl.Hosts[i], NIC: nic, Netns: ns, Limits: o.Limits, MaxHostQPs: o.MaxHostQPs, Logf: t.Logf, Watch: l.watch}
		if o.Quiet {
			cfg.Logf = nil
		}
		if o.Trace != nil {
			cfg.Trace = tracer{cl.Hosts[i], o.Trace}
		}
		if _, err := set.Add(cfg, ln); err != nil {
			t.Fatal(err)
		}
		l.Endpoints = append(l.Endpoints, name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		p.Run(ctx)
		close(done)
	}()
	l.stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("pacer did not stop")
		}
		set.Close()
	}
	t.Cleanup(l.Stop)
	return l
}

// Stop stops the lab as a live lab stops: the loop first, then the
// endpoints, which disconnect their clients and release what they held.
func (l *Lab) Stop() { l.once.Do(l.stop) }

// watch is a WATCH from the pacer's published figures: enough for tests.
func (l *Lab) watch() func() uverbs.Timing {
	lab0, wall0, lag0 := l.Pacer.Now(), time.Now(), l.Pacer.Lag()
	return func() uverbs.Timing {
		lag := l.Pacer.Lag()
		t := uverbs.Timing{LabTime: time.Duration(l.Pacer.Now() - lab0), WallTime: time.Since(wall0), MaxLateness: lag.Behind,
			Events: lag.Events - lag0.Events, EventsLate: lag.EventsLate - lag0.EventsLate, Limit: 0.01}
		lim := time.Duration(t.Limit * float64(t.LabTime))
		t.Lagging = t.MaxLateness > lim || t.WallTime-t.LabTime > lim
		return t
	}
}

// Status returns the endpoints' clients, read on the loop.
func (l *Lab) Status(t testing.TB) map[string][]uverbs.ClientStatus {
	t.Helper()
	var s map[string][]uverbs.ClientStatus
	if err := l.Pacer.Do(context.Background(), func(sim.Time) { s = l.Set.Status() }); err != nil {
		t.Fatal(err)
	}
	return s
}

// Do runs fn on the loop.
func (l *Lab) Do(t testing.TB, fn func(now sim.Time)) {
	t.Helper()
	if err := l.Pacer.Do(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}

// WaitNoClients waits until no endpoint has a client (a closed or killed
// client's teardown runs on the loop shortly after its socket closes).
func (l *Lab) WaitNoClients(t testing.TB, limit time.Duration) {
	t.Helper()
	end := time.Now().Add(limit)
	for {
		n := 0
		for _, cs := range l.Status(t) {
			n += len(cs)
		}
		if n == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%d verbs clients still open after %v: %+v", n, limit, l.Status(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type tracer struct {
	host string
	fn   func(host, line string)
}

func (tr tracer) Tracef(now sim.Time, conn uint32, format string, args ...any) {
	tr.fn(tr.host, fmt.Sprintf("%v conn %d: ", now, conn)+fmt.Sprintf(format, args...))
}
