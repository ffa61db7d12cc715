package fabric

import (
	"errors"
	"fmt"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// Partition moves a network that has just been built (nothing sent yet)
// onto the loops of g: node i's ports run on g.Part(part(i)) and copy
// packets from pools[part(i)]; routing and link state (faults, detection,
// route recomputation) run on g.Global(), alone at barriers. hostPart and
// switchPart give each host's and switch's partition, in the topology's
// order (fabric/partition plans them).
//
// A cut link direction keeps its packets in its FIFO until a barrier after
// their serialization ends, then hands them to the far partition on a
// sim.Channel with the key they were sent with: a link failure drops what
// has not finished serializing exactly as on one loop, and the far end
// receives each packet at the nanosecond, and in the order among equal
// times, that one loop gives.
//
// An observer (SetObserver, before or after) sees the events of every
// partition merged at barriers in the order one loop gives
// (observemerge.go). It refuses what is not partition-safe yet: PFC
// (pauses act on the far end's state directly), and cut links with no
// delay or with a reordering impairment.
func (n *Network) Partition(g *sim.Group, hostPart, switchPart []int, pools []*packet.Pool) error {
	if len(hostPart) != n.numHosts || len(switchPart) != len(n.switches) || len(pools) != g.Parts() {
		return fmt.Errorf("partitioning fabric %q: %d/%d host/switch partitions and %d pools for %d hosts, %d switches, %d partitions",
			n.topo.Name, len(hostPart), len(switchPart), len(pools), n.numHosts, len(n.switches), g.Parts())
	}
	if n.PFCEnabled() {
		return errors.New("partitioning fabric: PFC pauses act on the far end directly: not partition-safe yet")
	}
	part := func(node int) int {
		if node < n.numHosts {
			return hostPart[node]
		}
		return switchPart[node-n.numHosts]
	}
	for _, p := range n.ports {
		if p.dLen != 0 || p.fLen != 0 || p.inService != nil || p.idleTimer.Armed() {
			return fmt.Errorf("partitioning fabric: %s is busy: partition before sending", p.name)
		}
		src, dst := part(p.fromNode), part(p.toNode)
		if src < 0 || src >= g.Parts() || dst < 0 || dst >= g.Parts() {
			return fmt.Errorf("partitioning fabric: %s: partition %d->%d out of range", p.name, src, dst)
		}
		if src != dst && (p.params.Delay <= 0 || p.deliverImpaired) {
			return fmt.Errorf("partitioning fabric: link %s cannot be cut (zero delay or a reordering impairment)", p.link.name)
		}
	}
	n.s = g.Global()
	n.nodePart = make([]int, len(n.nodes))
	for i := range n.nodePart {
		n.nodePart[i] = part(i)
	}
	n.merge = newObsMerge(g)
	n.merge.out = n.obs
	n.setObservers()
	var cut []*Port
	for _, p := range n.ports {
		src, dst := part(p.fromNode), part(p.toNode)
		p.s, p.pool = g.Part(src), pools[src]
		if src == dst {
			continue
		}
		into := pools[dst]
		p.ch = g.NewChannel(src, dst, func(now sim.Time, v any) {
			b := v.(*packet.Buffer)
			b.Rehome(into)
			p.arrive(now, b)
		})
		cut = append(cut, p)
	}
	g.OnBarrier(func(sim.Time) sim.Time {
		n.merge.flush()
		// Packets are freed into the receiving partition's pool: even the
		// free lists out so one-way traffic does not make the senders'
		// pools allocate without end.
		packet.Balance(pools)
		return sim.Never
	})
	g.OnRunEnd(n.merge.flush)
	g.OnBarrier(func(w sim.Time) sim.Time {
		held := sim.Never
		for _, p := range cut {
			held = min(held, p.handOver(w))
		}
		return held
	})
	return nil
}

// handOver sends the far partition every packet whose serialization ended
// before barrier w (it arrives a propagation delay later, at or after w).
// It returns the earliest barrier the rest need (Never: none held).
func (p *Port) handOver(w sim.Time) sim.Time {
	if p.deliverImpaired && !p.impairedCut {
		// An impairment installed mid-run on a cut link delivers out of
		// order through per-packet timers on the wrong loop: the run is
		// wrong, and Run says so. The plan must keep such links uncut
		// (partition.Options.NoCut).
		p.impairedCut = true
		p.ch.Fail(fmt.Errorf("fabric: cut link %s was impaired mid-run: the partitioned run is not valid", p.link.name))
	}
	delayPs := int64(p.params.Delay) * 1000
	for p.fLen > 0 {
		f := &p.fly[p.fHead]
		end := f.atPs - delayPs
		if end >= int64(w)*1000 {
			return sim.Time(end/1000 + 1)
		}
		p.ch.Send(sim.Time((f.atPs+999)/1000), f.key, f.b)
		*f = flight{}
		p.fHead = (p.fHead + 1) & (len(p.fly) - 1)
		p.fLen--
	}
	return sim.Never
}
