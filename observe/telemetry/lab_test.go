package telemetry

import (
	"net/netip"
	"testing"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

// rocev2Lab runs write_bw h0 -> h1 over RoCEv2 on a back-to-back link that
// loses 1% of packets, with the sampler watching both NICs and the fabric.
func rocev2Lab(t *testing.T, every sim.Time) (*Recorder, *workload.Result) {
	t.Helper()
	topo, err := fabric.BackToBack(fabric.BackToBackParams{Link: fabric.LinkParams{Rate: 100e9, Delay: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	loop := sim.NewLoop()
	pool := packet.NewPool()
	n, err := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	imp, _ := fabric.ParseImpairment("loss 1%")
	if err := n.SetImpairment("p0-h0-h1", fabric.AtoB, imp); err != nil {
		t.Fatal(err)
	}
	cl, err := workload.NewCluster("b2b", loop, pool, n, 3, workload.NICOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var rec Recorder
	s := NewSampler(loop, every, &rec)
	names := map[netip.Addr]string{}
	for _, h := range topo.Hosts {
		names[h.Addr] = h.Name
	}
	for i, nic := range cl.NICs {
		s.AddNIC(cl.Hosts[i], nic, func(a netip.Addr) string { return names[a] })
	}
	s.AddNetwork(n, false)
	s.Start(0)
	res, err := workload.Run(cl, workload.Spec{Name: workload.WriteBW, Transport: transport.RoCEv2, Size: 65536, Iterations: 200})
	if err != nil {
		t.Fatal(err)
	}
	s.Sample(loop.Now())
	s.Stop()
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
	return &rec, res
}

func TestSamplerRoCEv2Lab(t *testing.T) {
	rec, res := rocev2Lab(t, 20*sim.Microsecond)
	var lastConn *Sample
	var retxAt sim.Time = -1
	var maxSend, maxUtil, maxRate float64
	linkDrops := uint64(0)
	sawIdleReverse := 0
	for i := range rec.Samples {
		s := &rec.Samples[i]
		switch s.Kind {
		case KindConn:
			if s.Host != "h0" {
				continue
			}
			if s.Peer != "h1" || s.Transport != "rocev2" {
				t.Fatalf("conn sample %+v", s)
			}
			if s.Retransmits > 0 && retxAt < 0 {
				retxAt = s.T
			}
			maxSend = max(maxSend, s.SendRate)
			maxRate = max(maxRate, s.Rate)
			lastConn = s
		case KindLink:
			if s.Link == "p0-h0-h1:AtoB" {
				linkDrops = s.Drops
				maxUtil = max(maxUtil, s.Util)
			} else {
				sawIdleReverse++
			}
		}
	}
	if lastConn == nil {
		t.Fatal("no connection samples")
	}
	t.Logf("retransmits %d (first seen at %v), goodput %.1f Gb/s, max send %.1f Gb/s, max util %.2f, link drops %d, reverse samples %d",
		lastConn.Retransmits, retxAt, res.GoodputGbps, maxSend/1e9, maxUtil, linkDrops, sawIdleReverse)
	if lastConn.Retransmits == 0 || retxAt < 0 {
		t.Error("1% loss but no retransmission in telemetry")
	}
	if linkDrops == 0 {
		t.Error("no drops on the lossy link direction")
	}
	// Counters move when a packet starts, so an interval can hold one
	// packet more than its share (4 KiB in 20us is 1.7% of 100G); the
	// NIC can also burst into the port's queue.
	if maxSend < 10e9 || maxSend > 120e9 {
		t.Errorf("max send rate %.3g bit/s, want about the 100G line rate", maxSend)
	}
	if maxUtil <= 0.5 || maxUtil > 1.02 {
		t.Errorf("max utilization %.3f, want near but not beyond 1", maxUtil)
	}
	// The sender's series ends where the workload's own count does.
	if lastConn.Retransmits != res.Retransmits {
		t.Errorf("telemetry says %d retransmissions, the workload %d", lastConn.Retransmits, res.Retransmits)
	}
	// The sender's record carries what the peer acknowledged: every byte
	// of the run by the end, at a rate near the goodput's at its peak.
	if lastConn.BytesAcked != uint64(res.Bytes) {
		t.Errorf("sender's bytes_acked %d, the workload delivered %d", lastConn.BytesAcked, res.Bytes)
	}
	if maxRate < res.GoodputGbps*1e9/2 {
		t.Errorf("sender's peak rate_bps %.3g, goodput %.3g Gb/s", maxRate, res.GoodputGbps)
	}
}
