package workload

import (
	"errors"
	"regexp"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// smallSpecs are quick runs of every workload.
func smallSpecs() []Spec {
	return []Spec{
		{Name: WriteBW, Size: 16384, Iterations: 64, QueueDepth: 8},
		{Name: SendBW, Size: 16384, Iterations: 64, QueueDepth: 8},
		{Name: ReadBW, Size: 16384, Iterations: 64, QueueDepth: 8},
		{Name: WriteLat, Size: 64, Iterations: 50},
		{Name: Permutation, Size: 16384, Iterations: 32},
		{Name: Incast, Size: 16384, Iterations: 32},
		{Name: AllToAll, Size: 64 << 10, Iterations: 4},
		{Name: AllReduce, Size: 64 << 10, Iterations: 3},
	}
}

func TestEveryWorkload(t *testing.T) {
	for _, kind := range []transport.Kind{transport.MetaRoCE, transport.RoCEv2} {
		for _, s := range smallSpecs() {
			t.Run(kind.String()+"/"+string(s.Name), func(t *testing.T) {
				cl, pool := lab{hosts: 4, leaves: 2, planes: 2, seed: 3}.build(t)
				s.Transport = kind
				res, err := Run(cl, s)
				if err != nil {
					t.Fatal(err)
				}
				if !res.Check.OK || res.Check.Regions == 0 || res.Errors != 0 {
					t.Fatalf("check %+v errors %d %s", res.Check, res.Errors, res.FirstError)
				}
				if res.Messages == 0 || res.GoodputGbps <= 0 {
					t.Errorf("nothing measured: %+v", res)
				}
				_ = pool
				t.Logf("%s: %.2f Gb/s, %d msgs, msg p50 %v, flows %d, %v", s.Name, res.GoodputGbps, res.Messages, res.MessageTime.P50, res.Flows, res.Elapsed)
			})
		}
	}
}

// TestDataCheckCatchesCorruption flips one byte in every registered region
// just before the check: every workload's check must fail.
func TestDataCheckCatchesCorruption(t *testing.T) {
	testBeforeVerify = func(r *runner) {
		for _, mr := range r.regions {
			mr.Bytes()[len(mr.Bytes())/2+1] ^= 0x5a
		}
	}
	defer func() { testBeforeVerify = nil }()
	for _, s := range smallSpecs() {
		t.Run(string(s.Name), func(t *testing.T) {
			cl, _ := lab{hosts: 4, leaves: 2, seed: 3}.build(t)
			s.Transport = transport.RoCEv2
			s.Iterations = min(s.Iterations, 20) // several slots stay unused: zero must be checked too
			res, err := Run(cl, s)
			if !errors.Is(err, ErrDataDiff) || res == nil || res.Check.OK || res.Check.BadRegions == 0 {
				t.Fatalf("corruption not caught: err %v check %+v", err, res.Check)
			}
		})
	}
}

// TestDurationConnsStreams covers the duration mode and several
// connections and streams per pair.
func TestDurationConnsStreams(t *testing.T) {
	for _, s := range []Spec{
		{Name: WriteBW, Duration: 200 * sim.Microsecond, Conns: 3, Streams: 4, Size: 8192},
		{Name: SendBW, Duration: 200 * sim.Microsecond, Conns: 2, Streams: 3, Size: 8192},
		{Name: ReadBW, Duration: 200 * sim.Microsecond, Conns: 2, Size: 8192},
		{Name: Incast, Iterations: 20, Conns: 2, Streams: 2, Size: 32768},
	} {
		t.Run(string(s.Name), func(t *testing.T) {
			cl, _ := lab{hosts: 4, leaves: 2, planes: 2, seed: 9, loss: 0.005}.build(t)
			s.Transport = transport.MetaRoCE
			res, err := Run(cl, s)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Check.OK || res.Errors != 0 {
				t.Fatalf("check %+v, errors %d %s", res.Check, res.Errors, res.FirstError)
			}
			wantFlows := s.Conns
			if s.Name == Incast {
				wantFlows = 3 * s.Conns
			}
			if res.Flows != wantFlows {
				t.Errorf("%d flows, want %d", res.Flows, wantFlows)
			}
			if s.Duration > 0 && (res.Elapsed < s.Duration || res.Elapsed > s.Duration+200*sim.Microsecond) {
				t.Errorf("ran %v for a %v duration", res.Elapsed, s.Duration)
			}
		})
	}
}

func TestTimeoutReportsPartialResult(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec Spec
		says *regexp.Regexp // what the error says of the unfinished flow
	}{
		{"iterations", Spec{Iterations: 100000}, regexp.MustCompile(`flow 0 h0->h1: \d+ of 100000 completed, \d+ in flight`)},
		{"duration", Spec{Duration: 10 * sim.Millisecond}, regexp.MustCompile(`flow 0 h0->h1: \d+ completed, \d+ in flight`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, _ := lab{hosts: 2}.build(t)
			s := tc.spec
			s.Name, s.Transport, s.Timeout = WriteBW, transport.MetaRoCE, 200*sim.Microsecond
			res, err := Run(cl, s)
			if !errors.Is(err, ErrTimeout) {
				t.Fatalf("error %v, want ErrTimeout", err)
			}
			if res == nil || res.Messages == 0 || res.Check.OK || !tc.says.MatchString(err.Error()) {
				t.Fatalf("partial result %+v, error %v, want it to match %v", res, err, tc.says)
			}
		})
	}
}

