package capture

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/sim"
)

// loopRunner owns a sim.Loop on its own goroutine, as the live runtime's
// pacer does: it runs posted functions between slices of lab time.
type loopRunner struct {
	loop *sim.Loop
	fns  chan func(sim.Time)
	stop chan struct{}
	done chan struct{}
}

func newLoopRunner(loop *sim.Loop) *loopRunner {
	r := &loopRunner{loop: loop, fns: make(chan func(sim.Time)), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			select {
			case fn := <-r.fns:
				fn(r.loop.Now())
			case <-r.stop:
				return
			default:
				r.loop.RunUntil(r.loop.Now() + 10*sim.Microsecond)
				time.Sleep(100 * time.Microsecond) // let HTTP goroutines in on 2 cores
			}
		}
	}()
	return r
}

func (r *loopRunner) Do(ctx context.Context, fn func(sim.Time)) error {
	done := make(chan struct{})
	select {
	case r.fns <- func(now sim.Time) { fn(now); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
		return context.Canceled
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *loopRunner) Close() { close(r.stop); <-r.done }

func TestLiveCapture(t *testing.T) {
	loop, n := steadyLab(t)
	run := newLoopRunner(loop)
	lv := NewLive(NetworkLayout(n), loop, run, nil)
	if err := run.Do(context.Background(), func(sim.Time) { n.SetObserver(lv.Observer()) }); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(lv)
	defer func() { srv.Close(); run.Close() }()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/capture?point=h0&count=50&filter=port=49152", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-pcapng" {
		t.Fatalf("status %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r, pk, err := ReadAll(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(pk) != 50 {
		t.Fatalf("%d packets, want 50", len(pk))
	}
	for i, p := range pk {
		if r.Interfaces()[p.Iface].Name != "h0:0 tx" || (i > 0 && p.Time <= pk[i-1].Time) {
			t.Fatalf("packet %d on %s at %v", i, r.Interfaces()[p.Iface].Name, p.Time)
		}
	}
	// The sink is gone once the stream ended.
	var sinks int
	run.Do(ctx, func(sim.Time) { sinks = len(lv.c.sinks) })
	if sinks != 0 {
		t.Errorf("%d sinks left", sinks)
	}

	for _, bad := range []string{"?point=h9", "?point=h0&filter=colour=red", "?point=h0&count=x", "?point="} {
		resp, err := http.Get(srv.URL + "/capture" + bad)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || len(strings.TrimSpace(string(msg))) == 0 {
			t.Errorf("%s: status %d %q", bad, resp.StatusCode, msg)
		}
	}
}

// TestLiveCaptureClientLeaves: a reader that disconnects stops its sink.
func TestLiveCaptureClientLeaves(t *testing.T) {
	loop, n := steadyLab(t)
	run := newLoopRunner(loop)
	lv := NewLive(NetworkLayout(n), loop, run, nil)
	run.Do(context.Background(), func(sim.Time) { n.SetObserver(lv.Observer()) })
	srv := httptest.NewServer(lv)
	defer func() { srv.Close(); run.Close() }()

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/capture?point=p0-leaf0", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	if _, err := io.ReadAtLeast(resp.Body, buf, 1000); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var sinks int
		run.Do(context.Background(), func(sim.Time) { sinks = len(lv.c.sinks) })
		if sinks == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sink still open after the client left")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
