package fabric_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/fabric/partition"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// genHost sends UDP packets to random hosts from its partition's loop and
// folds every packet it receives, in the order it receives them, into a
// hash.
type genHost struct {
	addr  netip.Addr
	ports []*fabric.Port
	loop  *sim.Loop
	pool  *packet.Pool
	timer sim.Timer
	rng   *rand.Rand
	dsts  []netip.Addr
	left  int
	sent  int
	got   int
	h     uint64
}

func (g *genHost) fire(now sim.Time) {
	if g.left == 0 {
		return
	}
	g.left--
	dst := g.dsts[g.rng.IntN(len(g.dsts))]
	if dst == g.addr {
		dst = g.dsts[0]
	}
	b := udp(g.pool, g.addr, dst, uint16(1024+g.rng.IntN(4096)), 4791, 512+g.rng.IntN(1024), 0)
	g.ports[g.sent%len(g.ports)].Send(now, b)
	g.sent++
	g.loop.Arm(&g.timer, now+sim.Time(20+g.rng.IntN(60)))
}

func (g *genHost) Receive(now sim.Time, port int, b *packet.Buffer) {
	g.got++
	var x [40]byte
	binary.LittleEndian.PutUint64(x[0:], g.h)
	binary.LittleEndian.PutUint64(x[8:], uint64(now))
	binary.LittleEndian.PutUint64(x[16:], uint64(b.Stamp))
	d := b.Data()
	copy(x[24:], d[header.IPv4MinSize-8:header.IPv4MinSize+4]) // addresses and UDP ports
	binary.LittleEndian.PutUint32(x[36:], uint32(port))
	f := fnv.New64a()
	f.Write(x[:])
	g.h = f.Sum64()
	b.Free()
}

// runPartitioned runs the traffic on parts partitions (0: the plain loop,
// no Group) and returns every host's (received, hash) and the fabric's
// counters as JSON.
// end is when runPartitioned stops (every packet has long arrived).
const end = 200 * sim.Microsecond

func runPartitioned(t testing.TB, topo *fabric.Topology, parts int, fail string) (string, int, fabric.DropCounts) {
	t.Helper()
	run, result := setupPartitioned(t, topo, parts, fail, 150)
	run()
	return result()
}

