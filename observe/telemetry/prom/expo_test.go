package prom

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/observe/telemetry"
)

// oddCollector serves series whose help, label values and values need
// every escape and special form of the text format.
type oddCollector struct{ plain, labelled, counter *Desc }

func newOddCollector() *oddCollector {
	return &oddCollector{
		plain:    NewDesc("mrlab_test_plain", `A help with a backslash \ and a`+"\nnewline.", false),
		labelled: NewDesc("mrlab_test_labelled", "Labelled.", false, "zeta", "alpha"),
		counter:  NewDesc("mrlab_test_events_total", "Events.", true, "kind"),
	}
}

func (c *oddCollector) Describe() []*Desc { return []*Desc{c.plain, c.labelled, c.counter} }

func (c *oddCollector) Collect(add AddFunc) {
	add(c.plain, 0.1)
	values := []float64{1, 0, -1, math.NaN(), math.Inf(1), math.Inf(-1), 1e-300, 12345678901234567, 2.5e9, -0.000123}
	for i, v := range values {
		add(c.labelled, v, strings.Repeat("z", len(values)-i), string(rune('a'+i))+`"q\`+"\n")
	}
	add(c.counter, 3, "b")
	add(c.counter, 7, "a")
}

// clientCollector serves a Collector's series through the Prometheus
// client, as the exporter did before it wrote the format itself.
type clientCollector struct {
	c     Collector
	descs map[*Desc]*prometheus.Desc
}

func newClientCollector(c Collector) *clientCollector {
	cc := &clientCollector{c: c, descs: map[*Desc]*prometheus.Desc{}}
	for _, d := range c.Describe() {
		cc.descs[d] = prometheus.NewDesc(d.name, d.help, d.labels, nil)
	}
	return cc
}

func (cc *clientCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range cc.descs {
		ch <- d
	}
}

func (cc *clientCollector) Collect(ch chan<- prometheus.Metric) {
	cc.c.Collect(func(d *Desc, v float64, labels ...string) {
		typ := prometheus.GaugeValue
		if d.counter {
			typ = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(cc.descs[d], typ, v, labels...)
	})
}

// TestExpositionMatchesClient: /metrics is byte for byte what the
// Prometheus client's registry and handler write for the same series,
// with the same content type: the exporter's telemetry (every kind, drops
// by reason) and a collector of its own whose help, label values and
// values take every escape and special form; with and without the lab
// label.
func TestExpositionMatchesClient(t *testing.T) {
	for _, lab := range []string{"mini", ""} {
		e := New(lab)
		samples := []telemetry.Sample{
			{Kind: telemetry.KindConn, Host: "h0", Peer: "h1", Conn: 4, Transport: "metaroce", Cwnd: 65536, SRTT: 5 * sim.Microsecond, Rate: 8e9, Retransmits: 3},
			{Kind: telemetry.KindConn, Host: "h1", Peer: "h0", Conn: 12, Transport: "rocev2", Cwnd: 1, RTO: sim.Millisecond},
			{Kind: telemetry.KindPath, Host: "h0", Peer: "h1", Conn: 4, Path: 9, Plane: 1, Entropy: 50877, EntropyChanges: 2},
			{Kind: telemetry.KindPath, Host: "h0", Peer: "h1", Conn: 4, Path: 10, Plane: 0, Entropy: 1},
			{Kind: telemetry.KindLink, Link: "p0-leaf0-spine1:AtoB", QueueBytes: 3000, Drops: 7, Util: 0.5,
				DropsBy: fabric.DropCounts{fabric.DropQueueFull: 5, fabric.DropImpairment: 2}},
			{Kind: telemetry.KindLink, Link: "p0-leaf0-spine1:BtoA", Drops: 3},
		}
		for i := range samples {
			e.Write(&samples[i])
		}
		e.EndBatch(20 * sim.Microsecond)
		odd := newOddCollector()
		if err := e.Register(odd); err != nil {
			t.Fatal(err)
		}

		reg := prometheus.NewRegistry()
		var wrap prometheus.Registerer = reg
		if lab != "" {
			wrap = prometheus.WrapRegistererWith(prometheus.Labels{"lab": lab}, reg)
		}
		wrap.MustRegister(newClientCollector(e), newClientCollector(odd))

		got, gotType := get(t, e.Handler())
		want, wantType := get(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		if got != want {
			t.Errorf("lab %q: /metrics differs from the client's:\n%s\nwant:\n%s", lab, got, want)
		}
		if gotType != wantType {
			t.Errorf("lab %q: Content-Type %q, the client's %q", lab, gotType, wantType)
		}
		labLabel := ""
		if lab != "" {
			labLabel = `lab="` + lab + `",`
		}
		if !strings.Contains(got, `mrlab_test_labelled{alpha="a\"q\\\n",`+labLabel+`zeta="zzzzzzzzzz"} 1`+"\n") {
			t.Errorf("lab %q: the escaped series is missing:\n%s", lab, got)
		}
	}
}

// TestExpositionErrors: a series of an undescribed family, with the wrong
// number of label values, or twice with the same labels fails the scrape
// (500), as the client's registry does; a family registered twice or a
// label named like the exporter's own is refused.
func TestExpositionErrors(t *testing.T) {
	d := NewDesc("mrlab_test_x", "X.", false, "a")
	stray := NewDesc("mrlab_test_stray", "Stray.", false)
	for name, collect := range map[string]func(AddFunc){
		"undescribed": func(add AddFunc) { add(stray, 1) },
		"labels":      func(add AddFunc) { add(d, 1) },
		"duplicate":   func(add AddFunc) { add(d, 1, "v"); add(d, 2, "v") },
		"utf8":        func(add AddFunc) { add(d, 1, "\xff") },
	} {
		e := New("lab")
		if err := e.Register(funcCollector{[]*Desc{d}, collect}); err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		e.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != http.StatusInternalServerError {
			t.Errorf("%s: status %d, want 500\n%s", name, rec.Code, rec.Body)
		}
	}
	e := New("lab")
	if err := e.Register(funcCollector{[]*Desc{e.labT}, nil}); err == nil {
		t.Error("a family registered twice was accepted")
	}
	if err := e.Register(funcCollector{[]*Desc{NewDesc("mrlab_test_y", "Y.", false, "lab")}, nil}); err == nil {
		t.Error("a label named lab was accepted")
	}
}

type funcCollector struct {
	ds      []*Desc
	collect func(AddFunc)
}

func (f funcCollector) Describe() []*Desc   { return f.ds }
func (f funcCollector) Collect(add AddFunc) { f.collect(add) }

func get(t *testing.T, h http.Handler) (body, contentType string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Result().Body)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, b)
	}
	return string(b), rec.Header().Get("Content-Type")
}

// TestClientNotLinked: the mrlab command does not link the Prometheus
// client (its initialisation kept about 2.4 MiB of the executable
// resident in every process: expo.go).
func TestClientNotLinked(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/mrlab/mrlab/cmd/mrlab").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/prometheus/") || strings.HasPrefix(p, "google.golang.org/protobuf/") {
			t.Errorf("cmd/mrlab links %s", p)
		}
	}
}
