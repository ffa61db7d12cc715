// Package partition cuts a lab's topology into partitions for the
// partitioned engine (sim.Group; docs/engine.md): along links, never through
// a node, so that a switch, or a host with its NIC and connections, lives in
// exactly one partition, and the only edges between partitions are cut links
// whose propagation delay is the lookahead.
//
// The rule:
//
//   - by plane first: with at least as many planes as partitions wanted,
//     each plane's switches are a unit (planes share no switch and no link,
//     only the hosts' NICs), and the hosts are grouped by the switch their
//     first port reaches (their plane-0 leaf or edge switch);
//   - else by pod or leaf: a fat tree's pod (edge and aggregation switches),
//     a leaf-spine's leaf, each with the hosts whose first port reaches it;
//     spines and cores are units of their own, spread over the partitions
//     (a host wired only to another host, as back to back, is alone);
//   - units go to partitions largest first, each to the least loaded
//     partition (a host weighs 4, a switch 1), in a fixed order, so a plan
//     depends only on the topology and the count asked for.
//
// A link may only be cut when it is a FIFO with a positive delay: a zero
// delay gives no lookahead, an impairment that delays, duplicates, slots or
// corrupts reorders deliveries, and PFC acts on the far end's state
// directly. Such a link's two ends are kept together (its units merge); the
// plan says which links refused a cut and why, and falls back to fewer
// partitions when merging leaves fewer units.
package partition

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
)

// Plan is where every node of a topology runs.
type Plan struct {
	// Parts is the number of partitions the plan uses (1..asked).
	Parts int
	// Asked is the number of partitions asked for.
	Asked int
	// Rule is how switches were grouped: "by plane", "by pod/leaf" or
	// "one partition".
	Rule string
	// Host[i] and Switch[i] are the partitions of the topology's hosts
	// and switches, in its order.
	Host, Switch []int
	// Cut lists the links whose ends are in different partitions, by
	// index in the topology.
	Cut []int
	// Lookahead is the minimum over cut links of delay plus the
	// serialization of the smallest IPv4 packet (20 bytes); sim.Never
	// when nothing is cut.
	Lookahead sim.Time
	// Refused names links that could not be cut, with the reason.
	Refused []string
	// Reason says why Parts < Asked ("" when it is not).
	Reason string
}

// String summarises the plan in one line for logs and `mrlab bench`.
func (p *Plan) String() string {
	s := fmt.Sprintf("%d partition(s) %s", p.Parts, p.Rule)
	if p.Parts > 1 {
		s += fmt.Sprintf(", %d cut links, lookahead %v", len(p.Cut), p.Lookahead)
	}
	if p.Reason != "" {
		s += " (asked " + fmt.Sprint(p.Asked) + ": " + p.Reason + ")"
	}
	return s
}

// Options adjust a plan.
type Options struct {
	// NoCut names links that must not be cut, with the reason (e.g. a
	// fault timeline will impair them mid-run).
	NoCut map[string]string
}

// minPacketBits is the smallest packet the fabric carries: an IPv4 header.
const minPacketBits = 20 * 8

// Make plans up to want partitions of topo (which must be valid).
func Make(topo *fabric.Topology, want int, opts Options) *Plan {
	if want < 1 {
		want = 1
	}
	nh, ns := len(topo.Hosts), len(topo.Switches)
	plan := &Plan{Asked: want, Parts: 1, Rule: "one partition", Host: make([]int, nh), Switch: make([]int, ns), Lookahead: sim.Never}
	if want == 1 {
		return plan
	}
	m := newPlanner(topo, plan)
	m.groupSwitches()
	m.groupHosts()
	m.keepUncuttable(opts)
	m.place(want)
	m.cut()
	switch {
	case plan.Parts == 1:
		plan.Rule = "one partition"
		plan.Reason = "the links that could not be cut leave one unit"
		if len(plan.Refused) == 0 {
			plan.Reason = "the topology has one unit"
		}
	case plan.Parts < want:
		plan.Reason = fmt.Sprintf("only %d units to place", plan.Parts)
	}
	return plan
}

// planner holds a plan being made: nodes are numbered hosts 0..nh-1, then
// switches nh.., and joined into units (a union-find) that stay whole.
type planner struct {
	topo    *fabric.Topology
	plan    *Plan
	nh, ns  int
	index   map[string]int
	u       *union
	byPlane bool
}

func newPlanner(topo *fabric.Topology, plan *Plan) *planner {
	m := &planner{topo: topo, plan: plan, nh: len(topo.Hosts), ns: len(topo.Switches)}
	m.index = make(map[string]int, m.nh+m.ns)
	for i, h := range topo.Hosts {
		m.index[h.Name] = i
	}
	for i, s := range topo.Switches {
		m.index[s.Name] = m.nh + i
	}
	planes := map[int]bool{}
	for _, s := range topo.Switches {
		planes[s.Plane] = true
	}
	m.byPlane = len(planes) > 1 && len(planes) >= plan.Asked
	plan.Rule = "by pod/leaf"
	if m.byPlane {
		plan.Rule = "by plane"
	}
	m.u = newUnion(m.nh + m.ns)
	return m
}

// groupSwitches joins the switches of one plane (or one pod or leaf group).
func (m *planner) groupSwitches() {
	groupOf := make(map[string]int)
	for i, s := range m.topo.Switches {
		key := switchGroup(s, m.byPlane)
		if g, ok := groupOf[key]; ok {
			m.u.join(g, m.nh+i)
		} else {
			groupOf[key] = m.nh + i
		}
	}
}

