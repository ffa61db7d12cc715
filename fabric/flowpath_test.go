package fabric_test

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// hops records, per packet id, the link directions it was enqueued on.
type hops map[uint64][]int

func (h hops) Observe(_ sim.Time, ev fabric.Event, pt fabric.Point, p *packet.Buffer, _ fabric.DropReason) {
	if (ev == fabric.EvEnqueue || ev == fabric.EvDrop) && pt.Link >= 0 {
		h[p.ID] = append(h[p.ID], pt.Link)
	}
}

// FlowPath predicts exactly the links forwarding picks, for many tuples,
// on a multi-plane leaf/spine and a fat-tree.
func TestFlowPathMatchesForwarding(t *testing.T) {
	ls, err := fabric.LeafSpine(fabric.LeafSpineParams{Planes: 2, Leaves: 3, Spines: 4, HostsPerLeaf: 2})
	ft, err2 := fabric.FatTree(fabric.FatTreeParams{K: 4, Planes: 2})
	for _, topo := range []*fabric.Topology{mustTopo(t, ls, err), mustTopo(t, ft, err2)} {
		t.Run(topo.Name, func(t *testing.T) {
			l := newLab(t, topo, fabric.BuildOptions{Seed: 9})
			for _, h := range topo.Hosts {
				if _, err := l.net.Attach(h.Name, &sink{}); err != nil {
					t.Fatal(err)
				}
			}
			rec := hops{}
			l.net.SetObserver(rec)
			type sent struct {
				host  string
				port  int
				tuple fabric.FlowTuple
			}
			byID := map[uint64]sent{}
			n := 0
			for i, src := range topo.Hosts {
				ports, _ := l.net.Ports(src.Name)
				for j, dst := range topo.Hosts {
					if i == j {
						continue
					}
					for sp := range 6 {
						port := (i + j + sp) % len(ports)
						tp := fabric.FlowTuple{Src: src.Addr, Dst: dst.Addr, Proto: header.IPv4ProtoUDP,
							SrcPort: uint16(49152 + 97*sp + j), DstPort: 4796}
						b := udp(l.pool, tp.Src, tp.Dst, tp.SrcPort, tp.DstPort, 100, 0)
						byID[b.ID] = sent{src.Name, port, tp}
						ports[port].Send(l.loop.Now(), b)
						n++
					}
				}
			}
			l.loop.Run()
			if len(rec) != n {
				t.Fatalf("observed %d packets, sent %d", len(rec), n)
			}
			for id, s := range byID {
				got, reached, err := l.net.FlowPath(s.host, s.port, s.tuple, nil)
				if err != nil || !reached {
					t.Fatalf("FlowPath(%s:%d %+v): reached=%v err=%v", s.host, s.port, s.tuple, reached, err)
				}
				if diff := cmp.Diff(rec[id], got); diff != "" {
					t.Fatalf("FlowPath(%s:%d sport %d -> %v) (-forwarded +predicted):\n%s", s.host, s.port, s.tuple.SrcPort, s.tuple.Dst, diff)
				}
			}
		})
	}
}

// A failed link stays on predicted paths until routing notices, as it does
// for forwarding (black hole), then no path uses it.
func TestFlowPathFollowsRouting(t *testing.T) {
	const detect = 10 * sim.Microsecond
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 2, Spines: 2, HostsPerLeaf: 1})
	l := newLab(t, mustTopo(t, topo, err), fabric.BuildOptions{Seed: 1, DetectionDelay: detect})
	h0, h1 := topo.Hosts[0], topo.Hosts[1]
	const dead = "p0-leaf0-spine1"
	deadDir, _ := l.net.LinkPort(dead, fabric.AtoB)
	uses := func() (used, total int) {
		for sp := range 64 {
			tp := fabric.FlowTuple{Src: h0.Addr, Dst: h1.Addr, Proto: header.IPv4ProtoUDP, SrcPort: uint16(50000 + sp), DstPort: 4796}
			dirs, reached, err := l.net.FlowPath("h0", 0, tp, nil)
			if err != nil || !reached {
				t.Fatalf("FlowPath: reached=%v err=%v", reached, err)
			}
			for _, d := range dirs {
				if d == deadDir.Index() {
					used++
				}
			}
			total++
		}
		return used, total
	}
	if used, total := uses(); used == 0 || used == total {
		t.Fatalf("before the failure %d of %d flows cross %s; want some", used, total, dead)
	}
	l.net.SetLinkUp(l.loop.Now(), dead, false)
	if used, _ := uses(); used == 0 {
		t.Errorf("right after the failure no flow crosses %s: routing cannot know yet", dead)
	}
	l.loop.RunUntil(detect + 1)
	if used, _ := uses(); used != 0 {
		t.Errorf("after detection %d flows still cross %s", used, dead)
	}
}

func TestFlowPathErrors(t *testing.T) {
	topo, err := fabric.BackToBack(fabric.BackToBackParams{Planes: 2})
	l := newLab(t, mustTopo(t, topo, err), fabric.BuildOptions{})
	ok := fabric.FlowTuple{Src: topo.Hosts[0].Addr, Dst: topo.Hosts[1].Addr, Proto: header.IPv4ProtoUDP, SrcPort: 1, DstPort: 2}
	for _, tc := range []struct {
		host string
		port int
		ft   fabric.FlowTuple
	}{
		{"nope", 0, ok},
		{"h0", 2, ok},
		{"h0", -1, ok},
		{"h0", 0, fabric.FlowTuple{Src: netip.MustParseAddr("::1"), Dst: ok.Dst}},
	} {
		if _, _, err := l.net.FlowPath(tc.host, tc.port, tc.ft, nil); err == nil {
			t.Errorf("FlowPath(%s, %d, %v): no error", tc.host, tc.port, tc.ft)
		}
	}
	// An address no host has: not reached, no error.
	far := ok
	far.Dst = netip.MustParseAddr("192.0.2.1")
	if dirs, reached, err := l.net.FlowPath("h0", 1, far, nil); err != nil || reached {
		t.Errorf("unknown destination: %v reached=%v err=%v", dirs, reached, err)
	}
	// Back to back: one hop, the plane's link.
	dirs, reached, err := l.net.FlowPath("h0", 1, ok, nil)
	p, _ := l.net.LinkPort("p1-h0-h1", fabric.AtoB)
	if err != nil || !reached || !cmp.Equal(dirs, []int{p.Index()}) {
		t.Errorf("b2b plane 1: %v reached=%v err=%v", dirs, reached, err)
	}
}
