package fabric

import (
	"cmp"
	"slices"
	"sync"

	"github.com/mrlab/mrlab/internal/natural"

	"github.com/mrlab/mrlab/internal/sim"
)

// Snapshot is a copy of a Network's counters at one time. Links and Ports
// are sorted (by link name then direction; by node name then port number;
// names compare with digit runs as numbers, so h2 < h10), so a snapshot
// prints the same way every run.
type Snapshot struct {
	At    sim.Time
	Links []LinkCounters
	Ports []PortCounters
}

// LinkCounters are one link direction's counters.
type LinkCounters struct {
	Link     string
	Dir      Direction
	From, To Endpoint
	Up       bool
	// Rate is the current serialization rate in bit/s.
	Rate float64
	// TxPackets/TxBytes started serialization; RxPackets/RxBytes reached
	// the far node.
	TxPackets, TxBytes uint64
	RxPackets, RxBytes uint64
	// Drops by reason: DropQueueFull, DropImpairment, DropLinkDown,
	// DropFCS (lost or corrupted on the wire, discarded by the far port),
	// and DropNoRoute for packets reaching a host with no NIC attached.
	Drops      DropCounts
	ECNMarks   uint64
	Duplicated uint64
	Corrupted  uint64
	// QueueBytes is the queue now; QueueMaxBytes its maximum and
	// QueueAvgBytes its time average (bytes x time / time) since Build.
	QueueBytes    int
	QueueMaxBytes int
	QueueAvgBytes float64
	// PFCPauses counts how often PFC paused this direction's sender and
	// PFCPausedTime how long it was paused in all; PFCMaxIngressBytes is
	// the most bytes that arrived through this direction and waited in the
	// far switch at once. All zero on a network without PFC.
	PFCPauses          uint64
	PFCPausedTime      sim.Time
	PFCMaxIngressBytes int
}

// PortCounters are a node's view of one of its ports, as a switch's
// "show interface" gives it.
type PortCounters struct {
	Node string
	Port int
	Link string
	Up   bool
	// TxPackets/TxBytes were handed to the port by its node; RxPackets/
	// RxBytes were delivered to the node through it.
	TxPackets, TxBytes uint64
	RxPackets, RxBytes uint64
	// Drops holds the node's drops of packets that arrived on this port
	// (DropMalformed, DropTTL, DropNoRoute) or that routing sent to it
	// while its link was down (DropBlackHole), plus the drops of the
	// port's outgoing link direction (DropQueueFull, DropImpairment,
	// DropLinkDown), plus the FCS errors of frames that arrived on it
	// (DropFCS: counted at the receiving port, as a NIC or switch does,
	// not at the sender's).
	Drops DropCounts
	// FCSErrors counts the frames this port received with a bad FCS: lost
	// or corrupted on the wire by the incoming direction's impairment.
	FCSErrors uint64
	// NodeDrops is the node's part of Drops.
	NodeDrops DropCounts
	// ECNMarks and the queue figures are the outgoing direction's.
	ECNMarks      uint64
	QueueMaxBytes int
	QueueAvgBytes float64
}

// Counters returns a snapshot of every link direction's and port's
// counters at the scheduler's current time.
func (n *Network) Counters() Snapshot {
	now := n.s.Now()
	s := Snapshot{At: now, Links: make([]LinkCounters, len(n.ports)), Ports: make([]PortCounters, len(n.ports))}
	// Once the order is known each entry goes straight to its sorted
	// place: the snapshot is then its two slices, not twice that (a big
	// lab reads its counters at the end of a run, when its heap is
	// largest; at 1,024 hosts the copies were 3.2 MB).
	linkAt, portAt := n.order.positions(len(n.ports))
	for i, p := range n.ports {
		lc := p.linkCounters(now, n.start)
		pc := PortCounters{
			Node: p.from.Node, Port: p.from.Port, Link: p.link.name, Up: p.link.up,
			TxPackets: p.sentPkts, TxBytes: p.sentBytes,
			RxPackets: p.peer.c.rxPkts, RxBytes: p.peer.c.rxBytes,
			Drops:         p.nodeDrops,
			NodeDrops:     p.nodeDrops,
			ECNMarks:      lc.ECNMarks,
			QueueMaxBytes: lc.QueueMaxBytes,
			QueueAvgBytes: lc.QueueAvgBytes,
		}
		d := p.drops()
		pc.Drops.add(&d)
		// FCS errors belong to the port that received the frame.
		pc.Drops[DropFCS] -= d[DropFCS]
		pc.FCSErrors = p.peer.drops()[DropFCS]
		pc.Drops[DropFCS] += pc.FCSErrors
		li, pi := i, i
		if linkAt != nil {
			li, pi = int(linkAt[i]), int(portAt[i])
		}
		s.Links[li], s.Ports[pi] = lc, pc
	}
	if linkAt == nil {
		links, ports := n.order.get(s.Links, s.Ports)
		s.Links = permute(s.Links, links)
		s.Ports = permute(s.Ports, ports)
	}
	return s
}

