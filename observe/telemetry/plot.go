package telemetry

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot/plotter"

	"github.com/mrlab/mrlab/observe/chart"
)

// PlotSpec says what to draw: one metric over time, one line per series.
type PlotSpec struct {
	// Kind selects connection, path or link series.
	Kind Kind
	// Metric is a numeric column name: cwnd, rate_bps, srtt_ns,
	// queue_bytes, ...
	Metric string
	// Host and Conn select one connection's series (Kind conn or path);
	// Host "" takes every connection.
	Host string
	Conn uint32
	// Links selects link series by name (Kind link); empty takes all.
	Links []string
	// Title overrides the default title.
	Title string
	// Format is "png" or "svg".
	Format string
	// Width and Height in pixels; 0 means chart's default, 1200x750.
	Width, Height int
}

// ErrNoData is returned when a plot would have no series.
var ErrNoData = errors.New("no samples match")

// unit scales a metric for display and names it for people.
type unit struct {
	scale float64
	label string // the unit
	name  string // what the metric is
}

// metricNames are the plots' words for the columns.
var metricNames = map[string]string{
	"cwnd": "congestion window", "inflight": "bytes in flight", "srtt_ns": "smoothed RTT", "rto_ns": "RTO",
	"rate_bps": "delivery rate", "send_bps": "send rate", "pacing_bps": "pacing rate", "rate_hint_bps": "receiver's rate hint",
	"ecn_frac": "CE-marked fraction", "queue_bytes": "queue depth", "util": "utilization", "bytes_acked": "bytes acknowledged",
	"retx": "retransmissions", "rto_count": "timeouts", "tx_bytes": "bytes sent", "drops": "drops", "marks": "CE marks",
}

func metricUnit(metric string) unit {
	u := unit{scale: 1, name: metric}
	if n, ok := metricNames[metric]; ok {
		u.name = n
	}
	switch {
	case strings.HasSuffix(metric, "_bps"):
		u.scale, u.label = 1e-9, "Gb/s"
	case strings.HasSuffix(metric, "_ns"):
		u.scale, u.label = 1e-3, "us"
	case metric == "cwnd" || metric == "inflight" || metric == "queue_bytes":
		u.scale, u.label = 1.0/1024, "KiB"
	}
	return u
}

// Plot draws spec from samples (in time order) as PNG or SVG to w: e.g.
// cwnd over time per path of one connection, or queue depth per link.
func Plot(w io.Writer, samples []Sample, spec PlotSpec) error {
	col := -1
	for i, c := range columns {
		if c.name == spec.Metric && c.typ != colString && c.kinds.has(spec.Kind) {
			col = i
		}
	}
	if col < 0 {
		return fmt.Errorf("plotting: %q is not a numeric %s metric (try %s)", spec.Metric, spec.Kind, strings.Join(MetricNames(spec.Kind), ", "))
	}
	format := spec.Format
	if format == "" {
		format = "png"
	}
	if format != "png" && format != "svg" {
		return fmt.Errorf("plotting: format %q (want png or svg)", format)
	}
	u := metricUnit(spec.Metric)
	series := map[string]plotter.XYs{}
	var order []string
	var tmax float64
	for i := range samples {
		s := &samples[i]
		if s.Kind != spec.Kind {
			continue
		}
		key := ""
		switch s.Kind {
		case KindLink:
			if len(spec.Links) > 0 && !slices.Contains(spec.Links, s.Link) {
				continue
			}
			key = s.Link
		case KindConn, KindPath:
			if spec.Host != "" && (s.Host != spec.Host || s.Conn != spec.Conn) {
				continue
			}
			key = s.Host + "->" + s.Peer + " conn " + strconv.FormatUint(uint64(s.Conn), 10)
			if spec.Host != "" {
				key = ""
			}
			if s.Kind == KindPath {
				key = strings.TrimSpace(key + " path " + strconv.Itoa(s.Path))
			}
		}
		if _, ok := series[key]; !ok {
			order = append(order, key)
		}
		v := numeric(&columns[col], s) * u.scale
		t := s.T.Micros()
		tmax = max(tmax, t)
		series[key] = append(series[key], plotter.XY{X: t, Y: v})
	}
	if len(order) == 0 {
		return fmt.Errorf("plotting %s %s: %w", spec.Kind, spec.Metric, ErrNoData)
	}
	title := spec.Title
	if title == "" {
		title = u.name + " per " + spec.Kind.String()
		if spec.Host != "" {
			title += fmt.Sprintf(" (%s conn %d)", spec.Host, spec.Conn)
		}
	}
	xscale, xlabel := 1.0, "lab time (us)"
	if tmax > 10000 {
		xscale, xlabel = 1e-3, "lab time (ms)"
	}
	ylabel := u.name
	if u.label != "" {
		ylabel += " (" + u.label + ")"
	}
	c := chart.New(title, xlabel, ylabel)
	for i, key := range order {
		xys := series[key]
		for j := range xys {
			xys[j].X *= xscale
		}
		if _, err := c.Line(i, key, xys); err != nil {
			return fmt.Errorf("plotting %s: %w", key, err)
		}
	}
	c.Pad(0)
	if err := c.Write(w, format, spec.Width, spec.Height); err != nil {
		return fmt.Errorf("plotting: %w", err)
	}
	return nil
}