// TestRunsBackToBack runs several workloads one after the other on the same
// cluster, as a live lab does, and checks each one's figures are its own.
func TestRunsBackToBack(t *testing.T) {
	cl, _ := lab{hosts: 4, leaves: 2, planes: 2, seed: 4, loss: 0.005}.build(t)
	for i, s := range []Spec{
		{Name: WriteBW, Size: 16384, Iterations: 50},
		{Name: SendBW, Size: 16384, Iterations: 50, Transport: transport.RoCEv2},
		{Name: AllReduce, Size: 64 << 10, Iterations: 2},
		{Name: WriteBW, Size: 16384, Iterations: 50},
	} {
		res, err := Run(cl, s)
		if err != nil {
			t.Fatalf("run %d (%s): %v", i, s.Name, err)
		}
		if !res.Check.OK || res.Retransmits > res.PacketsSent {
			t.Fatalf("run %d: %+v", i, res)
		}
		// Let the previous run's teardown finish.
		cl.Loop.RunUntil(cl.Loop.Now() + 10*sim.Millisecond)
	}
	for _, n := range cl.NICs {
		if c := len(n.Conns()); c != 0 {
			t.Errorf("%s keeps %d connections", n.Name(), c)
		}
	}
}

// TestMultiRail: with one RoCEv2 queue pair per plane (the cluster's
// per-plane default or Conns = planes), every host pair's QPs sit on
// distinct planes, point-to-point messages and collective chunks are
// striped over them, every plane carries data and the data arrives
// intact.
func TestMultiRail(t *testing.T) {
	const planes = 4
	for _, s := range []Spec{
		{Name: WriteBW, Size: 16384, Iterations: 64},
		{Name: Permutation, Size: 16384, Iterations: 32, Conns: planes},
		{Name: AllToAll, Size: 64 << 10, Iterations: 2},
		{Name: AllReduce, Size: 64 << 10, Iterations: 2},
	} {
		t.Run(string(s.Name), func(t *testing.T) {
			cl, _ := lab{hosts: 4, leaves: 2, planes: planes, seed: 5}.build(t)
			cl.roceQPs = -1 // labs.PerPlane
			s.Transport = transport.RoCEv2
			var ports map[[2]string]map[int]bool
			testBeforeVerify = func(r *runner) {
				ports = map[[2]string]map[int]bool{}
				for _, q := range r.queues {
					for _, req := range q.reqs {
						k := [2]string{r.cl.Hosts[req.from], r.cl.Hosts[req.to]}
						if ports[k] == nil {
							ports[k] = map[int]bool{}
						}
						ports[k][req.dial.Transport().(interface{ Port() int }).Port()] = true
					}
				}
			}
			defer func() { testBeforeVerify = nil }()
			res, err := Run(cl, s)
			if err != nil {
				t.Fatal(err)
			}
			if res.Conns != planes || !res.Check.OK || res.Errors != 0 {
				t.Fatalf("conns %d, check %+v, errors %d", res.Conns, res.Check, res.Errors)
			}
			for k, p := range ports {
				if len(p) != planes {
					t.Errorf("%s->%s: QPs on planes %v, want one on each of %d", k[0], k[1], p, planes)
				}
			}
			for p, u := range res.PlaneUtil {
				if u <= 0 {
					t.Errorf("plane %d carried nothing (%v)", p, res.PlaneUtil)
				}
			}
			if s.Iterations > 0 && (s.Name == WriteBW || s.Name == Permutation) && res.Messages != int64(s.Iterations*res.Flows/planes) {
				t.Errorf("%d messages over %d flows, want %d per host pair in all", res.Messages, res.Flows, s.Iterations)
			}
		})
	}
	// MetaRoCE keeps one connection per pair: it spans every plane.
	cl, _ := lab{hosts: 4, leaves: 2, planes: planes, seed: 5}.build(t)
	cl.roceQPs = -1
	if n := cl.ConnsPerPeer(transport.MetaRoCE); n != 1 {
		t.Errorf("MetaRoCE conns per peer %d, want 1", n)
	}
	if n := cl.ConnsPerPeer(transport.RoCEv2); n != planes {
		t.Errorf("RoCEv2 conns per peer %d, want %d", n, planes)
	}
}

