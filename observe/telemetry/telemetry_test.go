package telemetry

import (
	"bytes"
	"encoding/csv"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// fakeConn is a scripted connection: tests change its fields between
// samples.
type fakeConn struct {
	conn  transport.Stats
	paths []transport.PathStats
}

func (f *fakeConn) ReportStats(s *transport.Stats) {
	paths := s.Paths[:0]
	*s = f.conn
	s.Paths = append(paths, f.paths...)
}

func TestSamplerSeries(t *testing.T) {
	loop := sim.NewLoop()
	var rec Recorder
	s := NewSampler(loop, 10*sim.Microsecond, &rec)
	fc := &fakeConn{
		conn: transport.Stats{Cwnd: 8192, SRTT: 5 * sim.Microsecond, RTO: 100 * sim.Microsecond},
		paths: []transport.PathStats{
			{Port: 0, Entropy: 49213, State: "active", Cwnd: 4096},
			{Port: 1, Entropy: 49300, State: "active", Cwnd: 4096},
		},
	}
	s.addConn("h3", "h7", 4, transport.MetaRoCE, fc)
	var link linkStats
	link.Rate = 100e9
	s.addLink("p0-leaf0-spine1:ab", linkFunc(func() linkStats { return link }))
	s.Start(0)

	// Scripted run: at 12us a loss on path 0 is retransmitted; at 25us
	// path 0 changes entropy; data flows at 8 Gb/s on path 1.
	loop.At(12*sim.Microsecond, func(sim.Time) {
		fc.paths[0].Retransmits++
		fc.conn.Retransmits++
	})
	loop.At(25*sim.Microsecond, func(sim.Time) { fc.paths[0].Entropy = 50877 })
	for i := 1; i <= 4; i++ {
		at := sim.Time(i) * 10 * sim.Microsecond
		loop.At(at-1, func(sim.Time) {
			fc.paths[1].BytesAcked += 10000
			fc.paths[1].PacketsAcked += 4
			fc.paths[1].CEAcked++
			fc.conn.BytesPlaced += 10000
			fc.conn.PacketsAcked += 4
			fc.conn.CEAcked++
			link.TxBytes += 12500
			link.QueueBytes = int64(i * 1000)
		})
	}
	loop.RunUntil(40 * sim.Microsecond)
	s.Stop()
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
	if s.Batches() != 5 {
		t.Errorf("%d batches, want 5 (t=0,10,20,30,40us)", s.Batches())
	}

	type row struct {
		T       sim.Time
		Kind    Kind
		Path    int
		Retx    uint64
		Changes uint64
		Entropy uint16
		Rate    float64
		ECN     float64
		Util    float64
	}
	var got []row
	for _, x := range rec.Samples {
		got = append(got, row{x.T, x.Kind, x.Path, x.Retransmits, x.EntropyChanges, x.Entropy, x.Rate, x.ECNFraction, x.Util})
	}
	us := sim.Microsecond
	var want []row
	for i := 0; i <= 4; i++ {
		tt := sim.Time(i) * 10 * us
		retx := uint64(0)
		if tt >= 12*us {
			retx = 1
		}
		ch, ent := uint64(0), uint16(49213)
		if tt >= 25*us {
			ch, ent = 1, 50877
		}
		rate, ecn, util := 0.0, 0.0, 0.0
		if i > 0 {
			rate, ecn, util = 8e9, 0.25, 0.1
		}
		want = append(want,
			row{tt, KindConn, 0, retx, ch, 0, rate, ecn, 0},
			row{tt, KindPath, 0, retx, ch, ent, 0, 0, 0},
			row{tt, KindPath, 1, 0, 0, 49300, rate, ecn, 0},
			row{tt, KindLink, 0, 0, 0, 0, 0, 0, util})
	}
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(1e-9, 0)); d != "" {
		t.Errorf("samples (-want +got):\n%s", d)
	}
	first := rec.Samples[0]
	if first.Host != "h3" || first.Peer != "h7" || first.Conn != 4 || first.Transport != "metaroce" || first.SRTT != 5*us {
		t.Errorf("conn identity/state: %+v", first)
	}
}

func TestSamplerDefaultInterval(t *testing.T) {
	if s := NewSampler(sim.NewLoop(), 0, &Recorder{}); s.Interval() != DefaultInterval {
		t.Errorf("interval %v, want %v", s.Interval(), DefaultInterval)
	}
}

