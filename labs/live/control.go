package live

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mrlab/mrlab/labs/hostns"
	"github.com/mrlab/mrlab/observe/telemetry/prom"
)

// The control API, served over HTTP on the lab's Unix socket (mode 0600:
// only root controls a lab; no control endpoint listens on TCP):
//
//	GET  /status  -> Status
//	POST /fault   FaultRequest -> {}
//	POST /perf    PerfRequest  -> PerfResult (when the run ends)
//	POST /down    -> {} and the lab stops
//	GET  /capture?point=P[&filter=F][&count=N] -> pcapng stream (package capture)
//	GET  /trace[?filter=F][&fabric=drops,marks] -> protocol trace lines, streamed (package prototrace)
//	GET  /telemetry -> the latest telemetry sample (prom.SnapshotJSON)
//
// The last three are the lab engine's (router). Prometheus metrics are not
// on the socket but on a loopback TCP address (State.Metrics), so a
// Prometheus server can scrape them without root.
//
// Errors are {"error": "..."} with status 400 (the request was wrong: an
// unknown link, a bad op) or 503 (the lab is stopping).

// apiError is the body of a failed request.
type apiError struct {
	Error string `json:"error"`
}

func (l *Lab) serve() error {
	sock := l.state.Socket
	// claim() made sure no live lab owns this name; a leftover socket
	// file from a crash is ours to replace.
	if err := os.Remove(sock); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing old control socket: %w", err)
	}
	// Create the socket with no permissions for group and others from the
	// start, not only after a chmod.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", sock)
	syscall.Umask(old)
	if err != nil {
		return fmt.Errorf("lab %s: control socket: %w", l.name, err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("lab %s: control socket: %w", l.name, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		s, err := l.Status(r.Context())
		reply(w, s, err)
	})
	mux.HandleFunc("POST /fault", func(w http.ResponseWriter, r *http.Request) {
		var f FaultRequest
		if !decode(w, r, &f) {
			return
		}
		reply(w, struct{}{}, l.Fault(r.Context(), f))
	})
	mux.HandleFunc("POST /perf", func(w http.ResponseWriter, r *http.Request) {
		var p PerfRequest
		if !decode(w, r, &p) {
			return
		}
		res, err := l.Perf(r.Context(), p)
		reply(w, res, err)
	})
	mux.HandleFunc("POST /down", func(w http.ResponseWriter, r *http.Request) {
		reply(w, struct{}{}, nil)
		l.Stop()
	})
	if r, ok := l.eng.(router); ok {
		if c := r.Routes(l.pacer, mux); c != nil {
			l.closers = append(l.closers, c)
		}
	}
	if l.opts.Extend != nil {
		l.opts.Extend(l, mux)
	}
	// The metrics endpoint is listening (and in the state file) before the
	// control socket answers: `mrlab up` reports both once it does.
	mln, err := l.listenMetrics()
	if err != nil {
		ln.Close()
		return err
	}
	l.ln = ln
	l.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	if mln != nil {
		go l.serveMetrics(mln)
	}
	go l.srv.Serve(ln)
	return nil
}

// decode reads a JSON request body, answering 400 on failure.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{"bad request body: " + err.Error()})
		return false
	}
	return true
}

func reply(w http.ResponseWriter, v any, err error) {
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, v)
	case errors.Is(err, ErrStopped):
		writeJSON(w, http.StatusServiceUnavailable, apiError{err.Error()})
	default:
		writeJSON(w, http.StatusBadRequest, apiError{err.Error()})
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// Client talks to a running lab's control socket.
type Client struct {
	lab    string
	socket string
	hc     *http.Client
}

// NewClient returns a client for the lab whose socket is at socket.
func NewClient(lab, socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}
	return &Client{lab: lab, socket: socket, hc: &http.Client{Transport: tr}}
}

// Dial finds lab's socket from its state file under dir.
func Dial(dir, lab string) (*Client, error) {
	st, err := ReadState(dir, lab)
	if err != nil {
		return nil, err
	}
	return NewClient(lab, st.Socket), nil
}

// clientError is an error the lab answered with.
type clientError struct {
	Lab    string
	Status int
	Msg    string
}

func (e *clientError) Error() string { return fmt.Sprintf("lab %s: %s", e.Lab, e.Msg) }

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://lab"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("lab %s: control socket %s: %w", c.lab, c.socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("lab %s: reading reply to %s: %w", c.lab, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var ae apiError
		if json.Unmarshal(data, &ae) != nil || ae.Error == "" {
			ae.Error = fmt.Sprintf("%s %s: HTTP %d", method, path, resp.StatusCode)
		}
		return &clientError{Lab: c.lab, Status: resp.StatusCode, Msg: ae.Error}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("lab %s: decoding reply to %s: %w", c.lab, path, err)
		}
	}
	return nil
}

// Status fetches the lab's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	err := c.call(ctx, http.MethodGet, "/status", nil, &s)
	return s, err
}

// Fault applies a fault.
func (c *Client) Fault(ctx context.Context, f FaultRequest) error {
	return c.call(ctx, http.MethodPost, "/fault", f, nil)
}

