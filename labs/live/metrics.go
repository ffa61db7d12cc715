package live

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mrlab/mrlab/observe/telemetry/prom"
	"github.com/mrlab/mrlab/observe/web"
)

// DefaultMetricsAddr is where a lab serves its Prometheus endpoint unless
// told otherwise: loopback only, on a port the kernel picks. The chosen
// address is in the state file and in `mrlab status`.
const DefaultMetricsAddr = "127.0.0.1:0"

// metricsOff, as Options.Metrics, serves no Prometheus endpoint.
const metricsOff = "off"

// ValidMetricsAddr checks a metrics address before anything is brought up:
// metricsOff, or host:port with a loopback IP host (127.0.0.1, ::1) and a
// port 0..65535. A lab's telemetry is not for the network, so "localhost"
// and wildcard addresses are refused (prom.ErrNotLoopback).
func ValidMetricsAddr(addr string) error {
	if addr == metricsOff {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("metrics address %q: want 127.0.0.1:PORT or %q: %w", addr, metricsOff, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("metrics address %q: host %q: %w", addr, host, prom.ErrNotLoopback)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("metrics address %q: port %q: want 0..65535", addr, port)
	}
	return nil
}

// listenMetrics opens the lab's Prometheus endpoint if the engine exports
// telemetry and Options.Metrics does not turn it off, and records its
// address in the state. The server starts with the control server.
func (l *Lab) listenMetrics() (net.Listener, error) {
	ex, ok := l.eng.(metricsExporter)
	if !ok || l.opts.Metrics == metricsOff {
		return nil, nil
	}
	if err := ValidMetricsAddr(l.opts.Metrics); err != nil {
		return nil, fmt.Errorf("lab %s: %w", l.name, err)
	}
	ln, err := prom.Listen(l.opts.Metrics)
	if err != nil {
		return nil, fmt.Errorf("lab %s: %w", l.name, err)
	}
	l.state.Metrics = ln.Addr().String()
	if err := l.state.save(l.opts.RunDir); err != nil {
		ln.Close()
		return nil, err
	}
	if r, ok := l.eng.(registrar); ok {
		if err := r.RegisterCollector(newLabCollector(l)); err != nil {
			ln.Close()
			return nil, fmt.Errorf("lab %s: metrics: %w", l.name, err)
		}
	}
	l.msrv = &http.Server{Handler: web.RequireLoopbackHost("the lab's metrics endpoint", ex.MetricsHandler()), ReadHeaderTimeout: 5 * time.Second}
	return ln, nil
}

// serveMetrics runs the metrics server on ln until teardown shuts it down.
func (l *Lab) serveMetrics(ln net.Listener) {
	if err := l.msrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		l.opts.Logf("warning: lab %s: metrics endpoint stopped: %v", l.name, err)
	}
}

// registrar is an Engine whose metrics endpoint takes collectors of the
// runtime's own (the lab engine's telemetry exporter).
type registrar interface {
	RegisterCollector(c prometheus.Collector) error
}

// labCollector serves what `mrlab status` shows beyond telemetry: each
// NIC's drops by reason, refused connections, access and protection
// errors, corrupted and duplicate packets and the data oracle's checks
// (per host), each link's corrupted and duplicated packets, and the
// kernel's counters of each host's mr0, and the loop's timing: its run-
// queue wait, starved and warned windows (runqueue.go). A scrape reads
// them through the loop (one status per scrape).
type labCollector struct {
	l       *Lab
	nicDrop *prometheus.Desc
	nicSrc  *prometheus.Desc
	nicCtr  map[string]*prometheus.Desc
	kernel  map[string]*prometheus.Desc
	link    map[string]*prometheus.Desc
	loop    map[string]*prometheus.Desc
}

// nicCounters are the NIC counters exported besides drops, with help.
var nicCounters = map[string]string{
	"refused":                 "Connection requests the NIC's listener refused (not asked for).",
	"access_errors":           "Peers' requests refused by the region table (bad rkey, range or permission).",
	"protection_errors":       "Local scatter-gather elements refused by the region table.",
	"host_tx_packets":         "Packets from the host kernel the NIC sent.",
	"host_rx_packets":         "Packets the NIC delivered to the host kernel.",
	"half_open_opened":        "Passive connections opened by a setup request (half-open until the dialer completes the handshake).",
	"half_open_evicted":       "Half-open connections a listener's bound evicted.",
	"checksum_drops":          "Packets the NIC's connections dropped for a bad checksum of their transport's own (MetaRoCE's CRC32C).",
	"corrupt_dropped":         "Corrupted packets the NIC refused to place: its ICRC drops plus its connections' checksum drops.",
	"dup_received":            "Data packets the NIC's connections received again (duplicates).",
	"oracle_messages_checked": "Messages of the lab's perf runs the data oracle checked whole at completion in this host's memory.",
	"oracle_failures":         "Data oracle failures in this host's memory: a message wrong at its completion, or bytes placed where no message was due.",
}