// Totals are a Network's counters summed over every link direction and
// node: what a run's summary reports, without a Snapshot's per-direction
// entries.
type Totals struct {
	// Drops counts every drop once, as Snapshot.Drops does.
	Drops                                   DropCounts
	ECNMarks, Corrupted, Duplicated, Pauses uint64
}

// Totals returns the Network's totals now: the sums a Snapshot's Drops,
// PFCPauses and link counters give, without allocating. A workload reads
// them at the end of its run, when its heap is largest; a Snapshot there
// was 0.8 MB of garbage at 128 hosts.
func (n *Network) Totals() Totals {
	var t Totals
	for _, p := range n.ports {
		p.settle() // as Counters: the same state after either
		d := p.drops()
		t.Drops.add(&d)
		t.Drops.add(&p.nodeDrops)
		t.ECNMarks += p.c.marks
		t.Corrupted += p.c.corrupts
		t.Duplicated += p.c.dups
		if st := p.pfc; st != nil {
			t.Pauses += st.pauses
		}
	}
	return t
}

// counterOrder is the order of a Network's directions in a Snapshot's
// Links and in its Ports: by names, which never change after Build, so it
// is sorted once (sorting 393,216 directions by natural name order on
// every call was 8% of a k=64 fat tree run's CPU, which reads its counters
// at its start and end).
type counterOrder struct {
	mu           sync.Mutex // Counters may be called from any goroutine
	links, ports []int32    // the n.ports index at each position
	linkAt       []int32    // the position of each n.ports index in Links
	portAt       []int32    // and in Ports
}

// get returns the orders, sorting a snapshot's entries (in n.ports order)
// to find them the first time, or when the number of directions changed.
func (o *counterOrder) get(links []LinkCounters, ports []PortCounters) ([]int32, []int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.links) != len(links) || len(o.ports) != len(ports) {
		o.links = sortedOrder(links, func(a, b LinkCounters) int {
			return cmp.Or(natural.Compare(a.Link, b.Link), cmp.Compare(a.Dir, b.Dir))
		})
		o.ports = sortedOrder(ports, func(a, b PortCounters) int {
			return cmp.Or(natural.Compare(a.Node, b.Node), cmp.Compare(a.Port, b.Port))
		})
		o.linkAt, o.portAt = inverse(o.links), inverse(o.ports)
	}
	return o.links, o.ports
}

// positions returns the inverse orders when they are known for n
// directions, nil otherwise. The slices are never written once made.
func (o *counterOrder) positions(n int) (linkAt, portAt []int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.linkAt) != n || len(o.portAt) != n {
		return nil, nil
	}
	return o.linkAt, o.portAt
}

// inverse returns the permutation that undoes idx.
func inverse(idx []int32) []int32 {
	inv := make([]int32, len(idx))
	for i, j := range idx {
		inv[j] = int32(i)
	}
	return inv
}

// sortedOrder returns the indices of s in the order cmp sorts s.
func sortedOrder[T any](s []T, cmp func(a, b T) int) []int32 {
	idx := make([]int32, len(s))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int { return cmp(s[a], s[b]) })
	return idx
}

// permute returns s in the order idx gives.
func permute[T any](s []T, idx []int32) []T {
	out := make([]T, len(s))
	for i, j := range idx {
		out[i] = s[j]
	}
	return out
}

func (p *Port) linkCounters(now, start sim.Time) LinkCounters {
	p.settle()
	area := p.qArea
	if now > p.qLast {
		area += float64(p.qBytes) * float64(now-p.qLast)
	}
	var avg float64
	if now > start {
		avg = area / float64(now-start)
	}
	lc := LinkCounters{
		Link: p.link.name, Dir: p.dir, From: p.from, To: p.to, Up: p.link.up, Rate: p.rate,
		TxPackets: p.c.txPkts, TxBytes: p.c.txBytes, RxPackets: p.c.rxPkts, RxBytes: p.c.rxBytes,
		Drops: p.drops(), ECNMarks: p.c.marks, Duplicated: p.c.dups, Corrupted: p.c.corrupts,
		QueueBytes: p.qBytes, QueueMaxBytes: p.qMax, QueueAvgBytes: avg,
	}
	p.pfcCounters(now, &lc)
	return lc
}

// PFCPauses sums the PFC pauses of every link direction.
func (s Snapshot) PFCPauses() uint64 {
	var n uint64
	for i := range s.Links {
		n += s.Links[i].PFCPauses
	}
	return n
}

// Link returns the counters of one link direction.
func (s Snapshot) Link(name string, dir Direction) (LinkCounters, bool) {
	for _, l := range s.Links {
		if l.Link == name && l.Dir == dir {
			return l, true
		}
	}
	return LinkCounters{}, false
}

// Port returns the counters of one node's port.
func (s Snapshot) Port(node string, port int) (PortCounters, bool) {
	for _, p := range s.Ports {
		if p.Node == node && p.Port == port {
			return p, true
		}
	}
	return PortCounters{}, false
}

// Drops sums the drops of every link direction and every node, each drop
// counted once.
func (s Snapshot) Drops() DropCounts {
	var d DropCounts
	for i := range s.Links {
		d.add(&s.Links[i].Drops)
	}
	for i := range s.Ports {
		d.add(&s.Ports[i].NodeDrops)
	}
	return d
}
