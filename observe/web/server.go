package web

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mrlab/mrlab/internal/sim"
)

//go:embed assets
var assets embed.FS

// DefaultFPS is how many frames per second a page stream carries at most:
// what a browser redraws comfortably for a 64-host, 8-plane lab, and the
// live poll rate.
const DefaultFPS = 10

// Server serves the web view of one replay or one live lab:
//
//	GET  /                  the page (embedded: HTML, JS, CSS; nothing fetched elsewhere)
//	GET  /api/info          Info: the lab, its layout, what the page can do
//	GET  /api/stream        server-sent events: "frame" events (Frame), "end", "error"
//	                        ?host=H&conn=N selects a connection; replay: &t=NS start, &speed=NS (lab ns per second)
//	GET  /api/frame         one Frame: replay ?k=FRAME or ?t=NS; live the latest
//	GET  /api/conns?host=H  that host's connections (ConnRow), replay &k=FRAME
//	POST /api/fault         FaultRequest (live labs): applied through the lab's control API
//
// It answers only requests addressed to a loopback host name (against DNS
// rebinding), and POSTs only from its own page.
type Server struct {
	replay *Replay
	live   *Live
	fps    int
	info   Info
	mux    *http.ServeMux
}

// Info is what the page learns first.
type Info struct {
	Mode     string   `json:"mode"` // "replay" or "live"
	Lab      string   `json:"lab"`
	Title    string   `json:"title"`
	Topology Topology `json:"topology"`
	View     View     `json:"view"`
	FPS      int      `json:"fps"`
	// Replay: frame count, times and the planned fault timeline.
	Frames   int      `json:"frames,omitempty"`
	Start    sim.Time `json:"start"`
	End      sim.Time `json:"end"`
	Interval sim.Time `json:"interval,omitempty"`
	Times    []int64  `json:"times,omitempty"`
	Planned  []string `json:"planned,omitempty"`
	// Open is the frame the page opens on without k= or t=: the first
	// with traffic.
	Open int `json:"open"`
	// CanFault says the fault buttons work (live labs).
	CanFault bool `json:"can_fault"`
}

// NewReplayServer serves a replay. fps 0 means DefaultFPS.
func NewReplayServer(rp *Replay, fps int) *Server {
	h := &rp.Header
	start, end := rp.Times()
	title := fmt.Sprintf("%s · seed %d", h.Lab, h.Seed)
	if h.Workload != "" {
		title += " · " + h.Workload
	}
	if h.Transport != "" {
		title += " · " + h.Transport
	}
	times := make([]int64, len(rp.times))
	for i, t := range rp.times {
		times[i] = int64(t)
	}
	s := &Server{replay: rp, fps: fpsOr(fps), info: Info{Mode: "replay", Lab: h.Lab, Title: title, Topology: h.Topology,
		View: rp.view, Frames: rp.Frames(), Start: start, End: end, Interval: h.Interval, Times: times, Planned: h.Faults, Open: rp.OpenFrame()}}
	s.routes()
	return s
}

// NewLiveServer serves a live lab. fps 0 means DefaultFPS.
func NewLiveServer(l *Live, fps int) *Server {
	s := &Server{live: l, fps: fpsOr(fps), info: Info{Mode: "live", Lab: l.name, Title: l.name + " · live",
		Topology: l.topo, View: l.view, CanFault: true}}
	s.routes()
	return s
}

func fpsOr(fps int) int {
	if fps <= 0 {
		return DefaultFPS
	}
	return min(fps, 60)
}

