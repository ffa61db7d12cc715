// Package prom exports a live lab's telemetry to Prometheus and to `mrlab
// top`. An Exporter is a telemetry.Sink: the sampler writes to it on the
// lab's loop goroutine, and every completed sampling instant becomes the
// snapshot that scrapes (any goroutine) read.
//
// Only the live runtime imports this package, so the Prometheus client
// stays out of the simulator and the core packages.
package prom

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/observe/telemetry"
)

// Exporter holds the latest telemetry snapshot and serves it.
type Exporter struct {
	// pending is the instant being written (loop goroutine only).
	pending []telemetry.Sample

	mu     sync.Mutex
	latest []telemetry.Sample
	at     sim.Time

	reg   *prometheus.Registry
	descs map[telemetry.Kind][]metricDesc
	labT  *prometheus.Desc
}

var _ telemetry.Sink = (*Exporter)(nil)

type metricDesc struct {
	m    telemetry.Metric
	desc *prometheus.Desc
	typ  prometheus.ValueType
	// scale converts the sample's unit to the metric's (ns to seconds).
	scale float64
}

// labelNames are each kind's identifying labels.
var labelNames = map[telemetry.Kind][]string{
	telemetry.KindConn: {"host", "peer", "conn", "transport"},
	telemetry.KindPath: {"host", "peer", "conn", "path", "plane"},
	telemetry.KindLink: {"link"},
}

func labelValues(s *telemetry.Sample) []string {
	switch s.Kind {
	case telemetry.KindConn:
		return []string{s.Host, s.Peer, strconv.FormatUint(uint64(s.Conn), 10), s.Transport}
	case telemetry.KindPath:
		return []string{s.Host, s.Peer, strconv.FormatUint(uint64(s.Conn), 10), strconv.Itoa(s.Path), strconv.Itoa(s.Plane)}
	}
	return []string{s.Link}
}

// New returns an Exporter with its own registry (no Go runtime metrics:
// the lab's figures only).
func New() *Exporter {
	e := &Exporter{reg: prometheus.NewRegistry(), descs: map[telemetry.Kind][]metricDesc{}}
	e.labT = prometheus.NewDesc("mrlab_lab_time_seconds", "Lab time of the latest telemetry sample.", nil, nil)
	for _, k := range []telemetry.Kind{telemetry.KindConn, telemetry.KindPath, telemetry.KindLink} {
		for _, m := range telemetry.Metrics(k) {
			name := "mrlab_" + k.String() + "_" + m.Name
			scale := 1.0
			if strings.HasSuffix(name, "_ns") {
				name = strings.TrimSuffix(name, "_ns") + "_seconds"
				scale = 1e-9
			}
			typ := prometheus.GaugeValue
			if m.Counter {
				typ = prometheus.CounterValue
				name += "_total"
			}
			help := m.Help
			if help == "" {
				help = m.Name
			}
			e.descs[k] = append(e.descs[k], metricDesc{m: m, typ: typ, scale: scale,
				desc: prometheus.NewDesc(name, help, labelNames[k], nil)})
		}
	}
	e.reg.MustRegister(e)
	return e
}

// Register adds a collector of the caller's own to the exporter's registry,
// so /metrics serves its series too (the live runtime's NIC drops and
// host interface counters). The collector is called on scrape goroutines.
func (e *Exporter) Register(c prometheus.Collector) error { return e.reg.Register(c) }

// Write implements telemetry.Sink (loop goroutine).
func (e *Exporter) Write(s *telemetry.Sample) error {
	e.pending = append(e.pending, *s)
	return nil
}

// EndBatch implements telemetry.Sink: the instant's samples become the
// snapshot.
func (e *Exporter) EndBatch(now sim.Time) error {
	e.mu.Lock()
	e.latest, e.pending = e.pending, e.latest[:0]
	e.at = now
	e.mu.Unlock()
	return nil
}

// Snapshot returns a copy of the latest instant's samples and its time.
func (e *Exporter) Snapshot() (sim.Time, []telemetry.Sample) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.at, append([]telemetry.Sample(nil), e.latest...)
}

// Describe implements prometheus.Collector.
func (e *Exporter) Describe(ch chan<- *prometheus.Desc) {
	ch <- e.labT
	for _, ds := range e.descs {
		for _, d := range ds {
			ch <- d.desc
		}
	}
}

// Collect implements prometheus.Collector.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	at, samples := e.Snapshot()
	ch <- prometheus.MustNewConstMetric(e.labT, prometheus.GaugeValue, at.Seconds())
	for i := range samples {
		s := &samples[i]
		lv := labelValues(s)
		for _, d := range e.descs[s.Kind] {
			m, err := prometheus.NewConstMetric(d.desc, d.typ, d.m.Value(s)*d.scale, lv...)
			if err != nil {
				ch <- prometheus.NewInvalidMetric(d.desc, err)
				continue
			}
			ch <- m
		}
	}
}

// Handler serves /metrics (Prometheus text format) and /telemetry (the
// latest snapshot as JSON, which `mrlab top` reads).
func (e *Exporter) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /telemetry", e.serveSnapshot)
	return mux
}

// SnapshotJSON is the /telemetry reply.
type SnapshotJSON struct {
	TimeNS  sim.Time           `json:"t_ns"`
	Samples []telemetry.Sample `json:"samples"`
}

// ServeSnapshot serves the latest snapshot as JSON; the live runtime also
// mounts it on the control socket as GET /telemetry.
func (e *Exporter) ServeSnapshot(w http.ResponseWriter, r *http.Request) { e.serveSnapshot(w, r) }

func (e *Exporter) serveSnapshot(w http.ResponseWriter, _ *http.Request) {
	at, samples := e.Snapshot()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(SnapshotJSON{TimeNS: at, Samples: samples})
}

// ErrNotLoopback is returned by Listen for an address other than
// 127.0.0.1 / ::1: a lab's telemetry is not for the network.
var ErrNotLoopback = errors.New("telemetry endpoint must bind to a loopback address")

// Listen opens the exporter's TCP listener. addr must name a loopback host
// ("127.0.0.1:9464"; port 0 picks one).
func Listen(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("telemetry endpoint %q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("telemetry endpoint %q: %w", addr, ErrNotLoopback)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("telemetry endpoint: %w", err)
	}
	return ln, nil
}
