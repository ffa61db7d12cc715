package live

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/sim"
)

// upFake brings a lab up on pipe devices in a temporary run directory.
func upFake(t *testing.T, name string, n int, delay sim.Time) (*Lab, *wireEngine, []*pipeDevice, string) {
	t.Helper()
	dir := t.TempDir()
	eng := newWireEngine(n, delay)
	var pipes []*pipeDevice
	var devs []Device
	for i := 0; i < n; i++ {
		p := newPipe()
		pipes = append(pipes, p)
		devs = append(devs, p)
	}
	lab, err := Up(context.Background(), name, eng, Options{RunDir: dir, Devices: devs, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lab.Close() })
	return lab, eng, pipes, dir
}

// recv waits (boundedly: this is a hang guard, not a timing assertion) for
// a packet on a pipe.
func recv(t *testing.T, p *pipeDevice) []byte {
	t.Helper()
	select {
	case b := <-p.Out:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("no packet within 10s")
		return nil
	}
}

func TestLabForwardsAfterDelay(t *testing.T) {
	const delay = 20 * sim.Millisecond
	_, eng, pipes, _ := upFake(t, "fwd", 3, delay)
	pkt := ipPacket(eng.hosts[0].Addr, eng.hosts[2].Addr, 100)
	start := time.Now()
	pipes[0].Inject(pkt)
	got := recv(t, pipes[2])
	// The loop never runs an event before its time, so the packet cannot
	// arrive before the wire's delay has passed on the wall clock.
	if el := time.Since(start); el < time.Duration(delay) {
		t.Errorf("packet arrived after %v, before the %v wire delay", el, time.Duration(delay))
	}
	if !bytes.Equal(got, pkt) {
		t.Errorf("packet changed in transit")
	}
	select {
	case b := <-pipes[1].Out:
		t.Errorf("host 1 got a packet for host 2: % x", b[:20])
	default:
	}
}

func TestSecondUpIsAnError(t *testing.T) {
	_, _, _, dir := upFake(t, "twice", 2, sim.Millisecond)
	_, err := Up(context.Background(), "twice", newWireEngine(2, 0), Options{RunDir: dir, Devices: []Device{newPipe(), newPipe()}})
	if !errors.Is(err, ErrRunning) {
		t.Fatalf("second Up: err = %v, want ErrRunning", err)
	}
	// The running lab still answers.
	if _, err := NewClient("twice", socketPath(dir, "twice")).Status(context.Background()); err != nil {
		t.Fatalf("running lab after a refused second up: %v", err)
	}
}

func TestControlSocket(t *testing.T) {
	lab, eng, pipes, dir := upFake(t, "ctl", 2, sim.Millisecond)
	ctx := context.Background()
	c, err := Dial(dir, "ctl")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(socketPath(dir, "ctl"))
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode(); m&os.ModeSocket == 0 || m.Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", m)
	}

	pipes[0].Inject(ipPacket(eng.hosts[0].Addr, eng.hosts[1].Addr, 10))
	recv(t, pipes[1])
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Lab != "ctl" || len(st.Hosts) != 2 || st.Hosts[0].FromKernel != 1 || st.Hosts[1].ToKernel != 1 {
		t.Errorf("status = %+v", st)
	}
	if st.Lag.Events == 0 {
		t.Errorf("no events counted: %+v", st.Lag)
	}

	// Bad fault: a clear error, status 400, lab untouched.
	err = c.Fault(ctx, FaultRequest{Target: "link", Name: "nope", Action: "down"})
	var ce *clientError
	if !errors.As(err, &ce) || ce.Status != http.StatusBadRequest || !strings.Contains(err.Error(), `no link "nope"`) {
		t.Errorf("fault on unknown link: %v", err)
	}
	// Good fault: h0 down drops its packets.
	if err := c.Fault(ctx, FaultRequest{Target: "link", Name: "h0", Action: "down"}); err != nil {
		t.Fatal(err)
	}
	pipes[0].Inject(ipPacket(eng.hosts[0].Addr, eng.hosts[1].Addr, 10))
	// The packet and the next fault are concurrent inputs: wait until the
	// lab has the packet (bounded: a hang guard).
	for i := 0; ; i++ {
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Hosts[0].FromKernel == 2 {
			break
		}
		if i == 1000 {
			t.Fatal("the packet sent while the link was down never reached the lab")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Fault(ctx, FaultRequest{Target: "link", Name: "h0", Action: "up"}); err != nil {
		t.Fatal(err)
	}
	pipes[0].Inject(ipPacket(eng.hosts[0].Addr, eng.hosts[1].Addr, 11))
	if b := recv(t, pipes[1]); len(b) != 31 {
		t.Errorf("after link up got a %d-byte packet, want the 31-byte one (the 30-byte one was sent while down)", len(b))
	}
	st, _ = c.Status(ctx)
	if st.Engine.Counters["dropped"] != 1 {
		t.Errorf("dropped = %d, want 1", st.Engine.Counters["dropped"])
	}
	// Unknown fields are refused, not ignored.
	if _, err := c.Perf(ctx, PerfRequest{From: "h0", To: "h1", Op: "write"}); err == nil {
		t.Error("perf on an engine without NICs succeeded")
	}

	if err := c.Down(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lab.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{StatePath(dir, "ctl"), socketPath(dir, "ctl")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind after down (%v)", p, err)
		}
	}
	if _, err := c.Status(ctx); err == nil {
		t.Error("status answered after down")
	}
}

func TestBadLabNames(t *testing.T) {
	for _, name := range []string{"", "a/b", "a b", strings.Repeat("x", 33), "../x"} {
		if _, err := Up(context.Background(), name, newWireEngine(1, 0), Options{RunDir: t.TempDir(), Devices: []Device{newPipe()}}); err == nil {
			t.Errorf("Up(%q) succeeded", name)
		}
	}
}

// TestNoGoroutineLeak: a lab's goroutines (pacer, timerfd reader, device
// readers and writers, control server) all end with Close.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	for i := 0; i < 3; i++ {
		dir := t.TempDir()
		eng := newWireEngine(3, sim.Millisecond)
		devs := []Device{newPipe(), newPipe(), newPipe()}
		l, err := Up(context.Background(), "leak", eng, Options{RunDir: dir, Devices: devs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewClient("leak", socketPath(dir, "leak")).Status(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines before, %d after closing labs:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}
