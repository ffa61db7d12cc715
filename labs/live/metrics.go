package live

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/mrlab/mrlab/observe/telemetry/prom"
)

// DefaultMetricsAddr is where a lab serves its Prometheus endpoint unless
// told otherwise: loopback only, on a port the kernel picks. The chosen
// address is in the state file and in `mrlab status`.
const DefaultMetricsAddr = "127.0.0.1:0"

// MetricsOff, as Options.Metrics, serves no Prometheus endpoint.
const MetricsOff = "off"

// ValidMetricsAddr checks a metrics address before anything is brought up:
// MetricsOff, or host:port with a loopback IP host (127.0.0.1, ::1) and a
// port 0..65535. A lab's telemetry is not for the network, so "localhost"
// and wildcard addresses are refused (prom.ErrNotLoopback).
func ValidMetricsAddr(addr string) error {
	if addr == MetricsOff {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("metrics address %q: want 127.0.0.1:PORT or %q: %w", addr, MetricsOff, err)
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
	ex, ok := l.eng.(MetricsExporter)
	if !ok || l.opts.Metrics == MetricsOff {
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
	l.msrv = &http.Server{Handler: ex.MetricsHandler(), ReadHeaderTimeout: 5 * time.Second}
	return ln, nil
}

// serveMetrics runs the metrics server on ln until teardown shuts it down.
func (l *Lab) serveMetrics(ln net.Listener) {
	if err := l.msrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		l.opts.Logf("warning: lab %s: metrics endpoint stopped: %v", l.name, err)
	}
}
