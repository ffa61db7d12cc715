package live

import (
	"context"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

// TestObservabilityOnDevices runs the mini lab's real fabric and NICs on
// fake devices (no root needed: perf runs are NIC to NIC, no kernel) and
// watches a lossy MetaRoCE run through the trace, /telemetry and the
// Prometheus endpoint, as TestLiveLab does in namespaces.
func TestObservabilityOnDevices(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 1.5s perf run in real time")
	}
	lab := loadTestLabFile(t, "testdata/mini.yaml")
	eng, err := NewLabEngine(lab, EngineConfig{MaxRate: DefaultMaxRate, Name: testLabName("o")})
	if err != nil {
		t.Fatal(err)
	}
	var devs []Device
	for range eng.Hosts() {
		devs = append(devs, newPipe())
	}
	l, err := Up(context.Background(), testLabName("o"), eng, Options{RunDir: t.TempDir(), Devices: devs, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	checkObservability(t, l, "h0", "h2")
}

// TestMetricsOff: --metrics off serves no endpoint and records none; a
// non-loopback address is refused before anything is created.
func TestMetricsOff(t *testing.T) {
	lab := loadTestLabFile(t, "testdata/mini.yaml")
	dir := t.TempDir()
	up := func(metrics string) (*Lab, error) {
		eng, err := NewLabEngine(lab, EngineConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var devs []Device
		for range eng.Hosts() {
			devs = append(devs, newPipe())
		}
		return Up(context.Background(), testLabName("m"), eng, Options{RunDir: dir, Devices: devs, Metrics: metrics})
	}
	l, err := up(metricsOff)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ReadState(dir, l.Name())
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Metrics != "" || s.Metrics != "" {
		t.Errorf("metrics off: state %q, status %q", st.Metrics, s.Metrics)
	}
	// /telemetry on the control socket still works without the endpoint.
	if _, err := NewClient(l.Name(), st.Socket).Telemetry(context.Background()); err != nil {
		t.Errorf("telemetry with metrics off: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"0.0.0.0:9464", "localhost:9464", "198.18.0.1:80", "127.0.0.1", "127.0.0.1:99999"} {
		if l, err := up(addr); err == nil {
			l.Close()
			t.Errorf("metrics %q accepted", addr)
		} else if _, serr := ReadState(dir, testLabName("m")); serr == nil {
			t.Errorf("metrics %q: refused (%v) but left a state file", addr, err)
		}
	}
}

// loadTestLabFile loads a lab file.
func loadTestLabFile(t testing.TB, path string) *labs.Lab {
	t.Helper()
	lab, err := labs.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return lab
}

// steadyWindow is the stretch of a write_bw run steadyRun measures: after
// connection set-up, before the run ends.
const (
	steadyFrom = 500 * sim.Microsecond
	steadyTo   = 2500 * sim.Microsecond
)

// steadyRun runs a MetaRoCE write_bw h0 -> h2 on the mini lab in virtual
// time, through the live engine (trace hub on every NIC, capture and
// trace observers on the fabric, telemetry sampler; nobody watching) or
// on a bare workload cluster as sim runs build it, with impair on h0-p0.
// It returns the heap allocations, the packets the NICs sent and the CPU
// time of the steady window.
func steadyRun(tb testing.TB, engine bool, impair string) (allocs, pkts uint64, cpu time.Duration) {
	tb.Helper()
	lab := loadTestLabFile(tb, "testdata/mini.yaml")
	loop := sim.NewLoop()
	pool := packet.NewPool()
	var cl *workload.Cluster
	var net *fabric.Network
	if engine {
		eng, err := NewLabEngine(lab, EngineConfig{})
		if err != nil {
			tb.Fatal(err)
		}
		e := eng.(*labEngine)
		if err := e.Start(loop, pool, func(int, sim.Time, []byte) {}); err != nil {
			tb.Fatal(err)
		}
		e.routes(nil, http.NewServeMux())
		cl, net = e.cl, e.net
	} else {
		var err error
		if net, err = fabric.Build(loop, pool, lab.Topology(), fabric.BuildOptions{Seed: lab.Seed, DetectionDelay: lab.DetectionDelay}); err != nil {
			tb.Fatal(err)
		}
		if cl, err = workload.NewCluster(lab.Name, loop, pool, net, lab.Seed, workload.NICOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	if impair != "" {
		imp, err := fabric.ParseImpairment(impair)
		if err != nil {
			tb.Fatal(err)
		}
		if err := net.SetImpairment("h0-p0", fabric.Both, imp); err != nil {
			tb.Fatal(err)
		}
	}
	var runErr error
	done := false
	err := workload.Start(cl, workload.Spec{Name: workload.WriteBW, Transport: transport.MetaRoCE, Size: 64 << 10,
		Duration: 3 * sim.Millisecond, From: []string{"h0"}, To: []string{"h2"}, Timeout: sim.Second},
		func(_ *workload.Result, err error) { done, runErr = true, err })
	if err != nil {
		tb.Fatal(err)
	}
	sent := func() (n uint64) {
		for _, nic := range cl.NICs {
			n += nic.Stats().TxPackets
		}
		return n
	}
	loop.RunUntil(steadyFrom)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	p0, t0 := sent(), time.Now()
	loop.RunUntil(steadyTo)
	cpu = time.Since(t0)
	p1 := sent()
	runtime.ReadMemStats(&m1)
	// The engine's sampler re-arms forever: run until the workload ends.
	for !done && loop.Now() < sim.Second && loop.Step() {
	}
	if !done || runErr != nil {
		tb.Fatalf("write_bw: done %v, %v", done, runErr)
	}
	return m1.Mallocs - m0.Mallocs, p1 - p0, cpu
}

// TestEngineObservabilityAllocs: the live engine's observability, with
// nobody watching, adds no allocation per packet to a lossless run. Under
// loss it adds what the transports' trace calls box (a few per loss
// reaction: transport.Tracer takes ...any), which is bounded here.
func TestEngineObservabilityAllocs(t *testing.T) {
	for _, tc := range []struct {
		impair string
		extra  float64 // allocations per packet the engine may add
	}{
		{"", 0.001},
		{"loss random 1%", 0.05},
	} {
		ba, bp, _ := steadyRun(t, false, tc.impair)
		ea, ep, _ := steadyRun(t, true, tc.impair)
		if bp < 1000 || ep < 1000 {
			t.Fatalf("%q: too few packets in the window: bare %d, engine %d", tc.impair, bp, ep)
		}
		if bp != ep {
			// Same lab, seed and spec: watching must not change the run.
			t.Errorf("%q: the engine's run sent %d packets in the window, the bare cluster's %d", tc.impair, ep, bp)
		}
		bare, eng := float64(ba)/float64(bp), float64(ea)/float64(ep)
		t.Logf("impair %q: bare %d allocs / %d packets = %.4f, engine %d / %d = %.4f", tc.impair, ba, bp, bare, ea, ep, eng)
		if eng > bare+tc.extra {
			t.Errorf("impair %q: the engine allocates %.4f per packet, the bare cluster %.4f (allowed +%v)", tc.impair, eng, bare, tc.extra)
		}
	}
}

// BenchmarkEngineObservability measures the live engine's idle
// observability: CPU time and allocations per packet sent in a write_bw
// run's steady window, engine against the bare cluster in the same run
// (the ratio is the cost).
func BenchmarkEngineObservability(b *testing.B) {
	for _, impair := range []string{"", "loss random 1%"} {
		name := "lossless"
		if impair != "" {
			name = "loss1pct"
		}
		b.Run(name, func(b *testing.B) {
			var bns, ens, ball, eall, bpk, epk float64
			for i := 0; i < b.N; i++ {
				a, p, d := steadyRun(b, false, impair)
				bns, ball, bpk = bns+float64(d.Nanoseconds()), ball+float64(a), bpk+float64(p)
				a, p, d = steadyRun(b, true, impair)
				ens, eall, epk = ens+float64(d.Nanoseconds()), eall+float64(a), epk+float64(p)
			}
			b.ReportMetric(bns/bpk, "bare-ns/pkt")
			b.ReportMetric(ens/epk, "engine-ns/pkt")
			b.ReportMetric((ens/epk)/(bns/bpk), "engine/bare")
			b.ReportMetric(ball/bpk, "bare-allocs/pkt")
			b.ReportMetric(eall/epk, "engine-allocs/pkt")
		})
	}
}

func TestValidMetricsAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{metricsOff, true},
		{DefaultMetricsAddr, true},
		{"127.0.0.1:9464", true},
		{"127.1.2.3:9464", true},
		{"[::1]:0", true},
		{"0.0.0.0:9464", false},
		{"[::]:9464", false},
		{"localhost:9464", false},
		{"198.18.0.1:9464", false},
		{"127.0.0.1", false},
		{"127.0.0.1:http", false},
		{"127.0.0.1:65536", false},
		{"", false},
		{"on", false},
	} {
		if err := ValidMetricsAddr(tc.addr); (err == nil) != tc.ok {
			t.Errorf("ValidMetricsAddr(%q) = %v, want ok %v", tc.addr, err, tc.ok)
		}
	}
}
