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

	"github.com/mrlab/mrlab/fabric"
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

	reg *prometheus.Registry
	// wrap registers collectors on reg with the lab label on every series.
	wrap  prometheus.Registerer
	descs map[telemetry.Kind][]metricDesc
	labT  *prometheus.Desc
}

var _ telemetry.Sink = (*Exporter)(nil)

type metricDesc struct {
	m    telemetry.Metric
	desc *prometheus.Desc
	typ  prometheus.ValueType
	// scale converts the sample's unit to the metric's base unit (ns to
	// seconds, bit/s to bytes per second).
	scale float64
	// byReason: the link drops counter, one series per drop reason.
	byReason bool
}

// promName is a telemetry column's Prometheus name (after mrlab_KIND_),
// in base units with the unit last, as the Prometheus naming guide asks:
// bytes and seconds, rates in bytes per second, fractions as _ratio,
// counters ending in _total (added from the column's counter flag).
type promName struct {
	name  string
	scale float64
	help  string
}

var promNames = map[string]promName{
	"cwnd":            {"cwnd_bytes", 1, "Congestion window."},
	"inflight":        {"inflight_bytes", 1, "Bytes sent and not yet acknowledged."},
	"srtt_ns":         {"srtt_seconds", 1e-9, "Smoothed round-trip time."},
	"rto_ns":          {"rto_seconds", 1e-9, "Retransmission timeout."},
	"rate_bps":        {"delivery_rate_bytes_per_second", 1.0 / 8, "Delivery rate (bytes acknowledged) over the last sampling interval."},
	"send_bps":        {"send_rate_bytes_per_second", 1.0 / 8, "Rate the sender put bytes on the wire over the last sampling interval, retransmissions included."},
	"pacing_bps":      {"pacing_rate_bytes_per_second", 1.0 / 8, "Rate the sender paces at (0: unpaced)."},
	"ecn_frac":        {"ecn_marked_ratio", 1, "Fraction of the packets acknowledged in the last sampling interval that were CE marked."},
	"rate_hint_bps":   {"rate_hint_bytes_per_second", 1.0 / 8, "Receiver's fair-share rate grant (0: none yet)."},
	"bytes_acked":     {"acked_bytes", 1, "Bytes acknowledged."},
	"retx":            {"retransmissions", 1, "Packets retransmitted."},
	"rto_count":       {"timeouts", 1, "Retransmission timeouts."},
	"entropy_changes": {"entropy_changes", 1, "Entropy (UDP source port) changes: re-pathing decisions."},
	"entropy":         {"udp_source_port", 1, "Current UDP source port of the path (its ECMP entropy)."},
	"queue_bytes":     {"queue_bytes", 1, "Bytes waiting in the link direction's queue."},
	"tx_bytes":        {"transmit_bytes", 1, "Bytes that started serialization on the link direction."},
	"tx_packets":      {"transmit_packets", 1, "Packets that started serialization on the link direction."},
	"drops":           {"drops", 1, "Packets dropped on the link direction, by reason."},
	"marks":           {"ecn_marks", 1, "Packets CE marked on the link direction."},
	"util":            {"utilization_ratio", 1, "Fraction of the link direction's rate used over the last sampling interval."},
}

// labelNames are each kind's identifying labels.
var labelNames = map[telemetry.Kind][]string{
	telemetry.KindConn: {"host", "peer", "conn", "transport"},
	telemetry.KindPath: {"host", "peer", "conn", "path", "plane"},
	telemetry.KindLink: {"link", "direction"},
}

func labelValues(s *telemetry.Sample) []string {
	switch s.Kind {
	case telemetry.KindConn:
		return []string{s.Host, s.Peer, strconv.FormatUint(uint64(s.Conn), 10), s.Transport}
	case telemetry.KindPath:
		return []string{s.Host, s.Peer, strconv.FormatUint(uint64(s.Conn), 10), strconv.Itoa(s.Path), strconv.Itoa(s.Plane)}
	}
	// "p0-leaf0-spine1:AtoB": the link, and the direction (AtoB from its
	// first-named end to its second, BtoA back).
	link, dir := s.Link, ""
	if i := strings.LastIndexByte(link, ':'); i >= 0 {
		link, dir = link[:i], link[i+1:]
	}
	return []string{link, dir}
}

// New returns an Exporter with its own registry (no Go runtime metrics:
// the lab's figures only). Every series it serves, its own and those of
// the collectors Register adds, carries the label lab="LAB" (so one
// Prometheus scraping several labs, or a lab run twice under two names,
// keeps their series apart); an empty lab adds no label.
func New(lab string) *Exporter {
	e := &Exporter{reg: prometheus.NewRegistry(), descs: map[telemetry.Kind][]metricDesc{}}
	e.wrap = e.reg
	if lab != "" {
		e.wrap = prometheus.WrapRegistererWith(prometheus.Labels{"lab": lab}, e.reg)
	}
	e.labT = prometheus.NewDesc("mrlab_lab_time_seconds", "Lab time of the latest telemetry sample.", nil, nil)
	for _, k := range []telemetry.Kind{telemetry.KindConn, telemetry.KindPath, telemetry.KindLink} {
		for _, m := range telemetry.Metrics(k) {
			pn, ok := promNames[m.Name]
			if !ok {
				// A column added without a Prometheus name: export it
				// under its own, so it is not silently lost (the naming
				// test flags it).
				pn = promName{name: m.Name, scale: 1, help: m.Help}
			}
			name := "mrlab_" + k.String() + "_" + pn.name
			typ := prometheus.GaugeValue
			if m.Counter {
				typ = prometheus.CounterValue
				name += "_total"
			}
			labels := labelNames[k]
			byReason := k == telemetry.KindLink && m.Name == "drops"
			if byReason {
				labels = append(append([]string(nil), labels...), "reason")
			}
			help := pn.help
			if help == "" {
				help = m.Name
			}
			e.descs[k] = append(e.descs[k], metricDesc{m: m, typ: typ, scale: pn.scale, byReason: byReason,
				desc: prometheus.NewDesc(name, help, labels, nil)})
		}
	}
	e.wrap.MustRegister(e)
	return e
}

// Register adds a collector of the caller's own to the exporter's registry,
// so /metrics serves its series too (the live runtime's NIC drops and
// host interface counters). The collector is called on scrape goroutines.
func (e *Exporter) Register(c prometheus.Collector) error { return e.wrap.Register(c) }

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
			if d.byReason {
				collectDrops(ch, d, s, lv)
				continue
			}
			m, err := prometheus.NewConstMetric(d.desc, d.typ, d.m.Value(s)*d.scale, lv...)
			if err != nil {
				ch <- prometheus.NewInvalidMetric(d.desc, err)
				continue
			}
			ch <- m
		}
	}
}

// collectDrops sends a link direction's drops, one series per reason
// (every reason, so rate() sees a series from its start), plus "unknown"
// for drops its source did not attribute.
func collectDrops(ch chan<- prometheus.Metric, d metricDesc, s *telemetry.Sample, lv []string) {
	labels := append(append([]string(nil), lv...), "")
	send := func(reason string, v uint64) {
		labels[len(labels)-1] = reason
		m, err := prometheus.NewConstMetric(d.desc, d.typ, float64(v), labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(d.desc, err)
		}
		ch <- m
	}
	var attributed uint64
	for r := fabric.DropReason(1); int(r) < fabric.NumDropReasons; r++ {
		send(r.String(), s.DropsBy[r])
		attributed += s.DropsBy[r]
	}
	if s.Drops > attributed {
		send("unknown", s.Drops-attributed)
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
