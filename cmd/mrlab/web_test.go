package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs/live"
	"github.com/mrlab/mrlab/observe/web"
	"github.com/mrlab/mrlab/observe/web/webtest"
)

// `mrlab sim --record` writes a replay `mrlab web --replay` reads.
func TestSimRecord(t *testing.T) {
	file := filepath.Join(t.TempDir(), "run.replay.gz")
	code, out, errs := mrlab("sim", "leafspine-faults", "--workload", "permutation", "--transport", "metaroce",
		"-n", "40", "--record", file)
	if code != 0 {
		t.Fatalf("sim --record: code %d\n%s%s", code, out, errs)
	}
	if !regexp.MustCompile(`recording:\s+` + regexp.QuoteMeta(file) + ` \(\d+ frames\)`).MatchString(out) {
		t.Errorf("sim --record does not report the recording:\n%s", out)
	}
	rp, err := web.OpenReplay(file)
	if err != nil {
		t.Fatal(err)
	}
	h := rp.Header
	if h.Lab != "leafspine-faults" || h.Workload != "permutation" || h.Transport != "metaroce" || len(h.Faults) != 8 {
		t.Errorf("header: %+v", h)
	}
	if n := len(h.Topology.Links); n != 24 {
		t.Errorf("recorded topology has %d links, want 24", n)
	}
	// Both transports' runs in one file would be two runs: refused.
	code, _, errs = mrlab("sim", "--record", filepath.Join(t.TempDir(), "x.replay"))
	if code != 2 || !strings.Contains(errs, "follow one run") {
		t.Errorf("sim --record of the comparison: code %d, %s", code, errs)
	}
	code, _, errs = mrlab("web", "--replay", filepath.Join(t.TempDir(), "missing.replay"))
	if code != 1 || !strings.Contains(errs, "missing.replay") {
		t.Errorf("web --replay of a missing file: code %d, %s", code, errs)
	}
	code, _, errs = mrlab("web", "--replay", file, "--addr", "0.0.0.0:0")
	if code != 2 || !strings.Contains(errs, "loopback") {
		t.Errorf("web on a non-loopback address: code %d, %s", code, errs)
	}
}

