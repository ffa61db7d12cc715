package live

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/observe/capture"
	"github.com/mrlab/mrlab/observe/web"
)

// The web view's read-only endpoints on the control socket (mrlab web
// serves the page and polls these while a page is open):
//
//	GET /web/topology                    -> web.Topology (link rates as capped)
//	GET /web/snapshot[?paths=H/N,H/N]    -> web.Snapshot: every link direction,
//	                                        switch, NIC and connection now, with the
//	                                        paths and routes of the listed connections
//
// A snapshot runs on the loop goroutine between events; nothing is done
// for the web view while nobody asks. Faults from the page go through
// POST /fault like the CLI's.

// webRoutes mounts the web view's endpoints (after Start: the fabric and
// NICs exist).
func (e *labEngine) webRoutes(run capture.Runner, mux *http.ServeMux) {
	probe := web.NewProbe(e.net)
	for i, nic := range e.nics {
		probe.AddNIC(e.hosts[i].Name, nic)
	}
	topo := probe.Topology()
	mux.HandleFunc("GET /web/topology", func(w http.ResponseWriter, r *http.Request) {
		writeCompactJSON(w, topo)
	})
	mux.HandleFunc("GET /web/snapshot", func(w http.ResponseWriter, r *http.Request) {
		keys, err := parseConnKeys(r.URL.Query().Get("paths"))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, apiError{err.Error()})
			return
		}
		want := map[web.ConnKey]bool{}
		for _, k := range keys {
			want[k] = true
		}
		var snap *web.Snapshot
		err = run.Do(r.Context(), func(now sim.Time) {
			snap = probe.Snapshot(now, func(k web.ConnKey) bool { return want[k] })
		})
		if err != nil {
			reply(w, nil, err)
			return
		}
		writeCompactJSON(w, snap)
	})
}

// writeCompactJSON answers 200 with v as unindented JSON (snapshots are
// polled several times a second).
func writeCompactJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// parseConnKeys reads "h0/3,h2/1".
func parseConnKeys(s string) ([]web.ConnKey, error) {
	var keys []web.ConnKey
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		host, id, ok := strings.Cut(f, "/")
		n, err := strconv.ParseUint(id, 10, 32)
		if !ok || host == "" || err != nil {
			return nil, fmt.Errorf("paths: %q: want HOST/CONN, e.g. h0/3", f)
		}
		keys = append(keys, web.ConnKey{Host: host, ID: uint32(n)})
	}
	return keys, nil
}

// WebTopology fetches the lab's topology for the web view.
func (c *Client) WebTopology(ctx context.Context) (web.Topology, error) {
	var t web.Topology
	err := c.call(ctx, http.MethodGet, "/web/topology", nil, &t)
	return t, err
}

// WebSnapshot fetches the lab's state now, with the paths of the listed
// connections.
func (c *Client) WebSnapshot(ctx context.Context, paths []web.ConnKey) (*web.Snapshot, error) {
	q := make([]string, len(paths))
	for i, k := range paths {
		q[i] = k.Host + "/" + strconv.FormatUint(uint64(k.ID), 10)
	}
	path := "/web/snapshot"
	if len(q) > 0 {
		path += "?" + url.Values{"paths": {strings.Join(q, ",")}}.Encode()
	}
	var s web.Snapshot
	if err := c.call(ctx, http.MethodGet, path, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// WebLab is a running lab as the web view reaches it (web.Lab), through
// its control socket.
type WebLab struct{ C *Client }

var _ web.Lab = WebLab{}

// Topology implements web.Lab.
func (l WebLab) Topology(ctx context.Context) (web.Topology, error) { return l.C.WebTopology(ctx) }

// Snapshot implements web.Lab.
func (l WebLab) Snapshot(ctx context.Context, paths []web.ConnKey) (*web.Snapshot, error) {
	return l.C.WebSnapshot(ctx, paths)
}

// Trace implements web.Lab: the protocol trace with the fabric's drops.
func (l WebLab) Trace(ctx context.Context) (io.ReadCloser, error) { return l.C.Trace(ctx, "", "drops") }

// Fault implements web.Lab with the control socket's POST /fault, whose
// validation is the CLI's.
func (l WebLab) Fault(ctx context.Context, f web.FaultRequest) error {
	return l.C.Fault(ctx, FaultRequest{Target: f.Target, Name: f.Name, Action: f.Action, Impair: strings.Fields(f.Impair)})
}
