package prom

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// This file writes the Prometheus text exposition format (version 0.0.4)
// itself, as the Prometheus Go client's registry and promhttp handler
// write it for constant metrics: families sorted by name, each with its
// HELP and TYPE lines, label pairs sorted by name, series sorted by their
// label values, values as the client formats them. The client is not
// linked because every mrlab process would pay for it: its packages'
// initialisation (protobuf's descriptors among them) kept about 2.4 MiB of
// the executable resident in every command, `mrlab sim` and `bench`
// included (issue #29). TestExpositionMatchesClient holds the output equal
// to the client's, byte for byte.

// Desc describes one metric family: its name, help, type and the names
// of the labels that tell its series apart.
type Desc struct {
	name, help string
	counter    bool
	labels     []string
}

// NewDesc returns a family's description. A counter's name should end in
// _total (Prometheus's naming rules; promtool checks the exposition).
func NewDesc(name, help string, counter bool, labels ...string) *Desc {
	return &Desc{name: name, help: help, counter: counter, labels: labels}
}

// Name returns the family's name.
func (d *Desc) Name() string { return d.name }

// AddFunc adds one series of family d, with its label values in d's
// label order, to a scrape.
type AddFunc func(d *Desc, v float64, labelValues ...string)

// Collector serves series of its own on the exporter's endpoint.
type Collector interface {
	// Describe returns every family Collect may add to.
	Describe() []*Desc
	// Collect adds the collector's current series; it is called on the
	// scrape's goroutine.
	Collect(add AddFunc)
}

// registry is what /metrics serves: the collectors registered, each
// series with the constant labels added.
type registry struct {
	mu         sync.Mutex
	constLabel [2]string // name, value; empty name: none
	collectors []Collector
	names      map[string]*Desc
}

// register adds c; a family another collector describes already is an
// error, as is a label named like the constant one.
func (r *registry) register(c Collector) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ds := c.Describe()
	for _, d := range ds {
		if _, dup := r.names[d.name]; dup {
			return fmt.Errorf("metrics: family %s registered twice", d.name)
		}
		if r.constLabel[0] != "" && slices.Contains(d.labels, r.constLabel[0]) {
			return fmt.Errorf("metrics: family %s has a label named %q, the exporter's own", d.name, r.constLabel[0])
		}
	}
	if r.names == nil {
		r.names = map[string]*Desc{}
	}
	for _, d := range ds {
		r.names[d.name] = d
	}
	r.collectors = append(r.collectors, c)
	return nil
}

// series is one line of a family: its label pairs, sorted by name, and
// its value.
type series struct {
	labels [][2]string
	value  float64
}

type family struct {
	d      *Desc
	series []series
}

// gather runs every collector and returns the families with at least one
// series, sorted by name, their series sorted. A series of a family no
// collector described, with the wrong number of label values, with a
// label value that is not UTF-8, or twice with the same labels, is an
// error (the client's registry refuses the same).
func (r *registry) gather() ([]*family, error) {
	r.mu.Lock()
	cs := slices.Clone(r.collectors)
	r.mu.Unlock()
	fams := map[string]*family{}
	var err error
	add := func(d *Desc, v float64, values ...string) {
		if err != nil {
			return
		}
		if r.names[d.name] != d {
			err = fmt.Errorf("metrics: series of family %s, which no collector described", d.name)
			return
		}
		if len(values) != len(d.labels) {
			err = fmt.Errorf("metrics: %s: %d label values for %d labels", d.name, len(values), len(d.labels))
			return
		}
		s := series{value: v, labels: make([][2]string, 0, len(values)+1)}
		for i, v := range values {
			if !utf8.ValidString(v) {
				err = fmt.Errorf("metrics: %s: label %s: value %q is not UTF-8", d.name, d.labels[i], v)
				return
			}
			s.labels = append(s.labels, [2]string{d.labels[i], v})
		}
		if r.constLabel[0] != "" {
			s.labels = append(s.labels, r.constLabel)
		}
		slices.SortFunc(s.labels, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
		f := fams[d.name]
		if f == nil {
			f = &family{d: d}
			fams[d.name] = f
		}
		f.series = append(f.series, s)
	}
	for _, c := range cs {
		c.Collect(add)
	}
	if err != nil {
		return nil, err
	}
	out := make([]*family, 0, len(fams))
	for _, f := range fams {
		slices.SortStableFunc(f.series, compareSeries)
		for i := 1; i < len(f.series); i++ {
			if compareSeries(f.series[i-1], f.series[i]) == 0 {
				return nil, fmt.Errorf("metrics: %s: two series with the labels %v", f.d.name, f.series[i].labels)
			}
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b *family) int { return strings.Compare(a.d.name, b.d.name) })
	return out, nil
}

// compareSeries orders a family's series by their label values, label by
// label (the labels are the family's, sorted by name).
func compareSeries(a, b series) int {
	for i := range min(len(a.labels), len(b.labels)) {
		if c := strings.Compare(a.labels[i][1], b.labels[i][1]); c != 0 {
			return c
		}
	}
	return len(a.labels) - len(b.labels)
}

// contentType is the text exposition format's.
const contentType = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"

// writeText writes fams in the text exposition format.
func writeText(b *bytes.Buffer, fams []*family) {
	for _, f := range fams {
		b.WriteString("# HELP ")
		b.WriteString(f.d.name)
		b.WriteByte(' ')
		helpEscaper.WriteString(b, f.d.help)
		b.WriteString("\n# TYPE ")
		b.WriteString(f.d.name)
		if f.d.counter {
			b.WriteString(" counter\n")
		} else {
			b.WriteString(" gauge\n")
		}
		for _, s := range f.series {
			b.WriteString(f.d.name)
			for i, l := range s.labels {
				if i == 0 {
					b.WriteByte('{')
				} else {
					b.WriteByte(',')
				}
				b.WriteString(l[0])
				b.WriteString(`="`)
				labelEscaper.WriteString(b, l[1])
				b.WriteByte('"')
			}
			if len(s.labels) > 0 {
				b.WriteByte('}')
			}
			b.WriteByte(' ')
			writeFloat(b, s.value)
			b.WriteByte('\n')
		}
	}
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// writeFloat writes v as the Prometheus client does.
func writeFloat(b *bytes.Buffer, v float64) {
	switch {
	case v == 1:
		b.WriteByte('1')
	case v == 0:
		b.WriteByte('0')
	case v == -1:
		b.WriteString("-1")
	case math.IsNaN(v):
		b.WriteString("NaN")
	case math.IsInf(v, +1):
		b.WriteString("+Inf")
	case math.IsInf(v, -1):
		b.WriteString("-Inf")
	default:
		b.Write(strconv.AppendFloat(b.AvailableBuffer(), v, 'g', -1, 64))
	}
}

// serveMetrics answers a scrape: every collector's series, or a 500 with
// the error when a collector's series are inconsistent.
func (r *registry) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	fams, err := r.gather()
	if err != nil {
		http.Error(w, "An error has occurred while serving metrics:\n\n"+err.Error(), http.StatusInternalServerError)
		return
	}
	var b bytes.Buffer
	writeText(&b, fams)
	w.Header().Set("Content-Type", contentType)
	w.Write(b.Bytes())
}
