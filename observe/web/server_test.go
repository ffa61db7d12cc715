package web

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/observe/prototrace"
)

// sseEvents reads server-sent events from r until n events or EOF.
func sseEvents(t *testing.T, r io.Reader, n int) (events []string, data []string) {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	ev := ""
	for sc.Scan() && len(events) < n {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			ev = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			events = append(events, ev)
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
	return events, data
}

func replayServer(t *testing.T) (*Replay, *httptest.Server) {
	t.Helper()
	r := recordRun(t, prototrace.TraceDrops)
	rp, err := ReadReplay(bytes.NewReader(r.file), "run.replay")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewReplayServer(rp, 20))
	t.Cleanup(srv.Close)
	return rp, srv
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return resp.StatusCode
}

func TestServerReplay(t *testing.T) {
	rp, srv := replayServer(t)
	var info Info
	if code := getJSON(t, srv.URL+"/api/info", &info); code != 200 || info.Mode != "replay" || info.Frames != rp.Frames() ||
		len(info.View.Links) != len(rp.Header.Topology.Links) || info.CanFault {
		t.Fatalf("info: %d %+v", code, info.Mode)
	}
	// One frame by index, by time, with a selection.
	var f Frame
	k := rp.FrameAt(100 * sim.Microsecond)
	getJSON(t, fmt.Sprintf("%s/api/frame?t=%d&host=h0&conn=1", srv.URL, 100*sim.Microsecond), &f)
	if f.Index != k || f.Sel == nil || f.Sel.Host != "h0" || len(f.State) != rp.Header.Topology.NumDirs() {
		t.Errorf("frame at 100us: index %d (want %d), sel %+v", f.Index, k, f.Sel)
	}
	if want := rp.Frame(k, -1, &ConnKey{"h0", 1}); !cmp.Equal(want.Util, f.Util) || !cmp.Equal(want.Drops, f.Drops) {
		t.Error("served frame differs from the replay's")
	}
	getJSON(t, srv.URL+"/api/frame?k=99999", &f)
	if f.Index != rp.Frames()-1 {
		t.Errorf("k past the end: frame %d", f.Index)
	}
	var rows []ConnRow
	getJSON(t, fmt.Sprintf("%s/api/conns?host=h1&k=%d", srv.URL, k), &rows)
	if len(rows) == 0 {
		t.Error("h1 has no connections at 100us")
	}
	for _, r := range rows {
		if r.Host != "h1" {
			t.Errorf("conns?host=h1 lists %s", r.Host)
		}
	}
	// Bad requests are answered, not crashed on.
	var e apiError
	for _, q := range []string{"/api/frame?k=x", "/api/frame?host=h0&conn=x", "/api/frame?conn=3"} {
		if code := getJSON(t, srv.URL+q, &e); code != 400 || e.Error == "" {
			t.Errorf("%s: %d %q", q, code, e.Error)
		}
	}
	resp, err := http.Post(srv.URL+"/api/fault", "application/json", strings.NewReader(`{"target":"link","name":"h0-p0","action":"down"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("fault on a replay: %d", resp.StatusCode)
	}
	// The page and its assets are embedded.
	for _, p := range []string{"/", "/app.js", "/fabric.js", "/panels.js", "/ladder.js", "/timeline.js", "/util.js", "/style.css"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(b) == 0 {
			t.Errorf("%s: %d, %d bytes", p, resp.StatusCode, len(b))
		}
		// Nothing from elsewhere (the SVG namespace is a name, not a fetch).
		b = bytes.ReplaceAll(b, []byte("http://www.w3.org/2000/svg"), nil)
		if bytes.Contains(b, []byte("https://")) || bytes.Contains(b, []byte("http://")) {
			t.Errorf("%s refers to another site", p)
		}
	}
}

// A replay stream plays frames in order, no more than fps a second, and
// ends.
func TestServerReplayStream(t *testing.T) {
	rp, srv := replayServer(t)
	// Ten frames per second of play at 20 fps: every frame once.
	speed := rp.Header.Interval * 10
	start := time.Now()
	resp, err := http.Get(fmt.Sprintf("%s/api/stream?t=0&speed=%d", srv.URL, speed))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events, data := sseEvents(t, resp.Body, 1<<20)
	elapsed := time.Since(start)
	if len(events) == 0 || events[len(events)-1] != "end" {
		t.Fatalf("stream did not end: %v", events)
	}
	last := -1
	for i, ev := range events[:len(events)-1] {
		var f Frame
		if ev != "frame" || json.Unmarshal([]byte(data[i]), &f) != nil {
			t.Fatalf("event %d: %s %.80s", i, ev, data[i])
		}
		if f.Index <= last {
			t.Errorf("frame %d after frame %d", f.Index, last)
		}
		last = f.Index
	}
	if last != rp.Frames()-1 {
		t.Errorf("stream ended at frame %d of %d", last, rp.Frames())
	}
	// Rate limit: never more frames than fps allow in the time it took
	// (an upper bound; a slow machine only sends fewer).
	if n, most := len(events)-1, int(elapsed.Seconds()*20)+2; n > most {
		t.Errorf("%d frames in %v: more than 20 a second", n, elapsed)
	}
}

func TestLoopbackOnly(t *testing.T) {
	_, srv := replayServer(t)
	req, _ := http.NewRequest("GET", srv.URL+"/api/info", nil)
	req.Host = "evil.example:80"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("request for host evil.example: %d", resp.StatusCode)
	}
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:8080", "localhost:0", "nonsense"} {
		if ln, err := Listen(addr); err == nil {
			ln.Close()
			t.Errorf("Listen(%q) accepted", addr)
		}
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}

// fakeLab is a live lab in memory: a leaf/spine whose faults flip link
// states, with the Lab interface's validation of names.
type fakeLab struct {
	mu     sync.Mutex
	topo   Topology
	snap   Snapshot
	faults []FaultRequest
	polls  int
	asked  [][]ConnKey
}

func newFakeLab(t *testing.T) *fakeLab {
	ft, err := fabric.LeafSpine(fabric.LeafSpineParams{Planes: 2, Leaves: 2, Spines: 2, HostsPerLeaf: 2})
	if err != nil {
		t.Fatal(err)
	}
	l := &fakeLab{topo: TopologyOf(ft)}
	l.snap = Snapshot{Dirs: make([]DirState, l.topo.NumDirs()), Hosts: make([]HostState, len(l.topo.Hosts))}
	for i := range l.snap.Dirs {
		l.snap.Dirs[i] = DirState{Up: true, Rate: 100e9}
	}
	l.snap.Conns = []ConnState{{ConnKey: ConnKey{"h0", 1}, Peer: "h2", PeerID: 1, Transport: "metaroce", State: "established", NumPaths: 2}}
	return l
}

func (l *fakeLab) Topology(context.Context) (Topology, error) { return l.topo, nil }

func (l *fakeLab) Snapshot(_ context.Context, paths []ConnKey) (*Snapshot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.polls++
	l.asked = append(l.asked, paths)
	s := l.snap
	s.T = sim.Time(l.polls) * 100 * sim.Millisecond
	s.Dirs = append([]DirState(nil), l.snap.Dirs...)
	for i := range s.Dirs {
		s.Dirs[i].TxBytes = uint64(l.polls) * 1e9 // 80% of 100 Gbit/s per 100ms
	}
	s.Conns = append([]ConnState(nil), l.snap.Conns...)
	s.Conns[0].TxBytes = uint64(l.polls) * 1e8
	if len(paths) > 0 {
		s.Conns[0].Paths = []PathState{{Plane: 0, Entropy: 50000, State: "active", Route: []int{0, 9}, Reached: true},
			{Plane: 1, Entropy: 50001, State: "active", Route: []int{1, 11}, Reached: true}}
	}
	return &s, nil
}

func (l *fakeLab) Trace(ctx context.Context) (io.ReadCloser, error) {
	r, w := io.Pipe()
	go func() {
		fmt.Fprintln(w, "t=1us h0->h2 conn 1 path 0: SACK hole psn 5, retransmit")
		<-ctx.Done()
		w.Close()
	}()
	return r, nil
}

func (l *fakeLab) Fault(_ context.Context, f FaultRequest) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, lk := range l.topo.Links {
		if lk.Name == f.Name && f.Target == "link" {
			l.faults = append(l.faults, f)
			l.snap.Dirs[2*i].Up, l.snap.Dirs[2*i+1].Up = f.Action == "up", f.Action == "up"
			return nil
		}
	}
	return errors.New(`no link "` + f.Name + `"`)
}

func TestServerLive(t *testing.T) {
	lab := newFakeLab(t)
	lv, err := NewLive(context.Background(), "fake", lab, 20*time.Millisecond, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewLiveServer(lv, 0))
	t.Cleanup(srv.Close)
	lab.mu.Lock()
	polls := lab.polls
	lab.mu.Unlock()
	if polls != 0 {
		t.Errorf("the lab was polled %d times with no page open", polls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/stream?host=h0&conn=1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	events, data := sseEvents(t, resp.Body, 3)
	var f Frame
	if len(events) != 3 || events[2] != "frame" || json.Unmarshal([]byte(data[2]), &f) != nil {
		t.Fatalf("live stream: %v", events)
	}
	if f.Index != -1 || f.Util[0] != 800 || f.Sel == nil || len(f.Sel.PathRows) != 2 || f.Sel.Rate != 8e9 {
		t.Errorf("live frame: index %d util %d sel %+v", f.Index, f.Util[0], f.Sel)
	}
	if len(f.Sel.Ladder) != 1 || f.Sel.Ladder[0].Kind != "sack-hole" {
		t.Errorf("ladder from the lab's trace: %+v", f.Sel.Ladder)
	}
	// Fault buttons: JSON only, from this page only, through the lab.
	post := func(body, ctype, origin string) int {
		req, _ := http.NewRequest("POST", srv.URL+"/api/fault", strings.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	ok := `{"target":"link","name":"p0-leaf0-spine1","action":"down"}`
	if code := post(ok, "text/plain", ""); code != http.StatusUnsupportedMediaType {
		t.Errorf("form post: %d", code)
	}
	if code := post(ok, "application/json", "http://evil.example"); code != http.StatusForbidden {
		t.Errorf("cross-origin post: %d", code)
	}
	if code := post(`{"target":"link","name":"nope","action":"down"}`, "application/json", ""); code != 400 {
		t.Errorf("bad link: %d", code)
	}
	if code := post(`{"target":"link","bogus":1}`, "application/json", ""); code != 400 {
		t.Errorf("unknown field: %d", code)
	}
	if code := post(ok, "application/json", srv.URL); code != 200 {
		t.Errorf("good fault: %d", code)
	}
	// The next frames show the link down and the fault on the timeline.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		events, data = sseEvents(t, resp.Body, 1)
		if len(events) == 0 || json.Unmarshal([]byte(data[0]), &f) != nil {
			t.Fatal("stream ended")
		}
		if len(f.Faults) > 0 {
			break
		}
	}
	i := 2 * idx(lab.topo.Links, "p0-leaf0-spine1")
	if f.State[i] != 'd' || f.State[i+1] != 'd' || len(f.Faults) != 1 || f.Faults[0].Fault != "link p0-leaf0-spine1 down" {
		t.Errorf("after the fault: state %q, faults %+v", f.State[i:i+2], f.Faults)
	}
	lab.mu.Lock()
	asked := lab.asked[len(lab.asked)-1]
	lab.mu.Unlock()
	if !cmp.Equal(asked, []ConnKey{{"h0", 1}}) {
		t.Errorf("the poll asked for paths of %v", asked)
	}
	cancel()
	resp.Body.Close()
	// With the page gone, polling stops.
	time.Sleep(100 * time.Millisecond)
	lab.mu.Lock()
	before := lab.polls
	lab.mu.Unlock()
	time.Sleep(200 * time.Millisecond)
	lab.mu.Lock()
	after := lab.polls
	lab.mu.Unlock()
	if after != before {
		t.Errorf("%d polls after the last page left", after-before)
	}
}

func idx(ls []TopoLink, name string) int {
	for i, l := range ls {
		if l.Name == name {
			return i
		}
	}
	return -1
}

func TestDeriveFaults(t *testing.T) {
	ft, err := fabric.LeafSpine(fabric.LeafSpineParams{Planes: 2, Leaves: 2, Spines: 2, HostsPerLeaf: 1})
	if err != nil {
		t.Fatal(err)
	}
	tp := TopologyOf(ft)
	base := func() *Snapshot {
		s := &Snapshot{T: 5, Dirs: make([]DirState, tp.NumDirs())}
		for i := range s.Dirs {
			s.Dirs[i].Up = true
		}
		return s
	}
	down := func(s *Snapshot, sw ...string) *Snapshot {
		s.SwitchDown = append(s.SwitchDown, sw...)
		for i, l := range tp.Links {
			for _, n := range sw {
				if l.A == n || l.B == n {
					s.Dirs[2*i].Up, s.Dirs[2*i+1].Up = false, false
				}
			}
		}
		return s
	}
	link := func(s *Snapshot, name string, up bool) *Snapshot {
		i := idx(tp.Links, name)
		s.Dirs[2*i].Up, s.Dirs[2*i+1].Up = up, up
		return s
	}
	impair := func(s *Snapshot, name, a, b string) *Snapshot {
		i := idx(tp.Links, name)
		s.Dirs[2*i].Impair, s.Dirs[2*i+1].Impair = a, b
		return s
	}
	for _, tc := range []struct {
		name      string
		prev, cur *Snapshot
		want      []string
	}{
		{"nothing", base(), base(), nil},
		{"link", base(), link(base(), "p0-leaf1-spine0", false), []string{"link p0-leaf1-spine0 down"}},
		{"link up", link(base(), "h0-p1", false), base(), []string{"link h0-p1 up"}},
		{"switch, not its links", base(), down(base(), "p1-spine0"), []string{"switch p1-spine0 down"}},
		{"plane", base(), down(base(), "p1-leaf0", "p1-leaf1", "p1-spine0", "p1-spine1"), []string{"plane 1 down"}},
		{"plane up", down(base(), "p0-leaf0", "p0-leaf1", "p0-spine0", "p0-spine1"), base(), []string{"plane 0 up"}},
		{"impair", base(), impair(base(), "h0-p0", "loss 1%", "loss 1%"), []string{`link h0-p0 impair "loss 1%"`}},
		{"impair one way", base(), impair(base(), "h0-p0", "delay 5us", ""), []string{`link h0-p0 impair "delay 5us" dir ab`}},
		{"clear", impair(base(), "h0-p0", "loss 1%", "loss 1%"), base(), []string{`link h0-p0 impair "none"`}},
	} {
		var got []string
		for _, f := range deriveFaults(&tp, tc.prev, tc.cur) {
			got = append(got, f.Fault)
			if f.T != tc.cur.T {
				t.Errorf("%s: stamped %v, want the later snapshot's %v", tc.name, f.T, tc.cur.T)
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestBuildFrame(t *testing.T) {
	prev := &Snapshot{T: 0, Dirs: []DirState{{Up: true, Rate: 10e9, TxBytes: 100, Drops: 1, Marks: 5}, {Up: true, Rate: 10e9}},
		Hosts: []HostState{{TxBytes: 0}}}
	cur := &Snapshot{T: sim.Millisecond, Dirs: []DirState{
		{Up: true, Rate: 10e9, TxBytes: 100 + 625000, Drops: 4, Marks: 5, Queue: 3000}, // 5 Gbit/s
		{Up: false, Rate: 10e9, Impair: "loss 1%"}}, Hosts:                             []HostState{{TxBytes: 1250000}}} // 10 Gbit/s
	f := buildFrame(&frameInput{prev: prev, cur: cur, index: 7})
	want := &Frame{T: sim.Millisecond, Index: 7, Util: []int{500, 0}, Queue: []int{3000, 0}, Drops: []uint64{3, 0}, Marks: []uint64{0, 0},
		State: "ud", Impair: map[int]string{1: "loss 1%"}, Hosts: []HostRow{{HostState: HostState{TxBytes: 1250000}, TxRate: 1e10}},
		Top: []ConnRow{}, Faults: []FaultEvent{}}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// The first frame has no rates.
	if f := buildFrame(&frameInput{cur: cur}); f.Util[0] != 0 || f.Drops[0] != 0 {
		t.Errorf("frame without a previous snapshot: util %d drops %d", f.Util[0], f.Drops[0])
	}
}
