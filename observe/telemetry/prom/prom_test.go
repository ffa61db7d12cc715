package prom

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/observe/telemetry"
)

func TestExporter(t *testing.T) {
	e := New("mini")
	// First instant; then a second one replaces it.
	e.Write(&telemetry.Sample{T: 10, Kind: telemetry.KindConn, Host: "h0", Peer: "h1", Conn: 4, Cwnd: 1})
	e.EndBatch(10)
	samples := []telemetry.Sample{
		{T: 20 * sim.Microsecond, Kind: telemetry.KindConn, Host: "h0", Peer: "h1", Conn: 4, Transport: "metaroce",
			Cwnd: 65536, SRTT: 5 * sim.Microsecond, Rate: 8e9, Retransmits: 3},
		{T: 20 * sim.Microsecond, Kind: telemetry.KindPath, Host: "h0", Peer: "h1", Conn: 4, Path: 9, Plane: 1,
			Entropy: 50877, EntropyChanges: 2},
		{T: 20 * sim.Microsecond, Kind: telemetry.KindLink, Link: "p0-leaf0-spine1:AtoB", QueueBytes: 3000, Drops: 7, Util: 0.5,
			DropsBy: fabric.DropCounts{fabric.DropQueueFull: 5, fabric.DropImpairment: 2}},
		{T: 20 * sim.Microsecond, Kind: telemetry.KindLink, Link: "p0-leaf0-spine1:BtoA", Drops: 3}, // no breakdown
	}
	for i := range samples {
		e.Write(&samples[i])
	}
	e.EndBatch(20 * sim.Microsecond)

	srv := httptest.NewServer(e.Handler())
	defer srv.Close()
	get := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	metrics := get("/metrics")
	for _, want := range []string{
		`mrlab_lab_time_seconds{lab="mini"} 2e-05`,
		`mrlab_conn_cwnd_bytes{conn="4",host="h0",lab="mini",peer="h1",transport="metaroce"} 65536`,
		`mrlab_conn_srtt_seconds{conn="4",host="h0",lab="mini",peer="h1",transport="metaroce"} 5e-06`,
		`mrlab_conn_retransmissions_total{conn="4",host="h0",lab="mini",peer="h1",transport="metaroce"} 3`,
		`mrlab_conn_delivery_rate_bytes_per_second{conn="4",host="h0",lab="mini",peer="h1",transport="metaroce"} 1e+09`,
		`mrlab_path_udp_source_port{conn="4",host="h0",lab="mini",path="9",peer="h1",plane="1"} 50877`,
		`mrlab_path_entropy_changes_total{conn="4",host="h0",lab="mini",path="9",peer="h1",plane="1"} 2`,
		`mrlab_link_queue_bytes{direction="AtoB",lab="mini",link="p0-leaf0-spine1"} 3000`,
		`mrlab_link_utilization_ratio{direction="AtoB",lab="mini",link="p0-leaf0-spine1"} 0.5`,
		`mrlab_link_drops_total{direction="AtoB",lab="mini",link="p0-leaf0-spine1",reason="queue-full"} 5`,
		`mrlab_link_drops_total{direction="AtoB",lab="mini",link="p0-leaf0-spine1",reason="impairment"} 2`,
		`mrlab_link_drops_total{direction="AtoB",lab="mini",link="p0-leaf0-spine1",reason="link-down"} 0`,
		`mrlab_link_drops_total{direction="BtoA",lab="mini",link="p0-leaf0-spine1",reason="unknown"} 3`,
		`# TYPE mrlab_link_drops_total counter`,
		`# TYPE mrlab_conn_cwnd_bytes gauge`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(metrics, "go_goroutines") {
		t.Error("/metrics exports Go runtime metrics")
	}
	if strings.Contains(metrics, `reason="unknown"} `) && strings.Count(metrics, `reason="unknown"`) != 1 {
		t.Error("drops attributed to reasons also counted as unknown")
	}
	checkMetrics(t, metrics)
	var snap SnapshotJSON
	if err := json.Unmarshal([]byte(get("/telemetry")), &snap); err != nil {
		t.Fatal(err)
	}
	if snap.TimeNS != 20*sim.Microsecond || len(snap.Samples) != 4 || snap.Samples[2].Link != "p0-leaf0-spine1:AtoB" {
		t.Errorf("snapshot %+v", snap)
	}
}

// checkMetrics runs Prometheus's own linter over an exposition: names in
// base units, counters ending in _total, help on every metric.
func checkMetrics(t *testing.T, exposition string) {
	t.Helper()
	promtool := testenv.RequireCommand(t, "promtool")
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(exposition)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestEveryColumnHasAPrometheusName: a telemetry column added later gets a
// name here, in base units, rather than leaking its file name.
func TestEveryColumnHasAPrometheusName(t *testing.T) {
	for _, k := range []telemetry.Kind{telemetry.KindConn, telemetry.KindPath, telemetry.KindLink} {
		for _, m := range telemetry.Metrics(k) {
			if _, ok := promNames[m.Name]; !ok {
				t.Errorf("telemetry column %s (%v) has no Prometheus name in promNames", m.Name, k)
			}
		}
	}
}

func TestListenLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "198.18.0.1:0", ":0", "localhost"} {
		if ln, err := Listen(addr); err == nil {
			ln.Close()
			t.Errorf("Listen(%q) accepted", addr)
		}
	}
	if _, err := Listen("0.0.0.0:0"); !errors.Is(err, ErrNotLoopback) {
		t.Errorf("Listen(0.0.0.0): %v", err)
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}

// TestExamples: the scrape configuration and rules Prometheus's own
// checker accepts; the Grafana dashboard's queries parse as PromQL
// (checked as recording rules, Grafana's variables filled in); and every
// mrlab series the rules and dashboard read is one the exporter serves,
// each query selecting by the lab label.
func TestExamples(t *testing.T) {
	promtool := testenv.RequireCommand(t, "promtool")
	if out, err := exec.Command(promtool, "check", "config", "examples/prometheus.yml").CombinedOutput(); err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
	data, err := os.ReadFile("examples/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	fill := strings.NewReplacer("$lab", "lab-a", "$__rate_interval", "1m")
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	var exprs []string
	for i, p := range dash.Panels {
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, `lab="$lab"`) {
				t.Errorf("panel %q: %s does not select the dashboard's lab", p.Title, tg.Expr)
			}
			exprs = append(exprs, tg.Expr)
			fmt.Fprintf(&rules, "      - record: dashboard:panel%d\n        expr: %q\n", i, fill.Replace(tg.Expr))
		}
	}
	if len(exprs) < 6 {
		t.Fatalf("dashboard has %d queries", len(exprs))
	}
	rf := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(rf, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", rf).CombinedOutput(); err != nil {
		t.Errorf("the dashboard's queries: promtool check rules: %v\n%s", err, out)
	}
	// The series they read exist.
	served := map[string]bool{}
	ch := make(chan *prometheus.Desc, 64)
	go func() { New("x").Describe(ch); close(ch) }()
	for d := range ch {
		if m := regexp.MustCompile(`fqName: "(\w+)"`).FindStringSubmatch(d.String()); m != nil {
			served[m[1]] = true
		}
	}
	ruleText, err := os.ReadFile("examples/mrlab-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	// Series names, not the rules' own (lab:mrlab_...:rate1m). The live
	// runtime's own series (NICs' and hosts' counters, mrlab_nic_* and
	// mrlab_host_*, served by labs/live's collector on the same endpoint)
	// are checked there: TestExampleRulesRuntimeSeries.
	runtime := regexp.MustCompile(`^mrlab_(nic|host)_`)
	for _, m := range regexp.MustCompile(`(?:^|[^:\w])(mrlab_\w+)`).FindAllStringSubmatch(strings.Join(exprs, "\n")+string(ruleText), -1) {
		if name := m[1]; !served[name] && !runtime.MatchString(name) {
			t.Errorf("the examples read %s, which the exporter does not serve", name)
		}
	}
}