func (s *Server) routes() {
	s.info.FPS = s.fps
	s.mux = http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	s.mux.Handle("GET /", http.FileServer(http.FS(static)))
	s.mux.HandleFunc("GET /api/info", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.info) })
	s.mux.HandleFunc("GET /api/stream", s.stream)
	s.mux.HandleFunc("GET /api/frame", s.frame)
	s.mux.HandleFunc("GET /api/conns", s.conns)
	s.mux.HandleFunc("POST /api/fault", s.fault)
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !LoopbackHost(r.Host) {
		http.Error(w, "the mrlab web view answers only on a loopback address", http.StatusForbidden)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// RequireLoopbackHost wraps h so that it answers 403 to a request whose
// Host header is not a loopback name or address (LoopbackHost): a page
// on another site that rebinds its DNS name to 127.0.0.1 (DNS
// rebinding) reaches the port but sends its own name, and reads nothing.
// what names the service in the refusal.
func RequireLoopbackHost(what string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !LoopbackHost(r.Host) {
			http.Error(w, what+" answers only requests addressed to a loopback name or address (Host: localhost, 127.0.0.1, [::1])", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// LoopbackHost reports whether a Host header names this machine's
// loopback: localhost, or a loopback IP address, with or without a port.
// An attacker's page that rebinds its name to 127.0.0.1 still sends its
// own name.
func LoopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// ErrNotLoopback is returned by Listen for an address that is not a
// loopback address: the web view is not for the network.
var ErrNotLoopback = errors.New("the web view listens on a loopback address only")

// Listen opens the web view's listener on addr, which must be a loopback
// address ("127.0.0.1:0" picks a port).
func Listen(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("web address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("web address %q: %w", addr, ErrNotLoopback)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("web view: %w", err)
	}
	return ln, nil
}

// Serve serves on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// selection reads ?host=H&conn=N.
func selection(r *http.Request) (*ConnKey, error) {
	host := r.URL.Query().Get("host")
	c := r.URL.Query().Get("conn")
	if host == "" && c == "" {
		return nil, nil
	}
	id, err := strconv.ParseUint(c, 10, 32)
	if host == "" || err != nil {
		return nil, fmt.Errorf("select a connection with host=NAME&conn=ID, not host=%q conn=%q", host, c)
	}
	return &ConnKey{Host: host, ID: uint32(id)}, nil
}

func intParam(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want an integer", name, v)
	}
	return n, nil
}

// stream pushes frames as server-sent events, at most fps a second.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	sel, err := selection(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{err.Error()})
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(event string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return err
		}
		return rc.Flush()
	}
	if s.live != nil {
		s.streamLive(r.Context(), sel, send)
		return
	}
	start, err := intParam(r, "t", int64(s.info.Start))
	if err == nil {
		var speed int64
		speed, err = intParam(r, "speed", int64(s.info.Interval)*int64(s.fps))
		if err == nil {
			s.streamReplay(r.Context(), sel, sim.Time(start), sim.Time(max(speed, 1)), send)
			return
		}
	}
	send("error", apiError{err.Error()})
}

// streamReplay plays the replay from start at speed (lab time per wall
// second): each tick sends the frame the playhead has reached, if new.
func (s *Server) streamReplay(ctx context.Context, sel *ConnKey, start, speed sim.Time, send func(string, any) error) {
	rp := s.replay
	tick := time.Second / time.Duration(s.fps)
	k := rp.FrameAt(start)
	head := max(start, rp.times[k])
	last := -1
	var shown *Snapshot // frame last's state: the next frame's rates are against it
	if k > 0 {
		shown = rp.Snapshot(k-1, selects(sel))
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		if k != last {
			var f *Frame
			f, shown = rp.frameAfter(k, shown, sel)
			if send("frame", f) != nil {
				return
			}
			last = k
		}
		if k == rp.Frames()-1 {
			send("end", struct{}{})
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		head += sim.Time(float64(speed) * tick.Seconds())
		k = rp.FrameAt(head)
	}
}

// streamLive sends a frame each time the lab is polled.
func (s *Server) streamLive(ctx context.Context, sel *ConnKey, send func(string, any) error) {
	l := s.live
	sub := l.subscribe(sel)
	defer l.unsubscribe(sub)
	var shown *Snapshot
	var lastErr error
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.notify:
		}
		f, cur, err := l.frame(sel, shown)
		if err != nil && (lastErr == nil || err.Error() != lastErr.Error()) {
			if send("error", apiError{err.Error()}) != nil {
				return
			}
		}
		lastErr = err
		if f == nil {
			continue
		}
		if send("frame", f) != nil {
			return
		}
		shown = cur
	}
}

func (s *Server) frame(w http.ResponseWriter, r *http.Request) {
	sel, err := selection(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{err.Error()})
		return
	}
	if s.live != nil {
		f, _, err := s.live.frame(sel, nil)
		if f == nil {
			if err == nil {
				err = errors.New("no snapshot yet: open the stream first")
			}
			writeJSON(w, http.StatusServiceUnavailable, apiError{err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, f)
		return
	}
	k, err := s.frameParam(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, s.replay.Frame(k, -1, sel))
}

// frameParam reads ?k=FRAME or ?t=NS (default: the first frame).
func (s *Server) frameParam(r *http.Request) (int, error) {
	rp := s.replay
	if r.URL.Query().Has("k") {
		k, err := intParam(r, "k", 0)
		if err != nil {
			return 0, err
		}
		return int(min(max(k, 0), int64(rp.Frames()-1))), nil
	}
	t, err := intParam(r, "t", int64(s.info.Start))
	if err != nil {
		return 0, err
	}
	return rp.FrameAt(sim.Time(t)), nil
}

func (s *Server) conns(w http.ResponseWriter, r *http.Request) {
	host := r.URL.Query().Get("host")
	if s.live != nil {
		s.live.mu.Lock()
		cur, prev := s.live.latest, s.live.prev
		s.live.mu.Unlock()
		rows := []ConnRow{}
		if cur != nil {
			rows = append(rows, connRows(prev, cur, host)...)
		}
		writeJSON(w, http.StatusOK, rows)
		return
	}
	k, err := s.frameParam(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, append([]ConnRow{}, s.replay.ConnRows(k, host)...))
}

func (s *Server) fault(w http.ResponseWriter, r *http.Request) {
	if s.live == nil {
		writeJSON(w, http.StatusBadRequest, apiError{"a replay cannot be changed: fault buttons work on live labs"})
		return
	}
	// A cross-site form cannot send JSON without a preflight, and a
	// script on another origin gets no CORS grant: only this page posts.
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeJSON(w, http.StatusUnsupportedMediaType, apiError{"POST /api/fault wants application/json"})
		return
	}
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
		writeJSON(w, http.StatusForbidden, apiError{"fault from another origin refused"})
		return
	}
	var f FaultRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{"bad fault request: " + err.Error()})
		return
	}
	if err := s.live.Fault(r.Context(), f); err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

type apiError struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
