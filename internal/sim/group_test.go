package sim

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
)

// ringModel is a deterministic toy lab for the group: nodes on a ring
// pass tokens to both neighbours over links of one or two delays, so many
// events tie at the same nanosecond. Each node folds what it receives, in
// the order it runs, into a hash: any change of order shows.
type ringModel struct {
	nodes []*ringNode
	delay Time
}

type ringNode struct {
	id   int
	part int
	loop *Loop
	org  *Origin
	h    uint64
	got  int
	hops int
	out  [2]func(at Time, key uint64, tok int) // to the left and right neighbour
	mode int                                   // flipped by a global event
}

func (n *ringNode) receive(now Time, tok int) {
	n.got++
	f := fnv.New64a()
	var b [32]byte
	binary.LittleEndian.PutUint64(b[0:], n.h)
	binary.LittleEndian.PutUint64(b[8:], uint64(now))
	binary.LittleEndian.PutUint64(b[16:], uint64(tok))
	binary.LittleEndian.PutUint64(b[24:], uint64(n.mode))
	f.Write(b[:])
	n.h = f.Sum64()
	if tok%1000 >= n.hops {
		return
	}
	// Forward both ways; a link has one delay (it is a FIFO), 100 or
	// 200 ns, and a hash bit picks whether to send a second token.
	for side := range 2 {
		d := Time(1+(n.id+side)%2) * 100
		n.out[side](now+d, n.org.NextKey(), tok+1)
		if (n.h>>side)&1 == 1 {
			n.out[side](now+d, n.org.NextKey(), tok+1+500)
		}
	}
}

// buildRing builds m nodes on a group of p partitions (node i in partition
// i*p/m); cut links use channels, links inside a partition a timer per
// message, keyed as the channels are.
func buildRing(t testing.TB, m, p, hops int) (*Group, *ringModel) {
	g, err := NewGroup(p, 100)
	if err != nil {
		t.Fatal(err)
	}
	rm := &ringModel{delay: 100}
	for i := range m {
		part := i * p / m
		n := &ringNode{id: i, part: part, loop: g.Part(part), hops: hops}
		n.org = n.loop.NewOrigin()
		rm.nodes = append(rm.nodes, n)
	}
	for i, n := range rm.nodes {
		for side, j := range []int{(i + m - 1) % m, (i + 1) % m} {
			dst := rm.nodes[j]
			if dst.part == n.part {
				l := n.loop
				n.out[side] = func(at Time, key uint64, tok int) {
					tm := &Timer{}
					tm.Init(func(now Time, _ any) { dst.receive(now, tok) }, nil)
					l.ArmKey(tm, at, key)
				}
				continue
			}
			c := g.NewChannel(n.part, dst.part, func(now Time, v any) { dst.receive(now, v.(int)) })
			n.out[side] = func(at Time, key uint64, tok int) { c.Send(at, key, tok) }
		}
	}
	// Every node starts tokens at time 0 and 50 (ties everywhere).
	for _, n := range rm.nodes {
		for k := range 2 {
			tok := (n.id*2 + k) * 1000
			tm := &Timer{}
			tm.Init(func(now Time, _ any) { n.receive(now, tok) }, nil)
			tm.Own(n.org)
			n.loop.Arm(tm, Time(50*k))
		}
	}
	return g, rm
}

func (rm *ringModel) digest() string {
	var b strings.Builder
	for _, n := range rm.nodes {
		fmt.Fprintf(&b, "%d:%016x:%d ", n.id, n.h, n.got)
	}
	return b.String()
}

// TestGroupSameRunAnyPartitions is the design's guard at the engine's
// level: 1, 2, 3, 4 and 8 partitions (more than this machine's cores) run
// the same events in the same order at every node, with a global event
// (changing every node's mode at a barrier) and a stop.
func TestGroupSameRunAnyPartitions(t *testing.T) {
	var want string
	var wantEvents uint64
	for _, p := range []int{1, 2, 3, 4, 8} {
		g, rm := buildRing(t, 16, p, 9)
		g.Global().At(350, func(Time) {
			for _, n := range rm.nodes {
				n.mode++
			}
		})
		if err := g.Run(Never); err != nil {
			t.Fatalf("%d partitions: %v", p, err)
		}
		got := rm.digest()
		if p == 1 {
			want, wantEvents = got, g.Fired()
			t.Logf("1 partition: %d events, %d windows", wantEvents, g.Windows())
			if wantEvents < 1000 {
				t.Fatalf("only %d events: the model is too small to test anything", wantEvents)
			}
			continue
		}
		if got != want {
			t.Errorf("%d partitions differ from 1:\n got %s\nwant %s", p, got, want)
		}
		if g.Fired() != wantEvents {
			t.Errorf("%d partitions ran %d events, 1 ran %d", p, g.Fired(), wantEvents)
		}
		if g.Windows() < 2 {
			t.Errorf("%d partitions: %d windows", p, g.Windows())
		}
	}
}

// TestGroupMatchesOneLoop: a group of one partition is the plain loop.
func TestGroupMatchesOneLoop(t *testing.T) {
	g, rm := buildRing(t, 8, 1, 10)
	if err := g.Run(Never); err != nil {
		t.Fatal(err)
	}
	// The same model on the plain loop (its Run, not windows).
	g2, rm2 := buildRing(t, 8, 1, 10)
	g2.Part(0).Run()
	if rm.digest() != rm2.digest() {
		t.Errorf("group of 1 %s, plain loop %s", rm.digest(), rm2.digest())
	}
}

// TestGroupLookaheadViolation: a message inside the window is an error,
// not a silent reorder.
func TestGroupLookaheadViolation(t *testing.T) {
	g, err := NewGroup(2, 100)
	if err != nil {
		t.Fatal(err)
	}
	c := g.NewChannel(0, 1, func(Time, any) {})
	org := g.Part(0).NewOrigin()
	tm := &Timer{}
	tm.Init(func(now Time, _ any) { c.Send(now+10, org.NextKey(), nil) }, nil)
	tm.Own(org)
	g.Part(0).Arm(tm, 5)
	if err := g.Run(Never); err == nil || !strings.Contains(err.Error(), "inside the window") {
		t.Errorf("Run = %v, want a lookahead error", err)
	}
	if _, err := NewGroup(2, 0); err == nil {
		t.Error("NewGroup with no lookahead: no error")
	}
}

// TestGroupStopAtBarrier: a stop from a partition ends the run at the
// window's end, the same with 1 or 4 partitions.
func TestGroupStopAtBarrier(t *testing.T) {
	var want string
	for _, p := range []int{1, 4} {
		g, rm := buildRing(t, 8, p, 30)
		n := rm.nodes[3]
		tm := &Timer{}
		tm.Init(func(Time, any) { n.loop.Stop() }, nil)
		tm.Own(n.org)
		n.loop.Arm(tm, 420)
		if err := g.Run(Never); err != nil {
			t.Fatal(err)
		}
		if g.Now() >= 600 || g.next() == Never {
			t.Errorf("%d partitions: stopped at %v with next event %v", p, g.Now(), g.next())
		}
		if p == 1 {
			want = rm.digest()
		} else if rm.digest() != want {
			t.Errorf("%d partitions stopped elsewhere than 1", p)
		}
	}
}