func sampleSet() []Sample {
	return []Sample{
		{T: 10000, Kind: KindConn, Host: "h3", Peer: "h7", Conn: 4, Transport: "metaroce", Cwnd: 65536, InFlight: 4096,
			SRTT: 5100, RTO: 100000, Rate: 8.5e9, PacingRate: 1e11, ECNFraction: 0.25, RateHint: 5e10,
			BytesAcked: 1 << 20, Retransmits: 3, Timeouts: 1, EntropyChanges: 1},
		{T: 10000, Kind: KindPath, Host: "h3", Peer: "h7", Conn: 4, Path: 9, Plane: 1, Entropy: 50877, State: "active",
			Cwnd: 4096, InFlight: 100, SRTT: 5000, RTO: 100000, Rate: 1e9, SendRate: 2e9, ECNFraction: 0.5, BytesAcked: 7,
			Retransmits: 1, Timeouts: 0, EntropyChanges: 1},
		{T: 10000, Kind: KindLink, Link: `odd "name", with comma`, QueueBytes: 3000, TxBytes: 99, TxPackets: 3,
			Drops: 1, Marks: 2, Util: 0.75},
	}
}

func TestJSONLRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := newJSONLWriter(&buf)
	in := sampleSet()
	for i := range in {
		if err := w.Write(&in[i]); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines", len(lines))
	}
	wantLine := `{"t_ns":10000,"kind":"path","host":"h3","peer":"h7","conn":4,"path":9,"plane":1,"entropy":50877,"state":"active","cwnd":4096,"inflight":100,"srtt_ns":5000,"rto_ns":100000,"rate_bps":1e+09,"send_bps":2e+09,"ecn_frac":0.5,"bytes_acked":7,"retx":1,"rto_count":0,"entropy_changes":1}`
	if lines[1] != wantLine {
		t.Errorf("path line:\n got %s\nwant %s", lines[1], wantLine)
	}
	out, err := readJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(in, out); d != "" {
		t.Errorf("round trip (-in +out):\n%s", d)
	}
	if _, err := readJSONL(strings.NewReader("{\"kind\":\"path\"}\n{bad\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad line error: %v", err)
	}
}

func TestCSV(t *testing.T) {
	var buf bytes.Buffer
	w := newCSVWriter(&buf)
	in := sampleSet()
	for i := range in {
		w.Write(&in[i])
	}
	w.Close()
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 || !cmp.Equal(rows[0], csvHeader()) {
		t.Fatalf("rows %d, header %v", len(rows), rows[0])
	}
	col := func(row []string, name string) string {
		for i, h := range rows[0] {
			if h == name {
				return row[i]
			}
		}
		t.Fatalf("no column %s", name)
		return ""
	}
	checks := []struct {
		row       int
		col, want string
	}{
		{1, "kind", "conn"}, {1, "rate_hint_bps", "5e+10"}, {1, "path", ""}, {1, "queue_bytes", ""},
		{2, "entropy", "50877"}, {2, "retx", "1"}, {2, "link", ""},
		{3, "link", `odd "name", with comma`}, {3, "util", "0.75"}, {3, "cwnd", ""},
	}
	for _, c := range checks {
		if got := col(rows[c.row], c.col); got != c.want {
			t.Errorf("row %d %s = %q, want %q", c.row, c.col, got, c.want)
		}
	}
}

func TestWriteNoAllocs(t *testing.T) {
	in := sampleSet()
	jw := newJSONLWriter(io.Discard)
	cw := newCSVWriter(io.Discard)
	cw.Write(&in[0]) // header
	for _, w := range []Sink{jw, cw} {
		allocs := testing.AllocsPerRun(200, func() {
			for i := range in {
				w.Write(&in[i])
			}
		})
		if allocs != 0 {
			t.Errorf("%T allocates %v per 3 samples", w, allocs)
		}
	}
}

func TestSamplerNoAllocs(t *testing.T) {
	loop := sim.NewLoop()
	s := NewSampler(loop, 0, newJSONLWriter(io.Discard))
	fc := &fakeConn{paths: make([]transport.PathStats, 8)}
	s.addConn("h0", "h1", 1, transport.MetaRoCE, fc)
	s.addLink("l:ab", linkFunc(func() linkStats { return linkStats{Rate: 1e9} }))
	s.Sample(0)
	now := sim.Time(0)
	allocs := testing.AllocsPerRun(100, func() {
		now += 10
		s.Sample(now)
	})
	if allocs != 0 {
		t.Errorf("Sample allocates %v times", allocs)
	}
}

