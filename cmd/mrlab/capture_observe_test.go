package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/observe/capture"
	"github.com/mrlab/mrlab/observe/telemetry"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/workload"
)

// observeRun runs write_bw over MetaRoCE on a lossy back-to-back lab with
// the observation flags args, as mrlab sim will, and returns the report.
func observeRun(t *testing.T, args ...string) (*Report, error) {
	t.Helper()
	var rep *Report
	var runErr error
	app := &cli.App{Flags: observeFlags(), Writer: &bytes.Buffer{}, Action: func(c *cli.Context) error {
		topo, err := fabric.BackToBack(fabric.BackToBackParams{Planes: 2, Link: fabric.LinkParams{Rate: 100e9, Delay: 1000}})
		if err != nil {
			return err
		}
		loop := sim.NewLoop()
		pool := packet.NewPool()
		net, err := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: 4})
		if err != nil {
			return err
		}
		loss, _ := fabric.ParseImpairment("loss 1%")
		net.SetImpairment("p0-h0-h1", fabric.AtoB, loss)
		hash := fabric.NewTraceHash()
		obs, err := openSimObserver(c, loop, net, hash)
		if err != nil {
			return err
		}
		cl := &workload.Cluster{Name: "b2b", Loop: loop}
		for _, h := range topo.Hosts {
			nic, err := softnic.New(softnic.Config{Name: h.Name, Addr: h.Addr, Ports: h.Ports, Sched: loop, Pool: pool, Seed: 4,
				Protocols: []transport.Protocol{metaroce.NewProtocol(metaroce.Options{Paths: 4})}, Trace: obs.Tracer(h.Name)})
			if err != nil {
				return err
			}
			if err := workload.AttachNIC(net, nic); err != nil {
				return err
			}
			cl.Hosts = append(cl.Hosts, h.Name)
			cl.NICs = append(cl.NICs, nic)
		}
		obs.AttachCluster(cl)
		if _, err := workload.Run(cl, workload.Spec{Name: workload.WriteBW, Transport: transport.MetaRoCE, Size: 1 << 20, Iterations: 5}); err != nil {
			return err
		}
		if hash.Events() == 0 {
			t.Error("the trace hash saw nothing: observers not teed")
		}
		rep = &Report{}
		return obs.Close(loop.Now(), rep)
	}}
	runErr = app.Run(append([]string{"sim"}, args...))
	return rep, runErr
}

func TestObserveFlags(t *testing.T) {
	dir := t.TempDir()
	capDir := filepath.Join(dir, "cap")
	tel := filepath.Join(dir, "t.jsonl")
	plots := filepath.Join(dir, "plots")
	trace := filepath.Join(dir, "trace.txt")
	rep, err := observeRun(t, "--capture", "h0,p1-h0-h1:AtoB", "--capture-dir", capDir, "--telemetry", tel,
		"--plot-dir", plots, "--plot-format", "svg", "--trace", trace, "--trace-filter", "host=h1")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"h0.pcapng", "p1-h0-h1_AtoB.pcapng"} {
		b, err := os.ReadFile(filepath.Join(capDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if _, pk, err := capture.ReadAll(bytes.NewReader(b)); err != nil || len(pk) < 100 {
			t.Errorf("%s: %d packets, %v", f, len(pk), err)
		}
	}
	samples, err := telemetry.ReadFile(tel)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[telemetry.Kind]int{}
	for _, s := range samples {
		kinds[s.Kind]++
	}
	if kinds[telemetry.KindConn] == 0 || kinds[telemetry.KindPath] == 0 || kinds[telemetry.KindLink] == 0 {
		t.Errorf("telemetry kinds %v", kinds)
	}
	entries, _ := os.ReadDir(plots)
	if len(entries) < 2 {
		t.Errorf("%d plots", len(entries))
	}
	tb, _ := os.ReadFile(trace)
	if !strings.Contains(string(tb), "h0->h1 conn 1 path") || !strings.Contains(string(tb), "SACK hole") || !strings.Contains(string(tb), "fabric: drop (fcs-error) at p0-h0-h1:AtoB") {
		t.Errorf("trace lacks loss recovery:\n%.2000s", tb)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	for _, want := range []string{"captures:", "telemetry:", "plots:", "protocol trace:"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, text.String())
		}
	}
}

func TestObserveFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--capture", "h9"},
		{"--capture", "h0", "--capture-filter", "colour=red"},
		{"--capture-filter", "host=h0"},
		{"--telemetry", filepath.Join(t.TempDir(), "x.jsonl"), "--telemetry-interval", "0"},
		{"--plot-dir", t.TempDir(), "--plot-format", "gif"},
		{"--trace", "-", "--trace-filter", "re=("},
		{"--trace", "-", "--trace-fabric", "everything"},
		{"--trace-filter", "host=h0"},
	} {
		_, err := observeRun(t, args...)
		var u usageError
		if err == nil || !errorsAs(err, &u) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

func errorsAs(err error, u *usageError) bool {
	for e := err; e != nil; {
		if x, ok := e.(usageError); ok {
			*u = x
			return true
		}
		w, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = w.Unwrap()
	}
	return false
}