// The live page in a real browser, on a lab engine running in this
// process (idle devices, no root): one element per link direction, and
// `mrlab fault link X down` through the control API shows on the page in
// the first frame the lab takes after it.
func TestWebLiveBrowser(t *testing.T) {
	dir, name := upOnDevices(t)
	cl, err := live.Dial(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	lv, err := web.NewLive(context.Background(), name, live.WebLab{C: cl}, 0, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(web.NewLiveServer(lv, 0))
	t.Cleanup(srv.Close)
	b := webtest.New(t)
	if err := b.Open(srv.URL + "/"); err != nil {
		t.Fatal(err)
	}
	topo := lv.Topology()
	checkLinks(t, b, &topo)
	faultShows(t, b, cl, func() (int, string) {
		code, out, errs := mrlab("fault", "link", "--run-dir", dir, "--lab", name, "p0-leaf0-spine1", "down")
		return code, out + errs
	}, "p0-leaf0-spine1", "down")
	// The page's own buttons go through the same control API.
	if err := b.Click(`[data-link="p0-leaf0-spine1:AtoB"]`); err != nil {
		t.Fatal(err)
	}
	faultShows(t, b, cl, func() (int, string) {
		if err := b.Click(`[data-fault="link:p0-leaf0-spine1:up"]`); err != nil {
			return 1, err.Error()
		}
		// The click's POST is asynchronous: wait until the lab has it.
		for range 100 {
			st, err := cl.Status(context.Background())
			if err == nil && linkUp(st, "p0-leaf0-spine1") {
				return 0, ""
			}
			time.Sleep(20 * time.Millisecond)
		}
		return 1, "the lab never saw the button's fault"
	}, "p0-leaf0-spine1", "up")
	shot := filepath.Join(webtest.ShotDir(t), "live.png")
	if err := b.Screenshot(shot); err != nil {
		t.Errorf("%v (%s)", err, shot)
	}
	if errs := b.Errors(); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

func linkUp(st live.Status, name string) bool {
	for _, l := range st.Engine.Links {
		if l.Name == name {
			return l.Up
		}
	}
	return false
}

// faultShows applies a fault with apply, then checks that the first frame
// the page draws of lab time after the fault shows link's two directions
// in state want, and that the lab took that frame within a second of lab
// time (which a live lab paces to the wall clock). The wall-clock delay
// until the page showed it is logged.
func faultShows(t *testing.T, b *webtest.Browser, cl *live.Client, apply func() (int, string), link, want string) {
	t.Helper()
	start := time.Now()
	if code, out := apply(); code != 0 {
		t.Fatalf("fault %s %s: code %d\n%s", link, want, code, out)
	}
	applied := time.Now()
	st, err := cl.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	after := st.VirtualTime.Nanoseconds()
	// Hang guard only; the figure that matters is in lab time below.
	if err := b.WaitFor(fmt.Sprintf("window.mrlab.t > %d", after), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	type seen struct {
		T      int64  `json:"t"`
		AtoB   string `json:"atob"`
		BtoA   string `json:"btoa"`
		Frames int    `json:"frames"`
	}
	// One evaluation: the state and the time of the same drawn frame.
	got, err := webtest.Eval[seen](b, fmt.Sprintf(`({t: window.mrlab.t, frames: window.mrlab.stats.frames,
		atob: document.querySelector('[data-link="%[1]s:AtoB"]').dataset.state,
		btoa: document.querySelector('[data-link="%[1]s:BtoA"]').dataset.state})`, link))
	if err != nil {
		t.Fatal(err)
	}
	if got.AtoB != want || got.BtoA != want {
		t.Errorf("frame at lab time %v after the fault (applied by %v): %s is %s/%s, want %s",
			time.Duration(got.T), time.Duration(after), link, got.AtoB, got.BtoA, want)
	}
	if lag := time.Duration(got.T - after); lag > time.Second {
		t.Errorf("the first frame after the fault is %v of lab time later, want within a second", lag)
	}
	t.Logf("%s %s: applied in %v, on the page %v (wall clock) later", link, want,
		applied.Sub(start).Round(time.Millisecond), time.Since(applied).Round(time.Millisecond))
}

// checkLinks checks the page has one element per link direction.
func checkLinks(t *testing.T, b *webtest.Browser, topo *web.Topology) {
	t.Helper()
	names, err := webtest.Eval[[]string](b, `[...document.querySelectorAll("[data-link]")].map(e => e.dataset.link)`)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, n := range names {
		seen[n] = true
	}
	if len(names) != topo.NumDirs() || len(seen) != topo.NumDirs() {
		t.Errorf("%d link elements (%d distinct), want %d", len(names), len(seen), topo.NumDirs())
	}
	for d := range topo.NumDirs() {
		if !seen[topo.DirName(d)] {
			t.Errorf("no element for %s", topo.DirName(d))
		}
	}
}

// The whole way a user goes, as root: `mrlab up` a lab in namespaces,
// `mrlab web` on it, a MetaRoCE perf run crossing it, the page in a real
// browser, `mrlab fault link X down` showing, and the lab torn down.
func TestWebLiveNamespaces(t *testing.T) {
	testenv.RequireNamespaces(t)
	lb := newCLILab(t, "web")
	bin, dir, name, lab := lb.bin, lb.dir, lb.name, lb.file
	sh := func(args ...string) (int, string) { return lb.sh(t, args...) }
	if code, out := sh("up", lab); code != 0 {
		t.Fatalf("up: %d\n%s", code, out)
	}
	// mrlab web in the background; its first line is the URL.
	webCmd := exec.Command(bin, "web", name)
	webCmd.Env = append(os.Environ(), "MRLAB_RUN_DIR="+dir)
	stdout, err := webCmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	webCmd.Stderr = os.Stderr
	if err := webCmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		webCmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- webCmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("mrlab web after Ctrl-C: %v", err)
			}
		case <-time.After(10 * time.Second):
			webCmd.Process.Kill()
			t.Error("mrlab web did not stop on Ctrl-C")
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("mrlab web printed no URL: %v", err)
	}
	url := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`).FindString(line)
	if url == "" {
		t.Fatalf("mrlab web: no URL in %q", line)
	}
	b := webtest.New(t)
	if err := b.Open(url); err != nil {
		t.Fatal(err)
	}
	// Traffic to look at: a MetaRoCE run across the spines.
	perf := make(chan string, 1)
	go func() {
		code, out := sh("perf", "--from", "h0", "--to", "h2", "--duration", "4s", "--allow-lag") // the page is under test, not the figures
		perf <- fmt.Sprintf("code %d\n%s", code, out)
	}()
	cl, err := live.Dial(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := cl.WebTopology(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	checkLinks(t, b, &topo)
	// Select the perf connection once it shows among the busiest.
	if err := b.WaitFor(`document.querySelector('#top tr[data-conn^="h0/"]') !== null`, 10*time.Second); err != nil {
		t.Error(err)
	} else if err := b.Click(`#top tr[data-conn^="h0/"]`); err != nil {
		t.Error(err)
	} else if err := b.WaitFor(`document.querySelectorAll("#conn tr.path").length > 1 && document.querySelectorAll("#topo .halos line").length > 0`, 5*time.Second); err != nil {
		t.Error(err)
	}
	faultShows(t, b, cl, func() (int, string) { return sh("fault", "link", "p0-leaf0-spine1", "down") }, "p0-leaf0-spine1", "down")
	shot := filepath.Join(webtest.ShotDir(t), "live-namespaces.png")
	if err := b.Screenshot(shot); err != nil {
		t.Errorf("%v (%s)", err, shot)
	}
	if out := <-perf; !strings.HasPrefix(out, "code 0") {
		t.Errorf("perf: %s", out)
	}
	if errs := b.Errors(); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}