func TestCreatePicksFormat(t *testing.T) {
	dir := t.TempDir()
	for name, prefix := range map[string]string{"a.csv": "t_ns,kind,", "a.jsonl": `{"t_ns":`} {
		f, err := Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		s := sampleSet()[0]
		f.Write(&s)
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(dir, name))
		if !strings.HasPrefix(string(b), prefix) {
			t.Errorf("%s starts %q", name, b[:min(len(b), 20)])
		}
	}
}

func TestPlot(t *testing.T) {
	var samples []Sample
	for i := 0; i < 50; i++ {
		tt := sim.Time(i) * 10 * sim.Microsecond
		for p := 0; p < 3; p++ {
			samples = append(samples, Sample{T: tt, Kind: KindPath, Host: "h0", Peer: "h1", Conn: 1, Path: p,
				Cwnd: int64(4096 * (1 + p + i%5)), Rate: float64(p+1) * 1e9 * (1 + math.Sin(float64(i)/5))})
		}
		samples = append(samples, Sample{T: tt, Kind: KindLink, Link: "l0:ab", QueueBytes: int64(i * 100)})
	}
	for _, format := range []string{"png", "svg"} {
		var buf bytes.Buffer
		if err := Plot(&buf, samples, PlotSpec{Kind: KindPath, Metric: "cwnd", Host: "h0", Conn: 1, Format: format}); err != nil {
			t.Fatal(err)
		}
		magic := map[string]string{"png": "\x89PNG", "svg": "<?xml"}[format]
		if !bytes.HasPrefix(buf.Bytes(), []byte(magic)) {
			t.Errorf("%s plot starts %q", format, buf.Bytes()[:8])
		}
	}
	if err := Plot(io.Discard, samples, PlotSpec{Kind: KindPath, Metric: "queue_bytes"}); err == nil {
		t.Error("link metric on path plot accepted")
	}
	if err := Plot(io.Discard, samples, PlotSpec{Kind: KindPath, Metric: "cwnd", Host: "h9"}); err == nil {
		t.Error("plot with no data accepted")
	}
	dir := t.TempDir()
	files, err := PlotAll(dir, samples, "svg")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	if d := cmp.Diff([]string{"h0-conn1-cwnd.svg", "h0-conn1-rate.svg", "links-queue.svg"}, names); d != "" {
		t.Errorf("files (-want +got):\n%s", d)
	}
}

// FuzzReadJSONL: any input reads without panicking; what reads writes
// back and reads again to the same samples.
func FuzzReadJSONL(f *testing.F) {
	var buf bytes.Buffer
	w := newJSONLWriter(&buf)
	for _, s := range sampleSet() {
		w.Write(&s)
	}
	w.Close()
	f.Add(buf.Bytes())
	f.Add([]byte(`{"kind":"link","link":"a\u0000b","util":1e308}` + "\n"))
	f.Add([]byte(`{"kind":"bogus"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := readJSONL(bytes.NewReader(b))
		if err != nil {
			return
		}
		var out bytes.Buffer
		w := newJSONLWriter(&out)
		for i := range in {
			if err := w.Write(&in[i]); err != nil {
				t.Fatal(err)
			}
		}
		w.Close()
		back, err := readJSONL(&out)
		if err != nil {
			t.Fatalf("re-reading what was written: %v\n%s", err, out.String())
		}
		// Fields a kind does not have are not written, so compare what
		// each kind carries by writing both once more.
		var a, c bytes.Buffer
		wa, wc := newJSONLWriter(&a), newJSONLWriter(&c)
		for i := range back {
			wa.Write(&back[i])
		}
		for i := range in {
			wc.Write(&in[i])
		}
		wa.Close()
		wc.Close()
		if a.String() != c.String() {
			t.Fatalf("round trip differs:\n%s\n%s", a.String(), c.String())
		}
	})
}

// BenchmarkSample: one sampling instant of a 16-path connection and a link
// into a JSON-lines writer.
func BenchmarkSample(b *testing.B) {
	loop := sim.NewLoop()
	s := NewSampler(loop, 0, newJSONLWriter(io.Discard))
	s.addConn("h0", "h1", 1, transport.MetaRoCE, &fakeConn{paths: make([]transport.PathStats, 16)})
	s.addLink("l:AtoB", linkFunc(func() linkStats { return linkStats{Rate: 1e11} }))
	now := sim.Time(0)
	b.ReportAllocs()
	for b.Loop() {
		now += 10 * sim.Microsecond
		s.Sample(now)
	}
}
