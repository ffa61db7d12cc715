package web

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/observe/prototrace"
	"github.com/mrlab/mrlab/observe/web/webtest"
)

// The page plays a recorded run in a real browser: one element per link
// direction with its state, the spine failure drawn, a selected
// connection's paths highlighted, play advancing on lab time, and not one
// console error.
func TestBrowserReplay(t *testing.T) {
	r := recordRun(t, prototrace.TraceDrops)
	rp, err := ReadReplay(bytes.NewReader(r.file), "run.replay")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewReplayServer(rp, 0))
	t.Cleanup(srv.Close) // after the browser's cleanup: it holds a stream open
	b := webtest.New(t)

	// Open at a frame while the spine is down, with a connection selected.
	k := rp.FrameAt(100 * sim.Microsecond)
	snap := rp.Snapshot(k, nil)
	var sel *ConnState
	for i := range snap.Conns {
		if c := &snap.Conns[i]; c.Host == "h0" && c.NumPaths > 1 {
			sel = c
			break
		}
	}
	if sel == nil {
		t.Fatal("h0 has no multipath connection at 100us")
	}
	if err := b.Open(fmt.Sprintf("%s/?k=%d&host=%s&conn=%d", srv.URL, k, sel.Host, sel.ID)); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitFor(fmt.Sprintf("window.mrlab.k === %d", k), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	checkLinkElements(t, b, &rp.Header.Topology)
	// Every direction's drawn state is the replay's.
	states, err := webtest.Eval[map[string]string](b, `Object.fromEntries([...document.querySelectorAll("[data-link]")].map(e => [e.dataset.link, e.dataset.state]))`)
	if err != nil {
		t.Fatal(err)
	}
	topo := &rp.Header.Topology
	down := 0
	for d := range topo.NumDirs() {
		want := "up"
		switch {
		case !snap.Dirs[d].Up:
			want = "down"
			down++
		case snap.Dirs[d].Impair != "":
			want = "impaired"
		}
		if got := states[topo.DirName(d)]; got != want {
			t.Errorf("%s drawn %q, want %q", topo.DirName(d), got, want)
		}
	}
	if down == 0 {
		t.Error("no link down while the spine is down")
	}
	// The selected connection's routes are highlighted, and its paths
	// listed.
	halos, err := webtest.Eval[int](b, `document.querySelectorAll("#topo .halos line").length`)
	if err != nil || halos == 0 {
		t.Errorf("selected connection: %d highlighted directions (%v)", halos, err)
	}
	rows, err := webtest.Eval[int](b, `document.querySelectorAll("#conn tr.path").length`)
	if err != nil || rows != sel.NumPaths {
		t.Errorf("selected connection: %d path rows, want %d (%v)", rows, sel.NumPaths, err)
	}
	checkNoOverlap(t, b)
	shot := filepath.Join(webtest.ShotDir(t), "replay.png")
	if err := b.Screenshot(shot); err != nil {
		t.Errorf("%v (%s)", err, shot)
	}
	t.Logf("screenshot: %s", shot)

	// Play: frames arrive and the playhead moves on.
	if err := b.Click("#play"); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitFor(fmt.Sprintf("window.mrlab.k >= %d", min(k+3, rp.Frames()-1)), 10*time.Second); err != nil {
		t.Error(err)
	}
	if errs := b.Errors(); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// checkLinkElements checks the DOM has exactly one element per link
// direction, named "link:AtoB" or "link:BtoA".
func checkLinkElements(t *testing.T, b *webtest.Browser, topo *Topology) {
	t.Helper()
	names, err := webtest.Eval[[]string](b, `[...document.querySelectorAll("[data-link]")].map(e => e.dataset.link)`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for d := range topo.NumDirs() {
		want[topo.DirName(d)] = true
	}
	seen := map[string]bool{}
	for _, n := range names {
		if !want[n] {
			t.Errorf("element for %q: no such link direction", n)
		}
		if seen[n] {
			t.Errorf("two elements for %q", n)
		}
		seen[n] = true
	}
	if len(seen) != len(want) {
		t.Errorf("%d link direction elements, want %d", len(seen), len(want))
	}
}

// The page opens a replay on its first frame with traffic (frame 0 is
// recorded before anything is sent: an empty picture), and t= opens it at
// a lab time.
func TestBrowserOpenFrame(t *testing.T) {
	r := recordRun(t, prototrace.TraceDrops)
	rp, err := ReadReplay(bytes.NewReader(r.file), "run.replay")
	if err != nil {
		t.Fatal(err)
	}
	open := rp.OpenFrame()
	if s := rp.Snapshot(open, nil); open == 0 || len(s.Conns) == 0 {
		t.Fatalf("open frame %d (%d connections): want the first frame with traffic, after the empty frame 0", open, len(s.Conns))
	}
	if busyFrame(rp.Snapshot(open-1, nil)) {
		t.Fatalf("frame %d before the open frame %d has traffic", open-1, open)
	}
	srv := httptest.NewServer(NewReplayServer(rp, 0))
	t.Cleanup(srv.Close)
	b := webtest.New(t)
	for _, tc := range []struct {
		query string
		want  int
	}{
		{"", open},
		{"?t=100us", rp.FrameAt(100 * sim.Microsecond)},
		{"?k=0", 0},
	} {
		if err := b.Open(srv.URL + "/" + tc.query); err != nil {
			t.Fatal(err)
		}
		if err := b.WaitFor(fmt.Sprintf("window.mrlab.ready && window.mrlab.k === %d", tc.want), 5*time.Second); err != nil {
			k, _ := webtest.Eval[int](b, `window.mrlab.k`)
			t.Errorf("open %q: at frame %d, want %d: %v", tc.query, k, tc.want, err)
		}
	}
	if errs := b.Errors(); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// checkNoOverlap checks that no two labels drawn on the fabric (link
// impairments) or in the ladder (trace events) overlap, as drawn.
func checkNoOverlap(t *testing.T, b *webtest.Browser) {
	t.Helper()
	type overlap struct {
		Labels int      `json:"labels"`
		Pairs  []string `json:"pairs"`
	}
	got, err := webtest.Eval[overlap](b, `(() => {
		const es = [...document.querySelectorAll(".ev-label, .impair-label")];
		const rs = es.map((e) => e.getBoundingClientRect());
		const pairs = [];
		for (let i = 0; i < rs.length; i++)
			for (let j = i + 1; j < rs.length; j++) {
				const a = rs[i], c = rs[j];
				if (a.width && c.width && a.left < c.right - 0.5 && c.left < a.right - 0.5 && a.top < c.bottom - 0.5 && c.top < a.bottom - 0.5)
					pairs.push(es[i].textContent + " / " + es[j].textContent);
			}
		return { labels: es.length, pairs };
	})()`)
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels == 0 {
		t.Error("no labels drawn")
	}
	if len(got.Pairs) > 0 {
		t.Errorf("%d of %d labels overlap: %q", len(got.Pairs), got.Labels, got.Pairs)
	}
}

// The README's screenshot run: at the frame it shows, with h1's busiest
// connection selected, no two labels overlap (its ladder has dozens of
// events in a few microseconds, the fabric a loss label on every link).
func TestBrowserLabelsDoNotOverlap(t *testing.T) {
	rp, k, sel := spineFailure(t)
	srv := httptest.NewServer(NewReplayServer(rp, 0))
	t.Cleanup(srv.Close)
	b := webtest.New(t)
	if err := b.Open(fmt.Sprintf("%s/?k=%d&host=%s&conn=%d", srv.URL, k, sel.Host, sel.ID)); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitFor(fmt.Sprintf("window.mrlab.k === %d && document.querySelectorAll('#conn tr.path').length > 0 && document.querySelectorAll('.ev-label').length > 0", k), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	checkNoOverlap(t, b)
	shot := filepath.Join(webtest.ShotDir(t), "labels.png")
	if err := b.Screenshot(shot); err != nil {
		t.Error(err)
	}
	t.Logf("screenshot: %s (frame %d, %s conn %d)", shot, k, sel.Host, sel.ID)
}
