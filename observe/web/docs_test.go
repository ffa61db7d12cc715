package web

import (
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/observe/prototrace"
	"github.com/mrlab/mrlab/observe/web/webtest"
	"github.com/mrlab/mrlab/workload"
)

var updateDocs = flag.Bool("update-docs", false, "regenerate the web view's screenshots in docs/ (runs the 64-host lab: minutes)")

// recordLab runs spec on lab with a recorder sampling every interval and
// returns the replay.
func recordLab(t testing.TB, lab *labs.Lab, spec workload.Spec, every sim.Time) *Replay {
	t.Helper()
	r := startRecording(t, lab, string(spec.Name), every, prototrace.TraceDrops)
	if _, err := workload.Run(r.cl, spec); err != nil {
		t.Fatal(err)
	}
	if err := r.rec.Close(r.loop.Now()); err != nil {
		t.Fatal(err)
	}
	rp, err := ReadReplay(&r.buf, lab.Name)
	if err != nil {
		t.Fatal(err)
	}
	return rp
}

// busiestLadder picks, among connections from host at frame k, the one
// whose ladder has the most events.
func busiestLadder(rp *Replay, k int, from func(ConnState) bool) ConnKey {
	snap := rp.Snapshot(k, nil)
	best, n := ConnKey{}, -1
	for _, c := range snap.Conns {
		if !from(c) {
			continue
		}
		if l := len(rp.ladder(&c, rp.times[k], ladderLen)); l > n {
			best, n = c.ConnKey, l
		}
	}
	return best
}

// SpineFailureCommand is the README's command for its first screenshot:
// the run spineFailure records, and the page's parameters (h1's
// connection with the most trace events is conn 1 in this run).
const SpineFailureCommand = "mrlab sim leafspine --transport metaroce --fault '300us switch p0-spine1 down' --web"

// spineFailure records the README's first screenshot's run: the default
// lab, a spine failing under a MetaRoCE permutation (mrlab sim's default
// workload), sampled every 10 us (--telemetry-interval's default). It
// returns the frame shown, after the failure was detected and traffic
// moved, and h1's connection with the busiest ladder then.
func spineFailure(t testing.TB) (*Replay, int, ConnKey) {
	t.Helper()
	fault, err := labs.FaultOverride("--fault", "300us switch p0-spine1 down")
	if err != nil {
		t.Fatal(err)
	}
	lab, err := labs.ResolveWith("leafspine", []labs.Override{fault})
	if err != nil {
		t.Fatal(err)
	}
	spec := workload.DemoSpec()
	spec.Transport = 0 // MetaRoCE
	rp := recordLab(t, lab, spec, 10*sim.Microsecond)
	k := rp.FrameAt(460 * sim.Microsecond)
	return rp, k, busiestLadder(rp, k, func(c ConnState) bool { return c.Host == "h1" })
}

// TestReadmeScreenshotCommand: the README gives the command and page of
// its first screenshot, the run spineFailure records.
func TestReadmeScreenshotCommand(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rp, k, sel := spineFailure(t)
	page := fmt.Sprintf("?t=%v&host=%s&conn=%d", rp.times[k], sel.Host, sel.ID)
	for _, want := range []string{"go run ./cmd/mrlab " + strings.TrimPrefix(SpineFailureCommand, "mrlab "), page} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README lacks %q (the screenshot's command and page)", want)
		}
	}
}

// TestDocsScreenshots regenerates the README's screenshots of the web
// view (go test ./observe/web -run DocsScreenshots -update-docs) and
// reports how long the page takes to draw a frame while playing.
func TestDocsScreenshots(t *testing.T) {
	if !*updateDocs {
		t.Skip("regenerates docs/web-*.png; run with -update-docs")
	}
	docs := filepath.Join("..", "..", "docs")

	rp, k, sel := spineFailure(t)
	shoot(t, rp, k, sel, filepath.Join(docs, "web-spine-failure.png"))

	// The 64-host, 8-plane lab in an all-to-all of 4 MiB per host.
	lab, err := labs.Resolve("leafspine-64h-8p")
	if err != nil {
		t.Fatal(err)
	}
	rp = recordLab(t, lab, workload.Spec{Name: workload.AllToAll, Size: 4 << 20, Iterations: 1, Seed: lab.Seed}, 5*sim.Microsecond)
	k = rp.FrameAt(45 * sim.Microsecond)
	sel = busiestLadder(rp, k, func(c ConnState) bool { return c.Host == "h0" && c.Peer == "h40" })
	shoot(t, rp, k, sel, filepath.Join(docs, "web-64h-alltoall.png"))
}

// shoot opens frame k of rp with sel selected, writes a screenshot to
// path, then plays the replay for a while and logs the page's drawing
// times.
func shoot(t *testing.T, rp *Replay, k int, sel ConnKey, path string) {
	t.Helper()
	srv := httptest.NewServer(NewReplayServer(rp, 0))
	t.Cleanup(srv.Close)
	b := webtest.New(t)
	if err := b.Open(fmt.Sprintf("%s/?k=%d&host=%s&conn=%d", srv.URL, k, sel.Host, sel.ID)); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitFor(fmt.Sprintf("window.mrlab.k === %d && document.querySelectorAll('#conn tr.path').length > 0", k), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.Screenshot(path); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: frame %d at %v, %s conn %d", path, k, rp.times[k], sel.Host, sel.ID)
	// Play from the start for a few seconds.
	if _, err := webtest.Eval[bool](b, `(() => { window.mrlab.stats.frames = 0; window.mrlab.stats.drawMs = 0; window.mrlab.stats.maxDrawMs = 0; window.mrlab.seek(0); return true })()`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := b.Click("#play"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	type stats struct {
		Frames    int     `json:"frames"`
		DrawMs    float64 `json:"drawMs"`
		MaxDrawMs float64 `json:"maxDrawMs"`
	}
	st, err := webtest.Eval[stats](b, `window.mrlab.stats`)
	if err != nil {
		t.Fatal(err)
	}
	if st.Frames > 0 {
		t.Logf("%s: %d frames drawn in 5s of play, %.1f ms per frame on average, %.1f ms at most",
			filepath.Base(path), st.Frames, st.DrawMs/float64(st.Frames), st.MaxDrawMs)
	}
	if errs := b.Errors(); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
	if _, err := os.Stat(path); err != nil {
		t.Error(err)
	}
}
