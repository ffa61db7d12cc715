package web

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/workload"
)

// midAllToAll builds the 64-host, 8-plane lab with an all-to-all under
// way (8064 connection ends, 16 paths each) and returns a probe of it.
func midAllToAll(b *testing.B) (*Probe, *sim.Loop) {
	b.Helper()
	lab, err := labs.Resolve("leafspine-64h-8p")
	if err != nil {
		b.Fatal(err)
	}
	loop, pool := sim.NewLoop(), packet.NewPool()
	net, err := lab.Build(loop, pool)
	if err != nil {
		b.Fatal(err)
	}
	cl, err := workload.NewCluster(lab.Name, loop, pool, net, lab.Seed, workload.NICOptions{})
	if err != nil {
		b.Fatal(err)
	}
	probe := NewProbe(net)
	for i, nic := range cl.NICs {
		probe.AddNIC(cl.Hosts[i], nic)
	}
	if err := workload.Start(cl, workload.Spec{Name: workload.AllToAll, Iterations: 5, Seed: 1}, func(*workload.Result, error) {}); err != nil {
		b.Fatal(err)
	}
	loop.RunUntil(20 * sim.Microsecond)
	return probe, loop
}

// BenchmarkRecordFrame is one frame of a recording of the 64-host,
// 8-plane all-to-all: a snapshot with every path's route, and its rows.
func BenchmarkRecordFrame(b *testing.B) {
	probe, loop := midAllToAll(b)
	r, err := NewRecorder(io.Discard, loop, probe.net, ReplayMeta{}, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	for i, h := range probe.hosts {
		r.AddNIC(h.name, probe.hosts[i].nic)
	}
	r.Sample(loop.Now())
	for b.Loop() {
		// A frame interval of the run between frames, as a recording
		// has it.
		b.StopTimer()
		loop.RunUntil(loop.Now() + 2*sim.Microsecond)
		b.StartTimer()
		r.Sample(loop.Now())
	}
}

// BenchmarkSnapshot is the live lab's GET /web/snapshot on the same lab:
// every link, NIC and connection, no paths.
func BenchmarkSnapshot(b *testing.B) {
	probe, loop := midAllToAll(b)
	for b.Loop() {
		s := probe.Snapshot(loop.Now(), nil)
		json.NewEncoder(io.Discard).Encode(s)
	}
}