// TestManyConnsFewMessages: a pair's messages are striped over its
// connections, so a connection registers destination slots for its share
// only — 4,000 connections of a message each fit in memory.
func TestManyConnsFewMessages(t *testing.T) {
	cl, _ := lab{hosts: 4, leaves: 2, seed: 2}.build(t)
	var registered int
	testBeforeVerify = func(r *runner) {
		for _, mr := range r.regions {
			registered += len(mr.Bytes())
		}
	}
	defer func() { testBeforeVerify = nil }()
	res, err := Run(cl, Spec{Name: Permutation, Transport: transport.MetaRoCE, Size: 16 << 10, QueueDepth: 2, Conns: 64, Iterations: 64})
	if err != nil {
		t.Fatal(err)
	}
	if res.Messages != 4*64 || res.Flows != 4*64 {
		t.Errorf("%d messages over %d flows, want 256 and 256", res.Messages, res.Flows)
	}
	// Source slots (qd per connection) and one destination slot per
	// connection: about 12 MiB; a slot ring per connection would be 270.
	if registered > 16<<20 {
		t.Errorf("registered %d MiB for 256 messages of 16 KiB", registered>>20)
	}
}

// TestAllToAllPostsStaggered: in each operation rank i posts to its peers
// in the order i+1, i+2, ... (mod N), as NCCL schedules them, so every
// rank's first WRITE goes to a different receiver (posting to 0, 1, 2, ...
// from every rank put all first packets on one receiver at once).
func TestAllToAllPostsStaggered(t *testing.T) {
	const n = 4
	var order [n][]int
	testA2APost = func(src, dst int) { order[src] = append(order[src], dst) }
	defer func() { testA2APost = nil }()
	cl, _ := lab{hosts: n, leaves: 2, seed: 3}.build(t)
	res, err := Run(cl, Spec{Name: AllToAll, Transport: transport.MetaRoCE, Size: 64 << 10, Iterations: 2})
	if err != nil || !res.Check.OK {
		t.Fatalf("run: %v, check %+v", err, res.Check)
	}
	for i, got := range order {
		if len(got) != 2*(n-1) {
			t.Fatalf("rank %d posted %d WRITEs in 2 operations, want %d", i, len(got), 2*(n-1))
		}
		for k, dst := range got {
			if want := (i + 1 + k%(n-1)) % n; dst != want {
				t.Fatalf("rank %d posted to %v, want i+1, i+2, ... (mod %d) in each operation", i, got, n)
			}
		}
	}
}
