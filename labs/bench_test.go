package labs

import (
	"testing"

	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/workload/udpgen"
)

// BenchmarkParse parses and checks the largest built-in lab (640 links).
func BenchmarkParse(b *testing.B) {
	src, err := Source("leafspine-64h-8p")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("x.yaml", src); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuild builds the largest built-in lab's fabric.
func BenchmarkBuild(b *testing.B) {
	lab, err := Builtin("leafspine-64h-8p")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lab.Build(sim.NewLoop(), packet.NewPool()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunDefaultLab advances the default lab, carrying paced UDP at
// half load on every host and plane, by 10us of virtual time per op, in
// steady state. ns/event and allocs/op show the cost per packet event.
func BenchmarkRunDefaultLab(b *testing.B) {
	lab, err := Builtin(DefaultName)
	if err != nil {
		b.Fatal(err)
	}
	loop := sim.NewLoop()
	pool := packet.NewPool()
	n, err := lab.Build(loop, pool)
	if err != nil {
		b.Fatal(err)
	}
	hosts, err := udpgen.AttachAll(n, pool, loop)
	if err != nil {
		b.Fatal(err)
	}
	for i, h := range hosts {
		dst := hosts[(i+len(hosts)/2)%len(hosts)]
		for p := 0; p < 2; p++ {
			if _, err := h.AddFlow(udpgen.FlowSpec{Dst: dst.Addr(), SrcPort: uint16(40000 + 2*i + p), DstPort: 9,
				Plane: p, Size: 4096, Rate: 50e9, ECN: header.ECNECT0}); err != nil {
				b.Fatal(err)
			}
		}
		h.Start(0)
	}
	loop.RunUntil(100 * sim.Microsecond)
	before := loop.Fired()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		loop.RunUntil(loop.Now() + 10*sim.Microsecond)
	}
	b.StopTimer()
	events := float64(loop.Fired() - before)
	b.ReportMetric(events/float64(b.N), "events/op")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/events, "ns/event")
}
