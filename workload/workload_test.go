package workload

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// lab describes a test fabric.
type lab struct {
	hosts, planes, leaves int
	loss                  float64
	corrupt, dup          float64 // impairment probabilities on every link
	delay                 sim.Time
	seed                  uint64
	obs                   fabric.Observer
	// lossAt is where impaired frames are lost or corrupted: on the wire
	// (the default: the receiving port drops a corrupted frame as an FCS
	// error) or at enqueue, as netem does (a corrupted frame reaches the
	// NIC, whose checksum must catch it).
	lossAt fabric.LossPoint
}

func (l lab) build(t testing.TB) (*Cluster, *packet.Pool) {
	t.Helper()
	link := fabric.LinkParams{Delay: l.delay}
	if l.delay == 0 {
		link.Delay = sim.Microsecond
	}
	link.ECN = fabric.ECNConfig{Mode: fabric.ECNStep, K: 100 << 10}
	if l.loss > 0 {
		link.Impair.Loss = fabric.LossModel{Kind: fabric.LossRandom, P: l.loss}
	}
	link.Impair.Corrupt, link.Impair.Duplicate = l.corrupt, l.dup
	link.LossAt = l.lossAt
	var topo *fabric.Topology
	var err error
	if l.hosts == 2 && l.leaves == 0 {
		topo, err = fabric.BackToBack(fabric.BackToBackParams{Planes: max(l.planes, 1), Link: link})
	} else {
		leaves := max(l.leaves, 1)
		topo, err = fabric.LeafSpine(fabric.LeafSpineParams{Planes: max(l.planes, 1), Leaves: leaves,
			Spines: 2, HostsPerLeaf: l.hosts / leaves, HostLink: link})
	}
	if err != nil {
		t.Fatal(err)
	}
	loop := sim.NewLoop()
	pool := packet.NewPool()
	net, err := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: l.seed})
	if err != nil {
		t.Fatal(err)
	}
	if l.obs != nil {
		net.SetObserver(l.obs)
	}
	cl, err := NewCluster(topo.Name, loop, pool, net, l.seed, NICOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cl, pool
}

func TestWriteBWRoCEv2(t *testing.T) {
	cl, _ := lab{hosts: 2}.build(t)
	res, err := Run(cl, Spec{Name: WriteBW, Transport: transport.RoCEv2, Size: 65536, Iterations: 200})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Check.OK || res.Messages != 200 || res.Bytes != 200*65536 {
		t.Fatalf("result %+v", res)
	}
	if res.GoodputGbps < 50 || res.GoodputGbps > 100 {
		t.Errorf("goodput %.1f Gb/s on a 100 Gb/s link", res.GoodputGbps)
	}
	t.Logf("goodput %.2f Gb/s peak %.2f, %v, %d packets", res.GoodputGbps, res.BWPeakGbps, res.Elapsed, res.PacketsSent)
}

func TestSpecErrors(t *testing.T) {
	cl, _ := lab{hosts: 2}.build(t)
	for _, s := range []Spec{
		{Name: "nope"},
		{Name: WriteBW, From: []string{"h9"}},
		{Name: WriteBW, QueueDepth: -1},
		{Name: WriteLat, QueueDepth: 4},
		{Name: WriteBW, Transport: transport.RoCEv2, Streams: 2},
		{Name: WriteBW, From: []string{"h0"}, To: []string{"h0"}},
	} {
		if _, err := Run(cl, s); !errors.Is(err, ErrBadSpec) {
			t.Errorf("%+v: error %v, want ErrBadSpec", s, err)
		}
	}
}

// TestDeterministic runs the same lossy workload twice with one seed and
// once with another: the same seed must give the same packet trace and the
// same result, another seed a different trace.
func TestDeterministic(t *testing.T) {
	for _, kind := range []transport.Kind{transport.MetaRoCE, transport.RoCEv2} {
		run := func(seed uint64) (uint64, *Result) {
			h := fabric.NewTraceHash()
			cl, _ := lab{hosts: 4, leaves: 2, planes: 2, seed: seed, loss: 0.01, obs: h}.build(t)
			res, err := Run(cl, Spec{Name: AllToAll, Transport: kind, Size: 256 << 10, Iterations: 3, Timeout: 100 * sim.Second})
			if err != nil {
				t.Fatal(err)
			}
			return h.Sum(), res
		}
		h1, r1 := run(5)
		h2, r2 := run(5)
		h3, _ := run(6)
		if h1 != h2 {
			t.Errorf("%v: same seed, different traces: %x %x", kind, h1, h2)
		}
		if d := cmp.Diff(r1, r2); d != "" {
			t.Errorf("%v: same seed, different results:\n%s", kind, d)
		}
		if h1 == h3 {
			t.Errorf("%v: different seeds, same trace", kind)
		}
	}
}