// groupHosts joins each host with the switch its first port reaches (by
// plane: with the other hosts of that switch, apart from the planes).
func (m *planner) groupHosts() {
	nh := m.nh
	firstPeer := make([]int, nh)
	for i := range firstPeer {
		firstPeer[i] = -1
	}
	for _, l := range m.topo.Links {
		for _, e := range [2][2]fabric.Endpoint{{l.A, l.B}, {l.B, l.A}} {
			if h, ok := m.index[e[0].Node]; ok && h < nh && e[0].Port == 0 {
				firstPeer[h] = m.index[e[1].Node]
			}
		}
	}
	hostLead := map[int]int{}
	for h, peer := range firstPeer {
		switch {
		case peer < nh: // unattached, or wired to another host: alone
		case !m.byPlane:
			m.u.join(peer, h)
		default:
			if lead, ok := hostLead[peer]; ok {
				m.u.join(lead, h)
			} else {
				hostLead[peer] = h
			}
		}
	}
}

// keepUncuttable joins the ends of links that cannot be cut, listing each
// such link with its reason where it merged two units.
func (m *planner) keepUncuttable(opts Options) {
	for _, l := range m.topo.Links {
		if why := noCut(l, opts); why != "" {
			a, b := m.index[l.A.Node], m.index[l.B.Node]
			if m.u.find(a) != m.u.find(b) {
				m.plan.Refused = append(m.plan.Refused, l.Name+": "+why)
				m.u.join(a, b)
			}
		}
	}
}

// place puts units on at most want partitions, largest first, each on the
// least loaded (a host weighs 4, a switch 1; ties by first node).
func (m *planner) place(want int) {
	type unit struct {
		root, weight, first int
	}
	nh, ns := m.nh, m.ns
	units := map[int]*unit{}
	for n := range nh + ns {
		r := m.u.find(n)
		x, ok := units[r]
		if !ok {
			x = &unit{root: r, first: n}
			units[r] = x
		}
		if n < nh {
			x.weight += 4
		} else {
			x.weight++
		}
	}
	list := make([]*unit, 0, len(units))
	for _, x := range units {
		list = append(list, x)
	}
	slices.SortFunc(list, func(a, b *unit) int {
		if c := cmp.Compare(b.weight, a.weight); c != 0 {
			return c
		}
		return cmp.Compare(a.first, b.first)
	})
	parts := min(want, len(list))
	load := make([]int, parts)
	partOf := map[int]int{}
	for _, x := range list {
		best := 0
		for p := 1; p < parts; p++ {
			if load[p] < load[best] {
				best = p
			}
		}
		partOf[x.root] = best
		load[best] += x.weight
	}
	for n := range nh + ns {
		p := partOf[m.u.find(n)]
		if n < nh {
			m.plan.Host[n] = p
		} else {
			m.plan.Switch[n-nh] = p
		}
	}
	m.plan.Parts = parts
}

// cut lists the links whose ends landed in different partitions and takes
// the lookahead as the least delay plus a minimum packet's serialization
// over them.
func (m *planner) cut() {
	part := func(name string) int {
		n := m.index[name]
		if n < m.nh {
			return m.plan.Host[n]
		}
		return m.plan.Switch[n-m.nh]
	}
	for i, l := range m.topo.Links {
		if part(l.A.Node) == part(l.B.Node) {
			continue
		}
		m.plan.Cut = append(m.plan.Cut, i)
		la := l.Params.Delay
		if l.Params.Rate > 0 {
			la += sim.Time(minPacketBits * 1e9 / l.Params.Rate)
		}
		m.plan.Lookahead = min(m.plan.Lookahead, la)
	}
}

// switchGroup names the unit a switch belongs to before merges.
func switchGroup(s fabric.Switch, byPlane bool) string {
	if byPlane {
		return fmt.Sprintf("plane %d", s.Plane)
	}
	// Builder names: p<plane>-pod<i>-edge<j>/agg<j>, p<plane>-leaf<i>.
	if i := strings.Index(s.Name, "-pod"); i > 0 {
		if j := strings.Index(s.Name[i+1:], "-"); j > 0 {
			return s.Name[:i+1+j]
		}
	}
	return "switch " + s.Name
}

// noCut says why l cannot be cut ("" when it can).
func noCut(l fabric.Link, opts Options) string {
	if why, ok := opts.NoCut[l.Name]; ok {
		return why
	}
	p := l.Params
	imp := p.Impair
	switch {
	case p.Delay <= 0:
		return "zero delay gives no lookahead"
	case p.PFC.Enabled():
		return "PFC pauses act on the far end directly"
	case imp.Delay > 0 || imp.Jitter > 0 || imp.Duplicate > 0 || imp.Corrupt > 0 || !imp.Slot.IsZero():
		return "its impairment reorders deliveries (not a FIFO)"
	}
	return ""
}

// union is a union-find over node numbers; the smaller root wins, so the
// result does not depend on the order of joins.
type union struct{ up []int }

func newUnion(n int) *union {
	u := &union{up: make([]int, n)}
	for i := range u.up {
		u.up[i] = i
	}
	return u
}

func (u *union) find(x int) int {
	for u.up[x] != x {
		u.up[x] = u.up[u.up[x]]
		x = u.up[x]
	}
	return x
}

func (u *union) join(a, b int) {
	a, b = u.find(a), u.find(b)
	if a == b {
		return
	}
	if b < a {
		a, b = b, a
	}
	u.up[b] = a
}