// setupPartitioned builds the traffic of runPartitioned, each host sending
// perHost packets, and returns the run and its result.
func setupPartitioned(t testing.TB, topo *fabric.Topology, parts int, fail string, perHost int) (func(), func() (string, int, fabric.DropCounts)) {
	t.Helper()
	var g *sim.Group
	var loop *sim.Loop
	pools := []*packet.Pool{packet.NewPool()}
	plan := &partition.Plan{Parts: 1, Host: make([]int, len(topo.Hosts)), Switch: make([]int, len(topo.Switches))}
	if parts > 0 {
		plan = partition.Make(topo, parts, partition.Options{})
		var err error
		if g, err = sim.NewGroup(plan.Parts, min(plan.Lookahead, sim.Microsecond)); err != nil {
			t.Fatal(err)
		}
		loop = g.Global()
		for range plan.Parts - 1 {
			pools = append(pools, packet.NewPool())
		}
	} else {
		loop = sim.NewLoop()
	}
	n, err := fabric.Build(loop, pools[0], topo, fabric.BuildOptions{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	var dsts []netip.Addr
	for _, h := range topo.Hosts {
		dsts = append(dsts, h.Addr)
	}
	hosts := make([]*genHost, len(topo.Hosts))
	for i, h := range topo.Hosts {
		gh := &genHost{addr: h.Addr, loop: loop, pool: pools[0], dsts: dsts, left: perHost,
			rng: sim.NewRand(1, h.Name)}
		if g != nil {
			gh.loop, gh.pool = g.Part(plan.Host[i]), pools[plan.Host[i]]
		}
		if gh.ports, err = n.Attach(h.Name, gh); err != nil {
			t.Fatal(err)
		}
		gh.timer.Init(func(now sim.Time, _ any) { gh.fire(now) }, nil)
		gh.timer.Own(gh.loop.NewOrigin())
		gh.loop.Arm(&gh.timer, sim.Time(i%3))
		hosts[i] = gh
	}
	if g != nil {
		if err := n.Partition(g, plan.Host, plan.Switch, pools); err != nil {
			t.Fatal(err)
		}
	}
	if fail != "" {
		loop.At(3*sim.Microsecond, func(now sim.Time) { n.SetLinkUp(now, fail, false) })
		loop.At(9*sim.Microsecond, func(now sim.Time) { n.SetLinkUp(now, fail, true) })
	}
	run := func() {
		if g != nil {
			if err := g.Run(sim.Never); err != nil {
				t.Fatal(err)
			}
		} else {
			loop.Run()
		}
	}
	return run, func() (string, int, fabric.DropCounts) {
		return partitionedResult(t, g, loop, n, hosts, plan)
	}
}

func partitionedResult(t testing.TB, g *sim.Group, loop *sim.Loop, n *fabric.Network, hosts []*genHost, plan *partition.Plan) (string, int, fabric.DropCounts) {
	// Run to a common end (the queue averages are over time).
	if g != nil {
		if err := g.Run(end); err != nil {
			t.Fatal(err)
		}
	} else {
		loop.RunUntil(end)
	}
	if loop.Now() != end {
		t.Fatalf("clock at %v after the run, want %v", loop.Now(), end)
	}
	out := ""
	for i, h := range hosts {
		if h.left != 0 {
			t.Fatalf("h%d has %d packets left to send at %v", i, h.left, end)
		}
		out += fmt.Sprintf("h%d %d/%d %016x\n", i, h.got, h.sent, h.h)
	}
	snap := n.Counters()
	js, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	return out + string(js), plan.Parts, snap.Drops()
}

// TestPartitionedFabricSameRun is the design's guard on the fabric: a fat
// tree and a two-plane leaf-spine under random all-to-all load with queue
// drops, with and without a link failure and repair (global events), give
// byte-identical per-host arrival hashes and fabric counters on the plain
// loop and on 1, 2 and 4 partitions (more partitions than cores).
func TestPartitionedFabricSameRun(t *testing.T) {
	lp := fabric.LinkParams{Rate: 100e9, Delay: sim.Microsecond, QueueBytes: 16 << 10}
	ft, err := fabric.FatTree(fabric.FatTreeParams{K: 4, HostLink: lp, FabricLink: lp})
	ft = mustTopo(t, ft, err)
	ls, err := fabric.LeafSpine(fabric.LeafSpineParams{Planes: 2, Leaves: 4, Spines: 2, HostsPerLeaf: 3, HostLink: lp, FabricLink: lp})
	ls = mustTopo(t, ls, err)
	cases := []struct {
		name string
		topo *fabric.Topology
		fail string
	}{
		{"fat tree", ft, ""},
		{"fat tree, link failure", ft, "p0-pod0-agg0-core0"},
		{"2-plane leaf-spine", ls, ""},
		{"2-plane leaf-spine, link failure", ls, "p1-leaf0-spine1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, _, drops := runPartitioned(t, c.topo, 0, c.fail)
			for _, p := range []int{1, 2, 4} {
				got, used, _ := runPartitioned(t, c.topo, p, c.fail)
				if used != p {
					t.Errorf("%d partitions asked, %d used", p, used)
				}
				if got != want {
					i := 0
					for i < min(len(got), len(want)) && got[i] == want[i] {
						i++
					}
					lo := max(0, i-300)
					t.Errorf("%d partitions differ from the plain loop at byte %d:\n got %.400s\nwant %.400s", p, i, got[lo:], want[lo:])
				}
			}
			if drops[fabric.DropQueueFull] == 0 || (c.fail != "" && drops[fabric.DropLinkDown]+drops[fabric.DropBlackHole] == 0) {
				t.Errorf("drops %v: the load or the failure is too light to test anything", drops)
			}
		})
	}
}

// BenchmarkPartitionedFabric runs random all-to-all UDP load on a k=8 fat
// tree (128 hosts, 80 switches) on the plain loop and on 1, 2 and 4
// partitions; compare the sub-benchmarks' ns/op (wall) in one run: the
// speedup of 2 partitions over 1 needs 2 idle cores.
//
//	go test ./fabric -run '^$' -bench PartitionedFabric -count 3
func BenchmarkPartitionedFabric(b *testing.B) {
	lp := fabric.LinkParams{Rate: 100e9, Delay: sim.Microsecond, QueueBytes: 64 << 10}
	ft, err := fabric.FatTree(fabric.FatTreeParams{K: 8, HostLink: lp, FabricLink: lp})
	ft = mustTopo(b, ft, err)
	for _, parts := range []int{0, 1, 2, 4} {
		name := fmt.Sprintf("partitions=%d", parts)
		if parts == 0 {
			name = "plain-loop"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				run, _ := setupPartitioned(b, ft, parts, "", 300)
				b.StartTimer()
				run()
			}
		})
	}
}
