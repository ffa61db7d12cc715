package live

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/labs/hostns"
)

// Kernel-path benchmarks: the same transfer through a live 2-host lab
// (the built-in b2b: one link, capped to 1 Gbit/s, between two TUN hosts)
// and through a plain veth pair between two namespaces, in the same run,
// so the figures read as a ratio. They need root and skip without.
//
//	sudo go test ./labs/live -run '^$' -bench . -benchtime 20x

// pairHosts brings up the pair lab (kind "lab") or a veth pair (kind
// "veth") and returns the client and server namespaces and the server's
// address.
func pairHosts(b *testing.B, kind string) (client, server *hostns.Namespace, addr netip.Addr) {
	b.Helper()
	testenv.RequireNamespaces(b)
	if kind == "veth" {
		return vethPair(b)
	}
	lab, err := labs.Builtin("b2b")
	if err != nil {
		b.Fatal(err)
	}
	eng, err := NewLabEngine(lab, EngineConfig{MaxRate: DefaultMaxRate})
	if err != nil {
		b.Fatal(err)
	}
	l, err := Up(context.Background(), testLabName("b"), eng, Options{RunDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		s, _ := l.Status(context.Background())
		if s.Lag.EventsLate > 0 {
			b.Logf("lab lag: %d of %d events late, max %v", s.Lag.EventsLate, s.Lag.Events, s.Lag.MaxLag)
		}
		if testing.Verbose() {
			b.Logf("hosts %+v\nfabric %v\nnics %v", s.Hosts, s.Engine.Counters, s.Engine.NICs)
		}
		l.Close()
	})
	st := l.State()
	c := openNS(b, st.Hosts[0].Namespace)
	s := openNS(b, st.Hosts[1].Namespace)
	return c, s, netip.MustParseAddr(st.Hosts[1].Addr)
}

// BenchmarkKernelTCP moves 1 MiB per iteration over one TCP connection.
func BenchmarkKernelTCP(b *testing.B) {
	for _, kind := range []string{"veth", "lab"} {
		b.Run(kind, func(b *testing.B) {
			c, s, addr := pairHosts(b, kind)
			b.SetBytes(1 << 20)
			b.ResetTimer()
			r, err := tcpTransfer(c, s, addr, int64(b.N)<<20, 5*time.Minute, nil)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if !r.OK {
				b.Fatalf("transfer corrupted: %+v", r)
			}
			b.ReportMetric(r.Mbps(), "Mbit/s")
		})
	}
}

// BenchmarkKernelUDP sends one 1400-byte datagram per iteration, paced at
// 900 Mbit/s (under the lab's 1 Gbit/s cap), and reports what arrived.
func BenchmarkKernelUDP(b *testing.B) {
	for _, kind := range []string{"veth", "lab"} {
		b.Run(kind, func(b *testing.B) {
			c, s, addr := pairHosts(b, kind)
			b.SetBytes(1400)
			b.ResetTimer()
			r, err := udpBlast(c, s, addr, b.N, 1400, 900e6)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(r.Mbps(), "rx-Mbit/s")
			b.ReportMetric(100*float64(r.Sent-r.Received)/float64(max(r.Sent, 1)), "loss-%")
		})
	}
}

// BenchmarkKernelPing: one ICMP echo per iteration; ns/op is the RTT.
func BenchmarkKernelPing(b *testing.B) {
	for _, kind := range []string{"veth", "lab"} {
		b.Run(kind, func(b *testing.B) {
			c, _, addr := pairHosts(b, kind)
			if _, err := ping(c, addr, 1, 3*time.Second); err != nil { // warm up (ARP on veth)
				b.Fatal(err)
			}
			b.ResetTimer()
			if _, err := ping(c, addr, b.N, 3*time.Second); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkLivePerf runs write_bw between the b2b lab's two NICs for 2s of
// wall time per transport and reports goodput; iterations are ignored (one
// run per benchmark call). Compare with BenchmarkKernelTCP's veth figure.
func BenchmarkLivePerf(b *testing.B) {
	for _, tr := range []string{"metaroce", "rocev2"} {
		b.Run(tr, func(b *testing.B) {
			testenv.RequireNamespaces(b)
			lab, err := labs.Builtin("b2b")
			if err != nil {
				b.Fatal(err)
			}
			eng, err := NewLabEngine(lab, EngineConfig{MaxRate: DefaultMaxRate})
			if err != nil {
				b.Fatal(err)
			}
			l, err := Up(context.Background(), testLabName("p"), eng, Options{RunDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			b.ResetTimer()
			r, err := l.Perf(context.Background(), PerfRequest{From: "h0", To: "h1", Op: "write", Transport: tr, Size: 64 << 10, Duration: 2 * time.Second, Verify: true})
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if !r.Verified || r.Errors > 0 {
				b.Fatalf("run failed: %+v", r)
			}
			s, _ := l.Status(context.Background())
			b.ReportMetric(r.Goodput/1e6, "goodput-Mbit/s")
			b.ReportMetric(float64(s.Lag.EventsLate), "events-late")
		})
	}
}