func newLabCollector(l *Lab) *labCollector {
	c := &labCollector{l: l, nicCtr: map[string]*prometheus.Desc{}, kernel: map[string]*prometheus.Desc{},
		loop: map[string]*prometheus.Desc{
			"cpu_wait": prometheus.NewDesc("mrlab_loop_cpu_wait_seconds_total", "Time the lab loop's thread waited on a CPU run queue (runnable, not running): input waits meanwhile, which event lateness does not count.", nil, nil),
			"starved":  prometheus.NewDesc("mrlab_loop_starved_windows_total", "Periods, not late, in which inputs may have waited for the lab loop's thread to get a CPU more than 1% of the period (labs/live/runqueue.go).", nil, nil),
			"warnings": prometheus.NewDesc("mrlab_loop_lag_warnings_total", "Periods in which the lab fell behind the wall clock by more than 1% of the period.", nil, nil),
		},
		link: map[string]*prometheus.Desc{
			"corrupted":  prometheus.NewDesc("mrlab_link_corrupted_total", "Packets the link's impairment flipped a bit of (both directions).", []string{"link"}, nil),
			"duplicated": prometheus.NewDesc("mrlab_link_duplicated_total", "Packets the link's impairment sent twice (both directions).", []string{"link"}, nil),
		},
		nicDrop: prometheus.NewDesc("mrlab_nic_drops_total", "Packets a NIC dropped, by reason.", []string{"host", "reason"}, nil),
		nicSrc: prometheus.NewDesc("mrlab_nic_source", "A NIC's counters per source address: setup requests, established, half_open (now), "+
			"refused_half_open, refused_limited, evicted, access_errors, poisoned_conns (connections errored for an access error), limited (1 while refused).",
			[]string{"host", "source", "counter"}, nil)}
	for k, help := range nicCounters {
		c.nicCtr[k] = prometheus.NewDesc("mrlab_nic_"+k+"_total", help, []string{"host"}, nil)
	}
	for _, k := range []string{"tx_packets", "tx_dropped", "tx_errors", "rx_packets", "rx_dropped", "rx_errors", "qdisc_dropped"} {
		c.kernel[k] = prometheus.NewDesc("mrlab_host_mr0_"+k+"_total",
			"The host kernel's own counter of its mr0 (tx: towards the lab).", []string{"host"}, nil)
	}
	return c
}

func (c *labCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.nicDrop
	ch <- c.nicSrc
	for _, d := range c.nicCtr {
		ch <- d
	}
	for _, d := range c.kernel {
		ch <- d
	}
	for _, d := range c.link {
		ch <- d
	}
	for _, d := range c.loop {
		ch <- d
	}
}

func (c *labCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := c.l.Status(ctx)
	if err != nil {
		return // stopping: the telemetry series still answer
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for host, st := range s.Engine.NICs {
		for k, v := range st {
			if reason, ok := strings.CutPrefix(k, nicDropPrefix); ok {
				counter(c.nicDrop, v, host, reason)
			} else if src, ok := strings.CutPrefix(k, nicSourcePrefix); ok {
				if i := strings.LastIndexByte(src, ':'); i > 0 {
					ch <- prometheus.MustNewConstMetric(c.nicSrc, prometheus.GaugeValue, float64(v), host, src[:i], src[i+1:])
				}
			} else if d := c.nicCtr[k]; d != nil {
				counter(d, v, host)
			}
		}
	}
	if s.Lag.LoopWait >= 0 {
		ch <- prometheus.MustNewConstMetric(c.loop["cpu_wait"], prometheus.CounterValue, s.Lag.LoopWait.Seconds())
	}
	counter(c.loop["starved"], s.Lag.StarvedWindows)
	counter(c.loop["warnings"], s.Lag.Warnings)
	for _, k := range s.Engine.Links {
		counter(c.link["corrupted"], k.Corrupted, k.Name)
		counter(c.link["duplicated"], k.Duplicated, k.Name)
	}
	for _, h := range s.Hosts {
		if k := h.Kernel; k != nil {
			for name, v := range map[string]uint64{"tx_packets": k.TxPackets, "tx_dropped": k.TxDropped, "tx_errors": k.TxErrors,
				"rx_packets": k.RxPackets, "rx_dropped": k.RxDropped, "rx_errors": k.RxErrors, "qdisc_dropped": k.QdiscDropped} {
				counter(c.kernel[name], v, h.Name)
			}
		}
	}
}
