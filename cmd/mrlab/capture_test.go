package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs/live"
	"github.com/mrlab/mrlab/observe/capture"
	"github.com/mrlab/mrlab/observe/prototrace"
	"github.com/mrlab/mrlab/workload/udpgen"
)

// fakeLab serves a live lab's control socket with the capture endpoint, a
// fabric with steady traffic h0 -> h2 running on a loop goroutine, and a
// state file naming the socket, so the client side runs for real.
type fakeLab struct {
	dir  string
	stop func()
}

type loopRunner struct {
	loop *sim.Loop
	fns  chan func(sim.Time)
	quit chan struct{}
	done chan struct{}
}

func (r *loopRunner) Do(ctx context.Context, fn func(sim.Time)) error {
	fin := make(chan struct{})
	select {
	case r.fns <- func(now sim.Time) { fn(now); close(fin) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
		return live.ErrStopped
	}
	select {
	case <-fin:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func startFakeLab(t *testing.T, handlers map[string]http.Handler) *fakeLab {
	t.Helper()
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 2, Spines: 1, HostsPerLeaf: 2})
	if err != nil {
		t.Fatal(err)
	}
	loop := sim.NewLoop()
	pool := packet.NewPool()
	n, err := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := udpgen.AttachAll(n, pool, loop)
	if err != nil {
		t.Fatal(err)
	}
	hosts[0].AddFlow(udpgen.FlowSpec{Dst: hosts[2].Addr(), SrcPort: 49152, DstPort: 53791, Size: 1500, Rate: 1e9, ECN: header.ECNECT0})
	hosts[0].Start(0)

	r := &loopRunner{loop: loop, fns: make(chan func(sim.Time)), quit: make(chan struct{}), done: make(chan struct{})}
	lv := capture.NewLive(capture.NetworkLayout(n), loop, r, nil)
	n.SetObserver(lv.Observer())
	go func() {
		defer close(r.done)
		for {
			select {
			case fn := <-r.fns:
				fn(loop.Now())
			case <-r.quit:
				return
			default:
				loop.RunUntil(loop.Now() + 20*sim.Microsecond)
				time.Sleep(200 * time.Microsecond)
			}
		}
	}()

	dir, err := os.MkdirTemp("", "mrl")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "t1.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /capture", lv)
	for p, h := range handlers {
		mux.Handle(p, h)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	st, _ := json.Marshal(live.State{Lab: "t1", PID: os.Getpid(), Socket: sock})
	if err := os.WriteFile(live.StatePath(dir, "t1"), st, 0o644); err != nil {
		t.Fatal(err)
	}
	fl := &fakeLab{dir: dir}
	fl.stop = func() {
		srv.Close()
		lv.Close()
		close(r.quit)
		<-r.done
		os.RemoveAll(dir)
	}
	t.Cleanup(fl.stop)
	return fl
}

func TestCaptureCommand(t *testing.T) {
	fl := startFakeLab(t, nil)
	out := filepath.Join(t.TempDir(), "h0.pcapng")
	code, _, errs := runCLI(t, "capture", "--run-dir", fl.dir, "h0", "-w", out, "-c", "25", "--filter", "port=49152")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "capture h0 of lab t1: 25 packets to "+out) {
		t.Errorf("stderr: %q", errs)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	r, pk, err := capture.ReadAll(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if len(pk) != 25 {
		t.Fatalf("%d packets in the file, want 25", len(pk))
	}
	for _, p := range pk {
		if r.Interfaces()[p.Iface].Name != "h0:0 tx" {
			t.Errorf("packet on %s", r.Interfaces()[p.Iface].Name)
		}
	}

	// To stdout, bounded by time: the file is whole blocks only.
	code, stdout, errs := runCLI(t, "capture", "--run-dir", fl.dir, "--lab", "t1", "p0-leaf1", "-w", "-", "-d", "300ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if _, pk, err := capture.ReadAll(strings.NewReader(stdout)); err != nil || len(pk) == 0 {
		t.Errorf("stdout capture: %d packets, %v", len(pk), err)
	}
}

func TestCaptureCommandErrors(t *testing.T) {
	fl := startFakeLab(t, nil)
	empty := t.TempDir()
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"capture", "--run-dir", fl.dir, "h9", "-w", "-"}, 2, `no host, switch or link named "h9"`},
		{[]string{"capture", "--run-dir", fl.dir, "h0"}, 2, "-w FILE"},
		{[]string{"capture", "--run-dir", fl.dir, "h0:x", "-w", "-"}, 2, "want a port number"},
		{[]string{"capture", "--run-dir", fl.dir, "h0", "-w", "-", "--filter", "colour=red"}, 2, "unknown key"},
		{[]string{"capture", "--run-dir", fl.dir}, 2, "want one capture point"},
		{[]string{"capture", "--run-dir", empty, "h0", "-w", "-"}, 1, "no lab is running"},
	}
	for _, tc := range cases {
		code, _, errs := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args[3:], code, errs, tc.code, tc.want)
		}
	}
}

func TestCaptureCommandPrintsDissector(t *testing.T) {
	code, out, _ := runCLI(t, "capture", "--dissector")
	if code != 0 || !strings.Contains(out, `Proto("metaroce"`) {
		t.Errorf("exit %d, %d bytes", code, len(out))
	}
}

func TestTraceCommand(t *testing.T) {
	hub := prototrace.NewHub(nil, nil)
	fl := startFakeLab(t, map[string]http.Handler{"GET /trace": hub})
	go func() {
		for hub.Readers() == 0 {
			time.Sleep(time.Millisecond)
		}
		tr := hub.Host("h3", func(uint32) string { return "h7" })
		tr.Tracef(12301, 4, "path %d: SACK hole psn %d, retransmit", 9, 1834)
		tr.Tracef(15020, 4, "path %d entropy %d -> %d after %d losses", 2, 49213, 50877, 3)
		hub.Close()
	}()
	code, out, errs := runCLI(t, "trace", "--run-dir", fl.dir, "--filter", "path=9", "-d", "10s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if out != "t=12.301us h3->h7 conn 4 path 9: SACK hole psn 1834, retransmit\n" {
		t.Errorf("trace output %q", out)
	}
	code, _, errs = runCLI(t, "trace", "--run-dir", fl.dir, "--filter", "path=x")
	if code != 2 || !strings.Contains(errs, "path=") {
		t.Errorf("bad filter: exit %d: %s", code, errs)
	}
}
