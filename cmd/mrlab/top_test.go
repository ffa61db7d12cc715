package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/observe/telemetry"
	"github.com/mrlab/mrlab/observe/telemetry/prom"
)

func topExporter() *prom.Exporter {
	e := prom.New("")
	for _, s := range []telemetry.Sample{
		{Kind: telemetry.KindConn, Host: "h0", Peer: "h2", Conn: 1, Transport: "metaroce", Rate: 2e9, Cwnd: 8192, SRTT: 5300, Retransmits: 4},
		{Kind: telemetry.KindConn, Host: "h1", Peer: "h2", Conn: 1, Transport: "metaroce", Rate: 40e9, Cwnd: 1 << 20, SRTT: 12000, RateHint: 45e9, ECNFraction: 0.125},
		{Kind: telemetry.KindConn, Host: "h3", Peer: "h2", Conn: 2, Transport: "rocev2", SendRate: 1e9},
		{Kind: telemetry.KindPath, Host: "h1", Peer: "h2", Conn: 1, Path: 3, Plane: 1, Entropy: 50877, State: "active", Rate: 20e9, EntropyChanges: 1},
		{Kind: telemetry.KindPath, Host: "h1", Peer: "h2", Conn: 1, Path: 0, Plane: 0, Entropy: 49213, State: "active", Rate: 20.5e9},
		{Kind: telemetry.KindLink, Link: "h2-p0:BtoA", Util: 0.97, QueueBytes: 30000, Marks: 12},
		{Kind: telemetry.KindLink, Link: "h0-p0:AtoB", Util: 0.02},
	} {
		s.T = 1500 * sim.Microsecond
		e.Write(&s)
	}
	e.EndBatch(1500 * sim.Microsecond)
	return e
}

func TestTopCommand(t *testing.T) {
	e := topExporter()
	fl := startFakeLab(t, map[string]http.Handler{"GET /telemetry": http.HandlerFunc(e.ServeSnapshot)})
	code, out, errs := runCLI(t, "top", "--run-dir", fl.dir, "--once", "-n", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	out = squash(out)
	for _, want := range []string{
		"source: lab t1",
		"lab time: 1.5ms",
		"Busiest connections (of 3)",
		"h1 h2 1 metaroce 40G 0 1.0MiB 0B 12us - 12.5 45G 0 0",
		"h0 h2 1 metaroce 2G 0 8.0KiB 0B 5.3us - 0.0 - 4 0",
		"Busiest paths (of 2)",
		"h1 1 0 0 49213 active 20.5G",
		"h1 1 3 1 50877 active 20G",
		"h2-p0:BtoA 97.0 29.3KiB 0 0 12",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "h3 h2 2") {
		t.Errorf("-n 2 printed a third connection:\n%s", out)
	}
	// The paths ranked by rate: path 0 (20.5G) before path 3 (20G).
	if strings.Index(out, "h1 1 0 0 49213") > strings.Index(out, "h1 1 3 1 50877") {
		t.Errorf("paths not ranked by rate:\n%s", out)
	}
}

func TestTopCommandURLAndJSON(t *testing.T) {
	srv := httptest.NewServer(topExporter().Handler())
	defer srv.Close()
	code, out, errs := runCLI(t, "top", "--url", srv.URL, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var v struct {
		LabTime string           `json:"lab_time"`
		Conns   []map[string]any `json:"conns"`
		Links   []map[string]any `json:"links"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if v.LabTime != "1.5ms" || len(v.Conns) != 3 || v.Conns[0]["host"] != "h1" || v.Conns[0]["rate"] != 40e9 ||
		v.Conns[0]["srtt"] != 12000.0 || v.Links[0]["link"] != "h2-p0:BtoA" || v.Links[0]["queue"] != 30000.0 {
		t.Errorf("json: %+v", v)
	}
	// A lab without telemetry says so.
	fl := startFakeLab(t, nil)
	code, _, errs = runCLI(t, "top", "--run-dir", fl.dir, "--once")
	if code != 1 || !strings.Contains(errs, "serves no telemetry") {
		t.Errorf("exit %d: %s", code, errs)
	}
	code, _, errs = runCLI(t, "top", "--run-dir", fl.dir, "-n", "0")
	if code != 2 {
		t.Errorf("-n 0: exit %d: %s", code, errs)
	}
}

// TestReportTextSanitized: a cell a lab host chose (a program's name in
// status, anything in top) cannot move the cursor, clear the screen or
// start a row of its own in text output.
func TestReportTextSanitized(t *testing.T) {
	evil := "x\x1b[2J\x1b[H\x1b]0;owned\x07\r\n  h9       198.18.9.9\u202e"
	r := &Report{}
	r.Fact("name", "program", evil)
	tb := r.Table("clients", "Verbs clients", Col("host", "host", ""), Col("name", "program", ""))
	tb.Add("h0", evil)
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, bad := range []string{"\x1b", "\r", "\x07", "\u202e", "\n  h9"} {
		if strings.Contains(out, bad) {
			t.Errorf("text output keeps %q:\n%s", bad, out)
		}
	}
	if got := strings.Count(out, "\n"); got != 5 {
		t.Errorf("%d lines, want 5 (fact, blank, title, head, one row):\n%s", got, out)
	}
	if !strings.Contains(out, `x\x1b[2J`) {
		t.Errorf("the escaped name is not shown:\n%s", out)
	}
}

// TestCopySanitized: mrlab trace prints each line sanitized.
func TestCopySanitized(t *testing.T) {
	var b strings.Builder
	if _, err := copySanitized(&b, strings.NewReader("t=1us h0: pid 7 (\x1b[31mred) opened\nt=2us ok\n")); err != nil {
		t.Fatal(err)
	}
	if want := "t=1us h0: pid 7 (\\x1b[31mred) opened\nt=2us ok\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
