package live

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/labs/hostns"
)

// BenchmarkKernelPath is the kernel-traffic table of labs/live/README.md:
// iperf3 TCP and UDP and ICMP echo through live labs and through a plain
// veth pair, paired in the same run (veth, then lab, per repetition), so
// the figures read as ratios that the machine's load moves together.
// -kernel.reps sets the repetitions (the iteration count is not used:
// every sub-benchmark is one run); the metrics are medians, the log has
// every figure and the lab's lateness.
//
//	sudo go test ./labs/live -run '^$' -bench KernelPath -benchtime 1x -kernel.reps 5
//
// The labs are the default lab without its fabric loss (the targets are
// about what mrlab adds, not about TCP under random loss), capped at
// 1 Gbit/s, and b2b capped at 10 Gbit/s.
func BenchmarkKernelPath(b *testing.B) {
	testenv.RequireNamespaces(b)
	testenv.RequireCommand(b, "iperf3")
	// tcp is one iperf3 TCP run's received rate.
	tcp := func(b *testing.B) func(c, s *hostns.Namespace, a netip.Addr) (float64, error) {
		return func(c, s *hostns.Namespace, a netip.Addr) (float64, error) {
			r, err := iperf3Run(b, c, s, a, "-t", "3")
			return r.BitsPerSecond, err
		}
	}
	b.Run("tcp-spines-1g", func(b *testing.B) {
		p := pairUp(b, lossFreeDefault(b), 1e9, true)
		paired(b, p, tcp(b), func(veth, lab []float64) {
			b.ReportMetric(median(lab)/1e6, "lab-Mbit/s")
			b.ReportMetric(median(veth)/1e6, "veth-Mbit/s")
			b.ReportMetric(median(lab)/p.cap, "cap-ratio")
		})
	})
	b.Run("tcp-b2b-10g", func(b *testing.B) {
		p := pairUp(b, mustBuiltin(b, "b2b"), 10e9, false)
		// What the lab's runs cost whatever share of the machine they
		// got: the process's CPU time (the lab; iperf3 runs in child
		// processes) per packet written to h1's kernel, and the writes
		// (h1's mr0 packets: GRO-coalesced runs) per packet.
		var cpuPkt, writesPkt []float64
		run := tcp(b)
		paired(b, p, func(c, s *hostns.Namespace, a netip.Addr) (float64, error) {
			if c != p.lc {
				return run(c, s, a)
			}
			before, _ := p.lab.Status(context.Background())
			cpu0 := cpuTime()
			bps, err := run(c, s, a)
			cpu := cpuTime() - cpu0
			after, _ := p.lab.Status(context.Background())
			if h, h0 := after.Hosts[1], before.Hosts[1]; err == nil && h.ToKernel > h0.ToKernel && h.Kernel != nil && h0.Kernel != nil {
				pk := float64(h.ToKernel - h0.ToKernel)
				cpuPkt = append(cpuPkt, float64(cpu.Nanoseconds())/pk)
				writesPkt = append(writesPkt, float64(h.Kernel.RxPackets-h0.Kernel.RxPackets)/pk)
				b.Logf("lab: %.0f packets to h1's kernel, %.0f ns of the lab's CPU and %.3f writes a packet", pk, cpuPkt[len(cpuPkt)-1], writesPkt[len(writesPkt)-1])
			}
			return bps, err
		}, func(veth, lab []float64) {
			b.ReportMetric(median(lab)/1e6, "lab-Mbit/s")
			b.ReportMetric(median(veth)/1e6, "veth-Mbit/s")
			b.ReportMetric(median(ratios(lab, veth)), "veth-ratio")
			b.ReportMetric(median(cpuPkt), "lab-cpu-ns/pkt")
			b.ReportMetric(median(writesPkt), "writes/pkt")
		})
	})
	b.Run("udp-80pct-spines-1g", func(b *testing.B) {
		p := pairUp(b, lossFreeDefault(b), 1e9, true)
		rate := fmt.Sprintf("%.0f", 0.8*p.cap)
		paired(b, p, func(c, s *hostns.Namespace, a netip.Addr) (float64, error) {
			lab := c == p.lc
			var before Status
			var rcv0 uint64
			if lab {
				before, _ = p.lab.Status(context.Background())
				rcv0 = udpRcvbufErrors(b, s)
			}
			// A receive buffer of 4 MiB (what net.core.rmem_max allows here), as
			// anyone measuring UDP on a busy machine would give it.
			r, err := iperf3Run(b, c, s, a, "-u", "-b", rate, "-l", "1400", "-w", "4M", "-t", "3")
			// A sender the machine starves sends less and loses less:
			// the rate it reached says whether the loss is at 80%; the
			// lab's counters say where the loss was.
			if lab && err == nil {
				after, _ := p.lab.Status(context.Background())
				b.Logf("udp lab: %s", udpDropsWhere(r, before, after, udpRcvbufErrors(b, s)-rcv0))
			} else {
				b.Logf("udp veth: %.0f Mbit/s sent, %.2f%% lost", r.SentPerSecond/1e6, r.LostPercent)
			}
			return r.LostPercent, err
		}, func(veth, lab []float64) {
			b.ReportMetric(median(lab), "lab-loss-%")
			b.ReportMetric(median(veth), "veth-loss-%")
		})
	})
	b.Run("ping-spines-1g", func(b *testing.B) {
		p := pairUp(b, lossFreeDefault(b), 1e9, true)
		paired(b, p, func(c, s *hostns.Namespace, a netip.Addr) (float64, error) {
			if _, err := ping(c, a, 1, 3*time.Second); err != nil { // ARP, caches
				return 0, err
			}
			rtts, err := ping(c, a, 50, 3*time.Second)
			if err != nil {
				return 0, err
			}
			return float64(medianDur(rtts)), nil
		}, func(veth, lab []float64) {
			budget := 3*median(veth) + float64(p.wire)
			b.ReportMetric(median(lab)/1e3, "lab-us")
			b.ReportMetric(median(veth)/1e3, "veth-us")
			b.ReportMetric(float64(p.wire)/1e3, "wire-us")
			b.ReportMetric(median(lab)/budget, "budget-ratio")
		})
	})
}

