package workload

import (
	"testing"

	"github.com/mrlab/mrlab/transport"
)

// benchKinds are the transports benchmarked.
func benchKinds() []transport.Kind {
	return []transport.Kind{transport.MetaRoCE, transport.RoCEv2}
}

// benchRun runs spec on a fresh lab per iteration and reports simulated
// goodput and the wall-clock packet rate (packets sent by NICs per second
// of benchmark time; switches forward each several times more).
func benchRun(b *testing.B, l lab, spec Spec) {
	var pkts uint64
	var gbpsSum float64
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		cl, _ := l.build(b)
		b.StartTimer()
		res, err := Run(cl, spec)
		if err != nil {
			b.Fatal(err)
		}
		pkts += res.PacketsSent
		gbpsSum += res.GoodputGbps
		n++
	}
	b.ReportMetric(gbpsSum/float64(n), "sim-Gb/s")
	b.ReportMetric(float64(pkts)/b.Elapsed().Seconds(), "pkts/s")
}

func BenchmarkWriteBW2Host(b *testing.B) {
	for _, k := range benchKinds() {
		b.Run(k.String(), func(b *testing.B) {
			benchRun(b, lab{hosts: 2, seed: 1}, Spec{Name: WriteBW, Transport: k, Size: 65536, Iterations: 1000, QueueDepth: 16})
		})
	}
}

func BenchmarkAllToAll8(b *testing.B) {
	for _, k := range benchKinds() {
		b.Run(k.String(), func(b *testing.B) {
			benchRun(b, lab{hosts: 8, leaves: 2, planes: 2, seed: 1}, Spec{Name: AllToAll, Transport: k, Size: 1 << 20, Iterations: 10})
		})
	}
}