// Perf runs a workload and returns its result when it ends.
func (c *Client) Perf(ctx context.Context, p PerfRequest) (PerfResult, error) {
	var r PerfResult
	err := c.call(ctx, http.MethodPost, "/perf", p, &r)
	return r, err
}

// Capture opens a pcapng stream of a capture point (a host, "h0-p0", a
// link direction, a switch: see package capture) with an optional filter;
// count > 0 ends it after that many packets. The caller reads and closes it.
func (c *Client) Capture(ctx context.Context, point, filter string, count int) (io.ReadCloser, error) {
	q := url.Values{"point": {point}}
	if filter != "" {
		q.Set("filter", filter)
	}
	if count > 0 {
		q.Set("count", strconv.Itoa(count))
	}
	return c.stream(ctx, "/capture", q)
}

// Trace opens the lab's protocol trace: one text line per transport
// decision, as they happen, until ctx ends or the lab stops. filter is
// prototrace's (host=, conn=, path=, grep=, re=; "" keeps everything);
// fabric lists the fabric events to include ("drops", "drops,marks",
// "none"; "" means none). The caller reads and closes it.
func (c *Client) Trace(ctx context.Context, filter, fabric string) (io.ReadCloser, error) {
	q := url.Values{}
	if filter != "" {
		q.Set("filter", filter)
	}
	if fabric != "" {
		q.Set("fabric", fabric)
	}
	return c.stream(ctx, "/trace", q)
}

// Telemetry fetches the lab's latest telemetry sample: every connection,
// path and link direction at one instant of lab time.
func (c *Client) Telemetry(ctx context.Context) (prom.SnapshotJSON, error) {
	var s prom.SnapshotJSON
	err := c.call(ctx, http.MethodGet, "/telemetry", nil, &s)
	return s, err
}

// stream GETs a streaming endpoint and returns its body.
func (c *Client) stream(ctx context.Context, path string, q url.Values) (io.ReadCloser, error) {
	u := "http://lab" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("lab %s: control socket %s: %w", c.lab, c.socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, &clientError{Lab: c.lab, Status: resp.StatusCode, Msg: fmt.Sprintf("%s: %s", path, strings.TrimSpace(string(msg)))}
	}
	return resp.Body, nil
}

// Down asks the lab to stop.
func (c *Client) Down(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/down", nil, nil)
}

// Down stops lab and removes what it created: it asks a running lab to stop
// and waits for it; if the lab's process is gone (a crash), it removes the
// namespaces, socket and state file its state records. It fails with
// ErrNotRunning when there is no state file.
func Down(ctx context.Context, dir, lab string, ops Ops) error {
	if ops == nil {
		ops = SystemOps{}
	}
	st, err := ReadState(dir, lab)
	if err != nil {
		return err
	}
	if ops.ProcessAlive(st.PID, st.StartTicks) {
		if err := NewClient(lab, st.Socket).Down(ctx); err != nil {
			// The process is alive but not answering: ask it with a
			// signal (a foreground lab tears down on SIGTERM).
			if kerr := syscall.Kill(st.PID, syscall.SIGTERM); kerr != nil {
				return fmt.Errorf("lab %s (pid %d): %w; SIGTERM: %v", lab, st.PID, err, kerr)
			}
		}
		if !waitGone(ctx, dir, lab, st, ops, 20*time.Second) {
			return fmt.Errorf("lab %s (pid %d) did not stop within 20s", lab, st.PID)
		}
	}
	// Gone: whatever is left is stale.
	st, err = ReadState(dir, lab)
	if errors.Is(err, ErrNotRunning) {
		return nil
	}
	if err != nil {
		return err
	}
	return cleanup(dir, st, ops)
}

// waitGone waits until the lab's process has exited or its state file is
// gone.
func waitGone(ctx context.Context, dir, lab string, st *State, ops Ops, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if !ops.ProcessAlive(st.PID, st.StartTicks) {
			return true
		}
		if _, err := os.Stat(StatePath(dir, lab)); errors.Is(err, fs.ErrNotExist) {
			// Torn down; give the process a moment to exit.
			time.Sleep(50 * time.Millisecond)
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// HostNamespace returns the namespace of host in a running lab. It fails
// for an unknown host, listing the lab's hosts, and for a lab whose process
// is gone: its namespaces may still exist, but nothing moves packets for
// them.
func HostNamespace(dir, lab, host string) (string, error) {
	st, err := ReadState(dir, lab)
	if err != nil {
		return "", err
	}
	if !(SystemOps{}).ProcessAlive(st.PID, st.StartTicks) {
		return "", fmt.Errorf("lab %s: %w: its process %d is gone (`mrlab down %s` removes what it left)", lab, ErrNotRunning, st.PID, lab)
	}
	h, ok := st.Host(host)
	if !ok {
		return "", fmt.Errorf("lab %s has no host %q (hosts: %v)", lab, host, st.HostNames())
	}
	if h.Namespace == "" {
		return "", fmt.Errorf("lab %s host %s has no namespace (a test lab on fake devices)", lab, host)
	}
	return h.Namespace, nil
}

// Exec starts cmd in host's namespace of the running lab.
func Exec(dir, lab, host string, cmd *exec.Cmd) error {
	ns, err := HostNamespace(dir, lab, host)
	if err != nil {
		return err
	}
	return hostns.StartIn(ns, cmd)
}