func numeric(c *column, s *Sample) float64 {
	switch c.typ {
	case colInt:
		return float64(c.i(s))
	case colUint:
		return float64(c.u(s))
	case colFloat:
		return c.f(s)
	}
	return 0
}

// MetricNames lists the numeric metrics of a kind, for help and errors.
func MetricNames(k Kind) []string {
	var out []string
	for _, c := range columns {
		if c.typ != colString && c.kinds.has(k) && c.name != "t_ns" {
			out = append(out, c.name)
		}
	}
	return out
}

// PlotAll writes the standard figures of a run into dir, in each of
// formats (png and svg when none are given): for every connection, cwnd
// and send rate per path over time, and the queue depth of every link
// direction that ever queued. It returns the files written.
func PlotAll(dir string, samples []Sample, formats ...string) ([]string, error) {
	if len(formats) == 0 {
		formats = []string{"png", "svg"}
	}
	type connKey struct {
		host string
		conn uint32
	}
	var conns []connKey
	seen := map[connKey]bool{}
	var busy []string
	queued := map[string]bool{}
	for i := range samples {
		s := &samples[i]
		switch s.Kind {
		case KindPath:
			k := connKey{s.Host, s.Conn}
			if !seen[k] {
				seen[k] = true
				conns = append(conns, k)
			}
		case KindLink:
			if s.QueueBytes > 0 && !queued[s.Link] {
				queued[s.Link] = true
				busy = append(busy, s.Link)
			}
		}
	}
	var files []string
	write := func(name string, spec PlotSpec) error {
		for _, format := range formats {
			path := filepath.Join(dir, name+"."+format)
			f, err := os.Create(path)
			if err != nil {
				return fmt.Errorf("writing plot: %w", err)
			}
			spec.Format = format
			if err := Plot(f, samples, spec); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("writing plot: %w", err)
			}
			files = append(files, path)
		}
		return nil
	}
	for _, c := range conns {
		base := fmt.Sprintf("%s-conn%d", c.host, c.conn)
		// A path's rate is its send rate: transports count acknowledged
		// bytes per connection, not per path.
		for _, m := range [][2]string{{"cwnd", "cwnd"}, {"send_bps", "rate"}} {
			if err := write(base+"-"+m[1], PlotSpec{Kind: KindPath, Metric: m[0], Host: c.host, Conn: c.conn}); err != nil {
				return files, err
			}
		}
	}
	if len(busy) > 0 {
		if err := write("links-queue", PlotSpec{Kind: KindLink, Metric: "queue_bytes", Links: busy, Title: "queue depth per link direction"}); err != nil {
			return files, err
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("plotting: %w (no path or queued link samples)", ErrNoData)
	}
	return files, nil
}
