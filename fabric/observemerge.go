package fabric

import (
	"cmp"
	"slices"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// Observers of a partitioned network (docs/engine.md, "Observers").
//
// An observer (trace hash, capture, telemetry's fabric side) folds events
// in one global order: on one loop, the order the loop runs them in,
// which is (time, event key) (sim.Loop.EventKey) and, within one event,
// the order the event reports them. A partitioned run reports each event
// on its partition's goroutine; each partition's ports and switches
// report to that partition's recorder, which keeps a copy of the event
// (and of its packet) with the (time, key) of the event running it. At
// every barrier, alone, the records of the window just run are sorted by
// (time, key, partition, order of recording) and handed to the network's
// observer: the same events, in the same order, with the same packet
// bytes, as one loop gives, whatever the partitioning and the goroutine
// schedule. An event's key belongs to one component (one origin), which
// lives in one partition, so the partition in the sort key only orders
// records of keyless events (origin 0, which a partition's loop runs
// only for timers armed with no origin).
//
// Events reported between windows (a fault or a routing change on the
// global loop, set-up before the run) are reported by code that runs
// alone; they go, in their order, to the shared "alone" list with key 0,
// which sorts them before every partition event at the same time, as on
// one loop (global events have origin 0).
//
// The arrival side of a link direction (delivery, corruption, drops on
// arrival) reports to the far node's recorder (Port.arrive uses
// p.peer.obs): it runs on the far node's loop.

// obsRecord is one buffered observation.
type obsRecord struct {
	at  sim.Time // the loop's time when it was made
	key uint64   // the running event's key (0: between windows)
	src int      // partition (-1: alone)
	n   int      // order of recording in its list
	now sim.Time // as the port reported it
	ev  Event
	pt  Point
	r   DropReason
	b   *packet.Buffer // a copy from the list's pool, or nil
}

// obsList is one partition's recorder (or the alone list).
type obsList struct {
	m    *obsMerge
	src  int
	loop *sim.Loop // nil for the alone list
	pool *packet.Pool
	recs []obsRecord
}

var _ Observer = (*obsList)(nil)

// Observe records the event: in this partition's list while one of its
// events runs, else in the alone list.
func (l *obsList) Observe(now sim.Time, ev Event, pt Point, b *packet.Buffer, r DropReason) {
	at, key, dst := now, uint64(0), &l.m.alone
	if l.loop != nil {
		at, key = l.loop.Now(), l.loop.EventKey()
		if key != 0 {
			dst = l
		}
	}
	var cp *packet.Buffer
	if b != nil {
		// The packet as the observer would see it: bytes, runs, flow
		// tag, ID and the scratch fields (an experiment's probe reads
		// the exact arrival time in Stamp).
		cp = dst.pool.Copy(b)
		cp.ID, cp.Hop, cp.Stamp = b.ID, b.Hop, b.Stamp
	}
	dst.recs = append(dst.recs, obsRecord{at: at, key: key, src: dst.src, n: len(dst.recs), now: now, ev: ev, pt: pt, r: r, b: cp})
}

// obsMerge merges the partitions' records into the network's observer.
type obsMerge struct {
	out   Observer
	parts []*obsList
	alone obsList
	all   []*obsRecord // scratch
}

func newObsMerge(g *sim.Group) *obsMerge {
	m := &obsMerge{}
	m.alone = obsList{m: m, src: -1, pool: packet.NewPool()}
	for i := range g.Parts() {
		m.parts = append(m.parts, &obsList{m: m, src: i, loop: g.Part(i), pool: packet.NewPool()})
	}
	return m
}

// flush hands every record made so far to out, in one loop's order. It
// runs alone (at a barrier, or when the run is over).
func (m *obsMerge) flush() {
	all := m.all[:0]
	for i := range m.alone.recs {
		all = append(all, &m.alone.recs[i])
	}
	for _, l := range m.parts {
		for i := range l.recs {
			all = append(all, &l.recs[i])
		}
	}
	if len(all) == 0 {
		return
	}
	slices.SortFunc(all, func(a, b *obsRecord) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		if c := cmp.Compare(a.key, b.key); c != 0 {
			return c
		}
		if c := cmp.Compare(a.src, b.src); c != 0 {
			return c
		}
		return cmp.Compare(a.n, b.n)
	})
	for _, r := range all {
		if m.out != nil {
			m.out.Observe(r.now, r.ev, r.pt, r.b, r.r)
		}
		if r.b != nil {
			r.b.Free()
		}
	}
	clear(all)
	m.all = all[:0]
	m.alone.recs = m.alone.recs[:0]
	for _, l := range m.parts {
		clear(l.recs)
		l.recs = l.recs[:0]
	}
}

// FlushObservers hands the observer what a partitioned run recorded and
// has not handed yet (every barrier hands what its window recorded; call
// it after stepping the loops by hand, before reading the observer). On a
// network that is not partitioned it does nothing.
func (n *Network) FlushObservers() {
	if n.merge != nil {
		n.merge.flush()
	}
}

// setObservers points every port and switch at the observer of its
// partition: the network's own, or when partitioned its partition's
// recorder (nil observer: none).
func (n *Network) setObservers() {
	for _, p := range n.ports {
		p.obs = n.observerOf(p.fromNode)
		p.rxObs = n.observerOf(p.toNode)
	}
	for i, s := range n.switches {
		s.obs = n.observerOf(n.numHosts + i)
	}
}

func (n *Network) observerOf(node int) Observer {
	switch {
	case n.obs == nil:
		return nil
	case n.merge == nil:
		return n.obs
	}
	return n.merge.parts[n.nodePart[node]]
}