// pair is a live lab and a veth pair up side by side.
type pair struct {
	lab          *Lab
	lc, ls       *hostns.Namespace // lab client and server
	laddr        netip.Addr
	vc, vs       *hostns.Namespace
	vaddr        netip.Addr
	cap          float64
	wire         time.Duration // the lab path's own propagation + serialization, there and back, for a ping
	client, serv string
}

// pairUp brings up lab capped at rate and a veth pair; the lab client is
// h0 and the server h0's first host on another leaf (crossSpine) or h1.
func pairUp(b *testing.B, lab *labs.Lab, rate float64, crossSpine bool) *pair {
	b.Helper()
	eng, err := NewLabEngine(lab, EngineConfig{MaxRate: rate})
	if err != nil {
		b.Fatal(err)
	}
	l, err := Up(context.Background(), testLabName("k"), eng, Options{RunDir: b.TempDir(), Logf: func(string, ...any) {}, WriterOnly: *writerOnly, ReaderOnly: *readerOnly,
		Pacer: PacerConfig{Spin: *kernelSpin}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	st := l.State()
	p := &pair{lab: l, cap: rate, client: "h0", serv: "h1"}
	h0, _ := st.Host("h0")
	if crossSpine {
		p.serv = otherLeafHost(b, st, h0).Name
	}
	hs, _ := st.Host(p.serv)
	p.lc, p.ls = openNS(b, h0.Namespace), openNS(b, hs.Namespace)
	p.laddr = netip.MustParseAddr(hs.Addr)
	p.vc, p.vs, p.vaddr = vethPair(b)
	// A ping's own time on the wire: 84-byte packets over every link of
	// the path (host, leaf, spine, leaf, host), both ways.
	hops := 1
	if crossSpine {
		hops = 4
	} else if len(lab.Topology().Switches) > 0 {
		hops = 2
	}
	lp := lab.Topology().Links[0].Params
	perHop := time.Duration(lp.Delay) + time.Duration(84*8/rate*1e9)
	p.wire = 2 * time.Duration(hops) * perHop
	return p
}

// kernelSpin is the labs' PacerConfig.Spin (0: measured; negative: never spin).
var kernelSpin = flag.Duration("kernel.spin", 0, "BenchmarkKernelPath labs' spin horizon (PacerConfig.Spin; 0 measures it, negative never spins)")

// kernelReps is how many paired repetitions BenchmarkKernelPath makes.
var kernelReps = flag.Int("kernel.reps", 3, "paired repetitions of each BenchmarkKernelPath figure")

// paired runs measure on veth and then on the lab, -kernel.reps times, logs every
// figure with the lab's lateness, and hands the series to report.
func paired(b *testing.B, p *pair, measure func(c, s *hostns.Namespace, a netip.Addr) (float64, error), report func(veth, lab []float64)) {
	b.Helper()
	var veth, lab []float64
	b.ResetTimer()
	for i := 0; i < *kernelReps; i++ {
		v, err := measure(p.vc, p.vs, p.vaddr)
		if err != nil {
			b.Fatalf("veth: %v", err)
		}
		before, _ := p.lab.Status(context.Background())
		x, err := measure(p.lc, p.ls, p.laddr)
		if err != nil {
			b.Fatalf("lab: %v", err)
		}
		after, _ := p.lab.Status(context.Background())
		veth, lab = append(veth, v), append(lab, x)
		b.Logf("rep %d: veth %.4g lab %.4g (lab lateness: %d of %d events late, max %v so far; spin horizon %v, worst wake-up %v; load %s)", i, v, x,
			after.Lag.EventsLate-before.Lag.EventsLate, after.Lag.Events-before.Lag.Events, after.Lag.MaxLag, after.Lag.Spin, after.Lag.WakeLatency, loadAvg())
	}
	b.StopTimer()
	b.Logf("veth %s; lab %s", spread(veth), spread(lab))
	if testing.Verbose() {
		s, _ := p.lab.Status(context.Background())
		js, _ := json.Marshal(struct {
			H any
			N any
			C any
		}{s.Hosts, s.Engine.NICs, s.Engine.Counters})
		b.Logf("lab counters: %s", js)
	}
	report(veth, lab)
}

// iperf3Result is what the tests read from iperf3's JSON summary.
type iperf3Result struct {
	BitsPerSecond float64 // received
	LostPercent   float64 // UDP
	Lost, Packets int     // UDP: datagrams lost, of those sent
	SentPerSecond float64 // UDP: the sender's rate, bits/s
	Retransmits   int     // TCP
}

// iperf3Run runs one iperf3 client against a one-off server. The test
// ends (see testenv.RequireCommand) when iperf3 is not installed.
func iperf3Run(t testing.TB, client, server *hostns.Namespace, addr netip.Addr, args ...string) (iperf3Result, error) {
	t.Helper()
	path := testenv.RequireCommand(t, "iperf3")
	srv := exec.Command(path, "-s", "-1", "-B", addr.String(), "-p", "5301")
	srv.Stdout, srv.Stderr = io.Discard, io.Discard
	if err := server.Start(srv); err != nil {
		return iperf3Result{}, err
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	var out strings.Builder
	// The server listens some time after it starts (longer on a busy
	// machine): a refused connection is retried, a few times.
	for try := 0; ; try++ {
		time.Sleep(300 * time.Millisecond)
		out.Reset()
		cl := exec.Command(path, append([]string{"-c", addr.String(), "-p", "5301", "-J"}, args...)...)
		cl.Stdout, cl.Stderr = &out, &out
		if err := client.Start(cl); err != nil {
			return iperf3Result{}, err
		}
		done := make(chan error, 1)
		go func() { done <- cl.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(60 * time.Second):
			cl.Process.Kill()
			<-done
			return iperf3Result{}, errors.New("iperf3 client timed out")
		}
		if err == nil {
			break
		}
		if !strings.Contains(out.String(), "Connection refused") || try == 5 {
			return iperf3Result{}, fmt.Errorf("iperf3: %v: %s", err, tailString(out.String(), 400))
		}
	}
	var r struct {
		End struct {
			SumReceived *struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
			SumSent *struct {
				Retransmits int `json:"retransmits"`
			} `json:"sum_sent"`
			Sum *struct {
				BitsPerSecond float64 `json:"bits_per_second"`
				LostPercent   float64 `json:"lost_percent"`
				LostPackets   int     `json:"lost_packets"`
				Packets       int     `json:"packets"`
			} `json:"sum"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(out.String()), &r); err != nil {
		return iperf3Result{}, fmt.Errorf("iperf3 output: %w: %s", err, tailString(out.String(), 200))
	}
	if r.Error != "" {
		return iperf3Result{}, fmt.Errorf("iperf3: %s", r.Error)
	}
	var res iperf3Result
	switch {
	case slices.Contains(args, "-u") && r.End.Sum != nil:
		res.BitsPerSecond = r.End.Sum.BitsPerSecond * (1 - r.End.Sum.LostPercent/100)
		res.LostPercent = r.End.Sum.LostPercent
		res.Lost, res.Packets = r.End.Sum.LostPackets, r.End.Sum.Packets
		res.SentPerSecond = r.End.Sum.BitsPerSecond
	case r.End.SumReceived != nil && r.End.SumReceived.BitsPerSecond > 0:
		res.BitsPerSecond = r.End.SumReceived.BitsPerSecond
		if r.End.SumSent != nil {
			res.Retransmits = r.End.SumSent.Retransmits
		}
	default:
		return res, errors.New("iperf3 output has no end summary")
	}
	return res, nil
}

// lossFreeDefault is the default lab without its fabric loss.
func lossFreeDefault(tb testing.TB) *labs.Lab {
	tb.Helper()
	src, err := labs.Source(labs.DefaultName)
	if err != nil {
		tb.Fatal(err)
	}
	s := strings.Replace(string(src), "  fabric:\n    impair: \"loss random 0.1%\"\n", "", 1)
	if s == string(src) {
		tb.Fatal("the default lab's loss line changed: update lossFreeDefault")
	}
	lab, err := labs.Parse("leafspine-lossfree.yaml", []byte(s))
	if err != nil {
		tb.Fatal(err)
	}
	return lab
}

func mustBuiltin(tb testing.TB, name string) *labs.Lab {
	tb.Helper()
	lab, err := labs.Builtin(name)
	if err != nil {
		tb.Fatal(err)
	}
	return lab
}

func median(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianDur(x []time.Duration) time.Duration {
	f := make([]float64, len(x))
	for i, d := range x {
		f[i] = float64(d)
	}
	return time.Duration(median(f))
}

func ratios(a, b []float64) []float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = a[i] / b[i]
	}
	return r
}

func spread(x []float64) string {
	if len(x) == 0 {
		return "none"
	}
	return fmt.Sprintf("median %.4g (min %.4g, max %.4g, n=%d)", median(x), slices.Min(x), slices.Max(x), len(x))
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// loadAvg is the machine's load averages (1, 5, 15 minutes), for the
// benchmarks' logs: figures measured on a busy machine say so.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
