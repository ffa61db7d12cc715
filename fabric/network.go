package fabric

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// DefaultDetectionDelay is how long a failed link stays in routing (and
// ECMP groups) when BuildOptions.DetectionDelay is 0: 100 us, the order of
// a hardware link-down interrupt plus a fast BGP/ECMP withdrawal in a data
// center fabric, and long enough against microsecond RTTs that transports
// see the black hole.
const DefaultDetectionDelay = 100 * sim.Microsecond

// BuildOptions configure Build.
type BuildOptions struct {
	// Seed seeds every random stream in the fabric: each link direction
	// draws from sim.NewRand(Seed, "<link>:<AtoB|BtoA>") and each switch's
	// ECMP hash is seeded with sim.StreamSeed(Seed, "ecmp:<switch>").
	Seed uint64
	// DetectionDelay is how long routing takes to notice a link's state
	// change. A failed link stays in the routes (and ECMP groups) that
	// long, and packets sent into it are black-holed (DropBlackHole); a
	// repaired link rejoins the routes after the same delay. 0 means
	// DefaultDetectionDelay; negative means routing reacts at once.
	DetectionDelay sim.Time
}

// Network is a built fabric running on one sim.Scheduler. It is not safe
// for concurrent use: call it from the loop's goroutine only.
//
// Naming (builders; explicit topologies pick their own names): hosts
// h0..hN-1; switches "p<plane>-leaf<i>", "p<plane>-spine<j>" (LeafSpine),
// "p<plane>-pod<i>-edge<j>", "p<plane>-pod<i>-agg<j>", "p<plane>-core<j>"
// (FatTree); links "h<i>-p<plane>" (a host's port in a plane),
// "p<plane>-leaf<i>-spine<j>", "p<plane>-pod<i>-edge<j>-agg<k>",
// "p<plane>-pod<i>-agg<j>-core<k>", "p<plane>-h0-h1" (BackToBack). The
// lower tier is a link's A end. Observer points name link directions by
// index: Port.Index, and Network.PointName turns a Point into text.
type Network struct {
	// order is the order Counters lists directions in (counters.go).
	order counterOrder

	s    sim.Scheduler
	pool *packet.Pool
	topo *Topology
	obs  Observer
	// merge and nodePart are set when the network is partitioned: the
	// partitions' observation recorders and each node's partition
	// (observemerge.go).
	merge    *obsMerge
	nodePart []int

	detect sim.Time
	start  sim.Time

	nodes    []netNode // hosts first, then switches
	numHosts int
	nodeByNm map[string]int
	links    []*netLink
	linkByNm map[string]int
	ports    []*Port // by Point.Link: 2*link index + direction
	switches []*switchNode

	// Destination lookup: a dense table over the hosts' address span when
	// it is small (always, for the builders), else a map.
	addrBase uint32
	addrTab  []int32
	addrMap  map[uint32]int32

	rt          routeState
	routesDirty bool
	// routeTimer and the links' detection timers have no origin: they are
	// the fabric's global events (faults, routing), which run before any
	// port's event at the same time and, partitioned, alone at a barrier.
	routeTimer sim.Timer
}

// netNode is a host or a switch.
type netNode struct {
	name  string
	host  bool
	up    bool
	plane int
	ports []*Port // by port number; nil where unwired
	sw    *switchNode
	nic   Node // attached NIC (hosts)
}

// netLink is a full-duplex link's shared state: both directions fail and
// recover together.
type netLink struct {
	idx   int
	name  string
	ends  [2]*Port // ends[AtoB] is A's port
	admin bool
	up    bool
	ctrl  linkCtrl
	timer sim.Timer
}

// linkCtrl is what routing believes about a link.
//
//	        data down               timer
//	Up ------------------> Failing -------> Down
//	 ^  <------------------   |               |
//	 |        data up         |               | data up
//	 |                        v               v
//	 +------- timer ------ Joining <----------+
//	              (data down from Joining goes back to Down)
//
// Routing uses links in Up and Failing; a Failing link is a black hole.
type linkCtrl uint8

const (
	ctrlUp linkCtrl = iota
	ctrlFailing
	ctrlDown
	ctrlJoining
)

func (c linkCtrl) String() string {
	switch c {
	case ctrlUp:
		return "up"
	case ctrlFailing:
		return "failing"
	case ctrlDown:
		return "down"
	case ctrlJoining:
		return "joining"
	}
	return "ctrl(?)"
}

func (l *netLink) routed() bool { return l.ctrl == ctrlUp || l.ctrl == ctrlFailing }

// TopologyError locates a problem in a Topology: the kind of item ("host",
// "switch", "link" or "topology"), its index in the Topology's slice, its
// name and the field, so a lab-file reader can point at the line.
type TopologyError struct {
	Kind  string
	Index int
	Name  string
	Field string
	Err   error
}

// Error implements error: the element, its field and what is wrong.
func (e *TopologyError) Error() string {
	s := e.Kind
	if e.Index >= 0 {
		s += fmt.Sprintf(" %d", e.Index)
	}
	if e.Name != "" {
		s += fmt.Sprintf(" %q", e.Name)
	}
	if e.Field != "" {
		s += " field " + e.Field
	}
	return "fabric: " + s + ": " + e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *TopologyError) Unwrap() error { return e.Err }

// Validate checks the topology: unique non-empty names, valid unique host
// addresses, links between known nodes on distinct in-range ports, every
// host port wired, and sane link parameters. It returns every problem found
// (errors.Join of *TopologyError).
func (t *Topology) Validate() error {
	var errs []error
	bad := func(kind string, i int, name, field string, format string, args ...any) {
		errs = append(errs, &TopologyError{Kind: kind, Index: i, Name: name, Field: field, Err: fmt.Errorf(format, args...)})
	}
	names := map[string]string{}
	addrs := map[netip.Addr]string{}
	hostPorts := map[string]int{}
	for i, h := range t.Hosts {
		switch {
		case h.Name == "":
			bad("host", i, "", "name", "empty name")
		case names[h.Name] != "":
			bad("host", i, h.Name, "name", "name already used by a %s", names[h.Name])
		default:
			names[h.Name] = "host"
		}
		if !h.Addr.Is4() {
			bad("host", i, h.Name, "addr", "address %v is not IPv4", h.Addr)
		} else if o, dup := addrs[h.Addr]; dup {
			bad("host", i, h.Name, "addr", "address %v already used by host %q", h.Addr, o)
		} else {
			addrs[h.Addr] = h.Name
		}
		if h.Ports < 1 || h.Ports > 64 {
			bad("host", i, h.Name, "ports", "%d ports: want 1..64", h.Ports)
		}
		hostPorts[h.Name] = h.Ports
	}
	for i, s := range t.Switches {
		switch {
		case s.Name == "":
			bad("switch", i, "", "name", "empty name")
		case names[s.Name] != "":
			bad("switch", i, s.Name, "name", "name already used by a %s", names[s.Name])
		default:
			names[s.Name] = "switch"
		}
		if s.Plane < 0 {
			bad("switch", i, s.Name, "plane", "negative plane %d", s.Plane)
		}
	}
	linkNames := map[string]bool{}
	used := map[Endpoint]string{}
	for i, l := range t.Links {
		if l.Name == "" {
			bad("link", i, "", "name", "empty name")
		} else if linkNames[l.Name] || names[l.Name] != "" {
			bad("link", i, l.Name, "name", "name already used")
		}
		linkNames[l.Name] = true
		for _, e := range []struct {
			field string
			ep    Endpoint
		}{{"a", l.A}, {"b", l.B}} {
			kind := names[e.ep.Node]
			switch {
			case kind == "":
				bad("link", i, l.Name, e.field, "unknown node %q", e.ep.Node)
				continue
			case e.ep.Port < 0:
				bad("link", i, l.Name, e.field, "negative port %d", e.ep.Port)
				continue
			case kind == "host" && e.ep.Port >= hostPorts[e.ep.Node]:
				bad("link", i, l.Name, e.field, "host %q has no port %d (it has %d)", e.ep.Node, e.ep.Port, hostPorts[e.ep.Node])
				continue
			case kind == "switch" && e.ep.Port >= maxSwitchPorts:
				bad("link", i, l.Name, e.field, "switch port %d: want < %d", e.ep.Port, maxSwitchPorts)
				continue
			}
			if o, dup := used[e.ep]; dup {
				bad("link", i, l.Name, e.field, "%s port %d already wired by link %q", e.ep.Node, e.ep.Port, o)
			} else {
				used[e.ep] = l.Name
			}
		}
		if l.A.Node == l.B.Node && l.A.Node != "" {
			bad("link", i, l.Name, "b", "link loops back to %q", l.A.Node)
		}
		if err := l.Params.validate(); err != nil {
			bad("link", i, l.Name, "params", "%w", err)
		}
	}
	for i, h := range t.Hosts {
		for p := 0; p < h.Ports && p <= 64; p++ {
			if _, ok := used[Endpoint{h.Name, p}]; !ok {
				bad("host", i, h.Name, "ports", "port %d is not wired to any link", p)
			}
		}
	}
	return errors.Join(errs...)
}

// maxSwitchPorts bounds switch port numbers (ports are kept in a slice).
const maxSwitchPorts = 4096

func (lp LinkParams) validate() error {
	var errs []error
	if !(lp.Rate >= 1 && lp.Rate <= MaxRate) {
		errs = append(errs, fmt.Errorf("rate %v bit/s: want 1bit..100tbit", lp.Rate))
	}
	if lp.Delay < 0 || lp.Delay > MaxDelay {
		errs = append(errs, fmt.Errorf("delay %v: want 0..%v", lp.Delay, MaxDelay))
	}
	if lp.QueueBytes < 0 {
		errs = append(errs, fmt.Errorf("negative queue %d bytes", lp.QueueBytes))
	}
	if err := lp.ECN.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := lp.Impair.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("impairment: %w", err))
	}
	if err := lp.PFC.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Build validates topo and builds a Network on s. Packets are duplicated
// from pool. Routes are computed at once; the network starts with every
// link up. Build keeps a copy of topo.
func Build(s sim.Scheduler, pool *packet.Pool, topo *Topology, opts BuildOptions) (*Network, error) {
	if s == nil || pool == nil || topo == nil {
		return nil, errors.New("fabric: Build needs a scheduler, a pool and a topology")
	}
	if err := topo.Validate(); err != nil {
		return nil, fmt.Errorf("building fabric %q: %w", topo.Name, err)
	}
	n := &Network{
		s:        s,
		pool:     pool,
		topo:     topo.clone(),
		detect:   opts.DetectionDelay,
		start:    s.Now(),
		nodeByNm: map[string]int{},
		linkByNm: map[string]int{},
	}
	if n.detect == 0 {
		n.detect = DefaultDetectionDelay
	}
	n.routeTimer.Init(func(now sim.Time, _ any) { n.recomputeRoutes() }, nil)
	t := n.topo
	n.numHosts = len(t.Hosts)
	for _, h := range t.Hosts {
		n.nodeByNm[h.Name] = len(n.nodes)
		n.nodes = append(n.nodes, netNode{name: h.Name, host: true, up: true, ports: make([]*Port, h.Ports)})
	}
	for _, sw := range t.Switches {
		id := len(n.nodes)
		n.nodeByNm[sw.Name] = id
		sn := &switchNode{net: n, name: sw.Name, id: id, seed: sim.StreamSeed(opts.Seed, "ecmp:"+sw.Name)}
		n.switches = append(n.switches, sn)
		n.nodes = append(n.nodes, netNode{name: sw.Name, up: true, plane: sw.Plane, sw: sn})
	}
	// Links and ports live in two slabs: one allocation each instead of
	// one per port (a 1 KiB object whose every allocation sets up its
	// pointer header: 30% of the set-up CPU of 8 planes x k=32, 393,216
	// ports). The slabs never move, so the pointers to their elements
	// stay valid.
	links := make([]netLink, len(t.Links))
	ports := make([]Port, 2*len(t.Links))
	n.links = make([]*netLink, 0, len(t.Links))
	n.ports = make([]*Port, 0, len(ports))
	for i, tl := range t.Links {
		l := &links[i]
		l.idx, l.name, l.admin, l.up = i, tl.Name, true, true
		l.timer.Init(func(now sim.Time, _ any) { n.detected(now, l) }, nil)
		params := tl.Params
		if params.QueueBytes == 0 {
			params.QueueBytes = DefaultQueueBytes
		}
		for _, e := range [2]struct {
			d        Direction
			from, to Endpoint
		}{{AtoB, tl.A, tl.B}, {BtoA, tl.B, tl.A}} {
			d, from, to := e.d, e.from, e.to
			p := &ports[2*i+int(d)]
			p.net, p.up, p.link, p.dir, p.idx = n, true, l, d, 2*i+int(d)
			p.name = tl.Name + ":" + d.String()
			p.from, p.to = from, to
			p.fromNode, p.toNode = n.nodeByNm[from.Node], n.nodeByNm[to.Node]
			p.params = paramsOf(params)
			p.rng = sim.NewRand(opts.Seed, p.name)
			p.s, p.pool = s, pool
			p.org = *s.NewOrigin()
			p.idleSince = n.start
			p.qLast = n.start
			p.init(params.Impair)
			l.ends[d] = p
			n.ports = append(n.ports, p)
			fn := &n.nodes[p.fromNode]
			if !fn.host {
				for len(fn.ports) <= from.Port {
					fn.ports = append(fn.ports, nil)
				}
			}
			fn.ports[from.Port] = p
		}
		l.ends[AtoB].peer, l.ends[BtoA].peer = l.ends[BtoA], l.ends[AtoB]
		n.links = append(n.links, l)
		n.linkByNm[tl.Name] = i
	}
	for _, p := range n.ports {
		if sw := n.nodes[p.toNode].sw; sw != nil {
			p.deliverTo, p.toSwitch = sw, sw
		}
	}
	for _, sw := range n.switches {
		sw.ports = n.nodes[sw.id].ports
	}
	n.buildAddrTable()
	n.recomputeRoutes()
	n.initPFC()
	return n, nil
}

func (t *Topology) clone() *Topology {
	c := *t
	c.Hosts = append([]Host(nil), t.Hosts...)
	c.Switches = append([]Switch(nil), t.Switches...)
	c.Links = append([]Link(nil), t.Links...)
	return &c
}

func (n *Network) buildAddrTable() {
	lo, hi := ^uint32(0), uint32(0)
	for _, h := range n.topo.Hosts {
		a := addrU32(h.Addr)
		lo, hi = min(lo, a), max(hi, a)
	}
	if len(n.topo.Hosts) > 0 && hi-lo < 1<<18 {
		n.addrBase = lo
		n.addrTab = make([]int32, hi-lo+1)
		for i := range n.addrTab {
			n.addrTab[i] = -1
		}
		for i, h := range n.topo.Hosts {
			n.addrTab[addrU32(h.Addr)-lo] = int32(i)
		}
		return
	}
	n.addrMap = make(map[uint32]int32, len(n.topo.Hosts))
	for i, h := range n.topo.Hosts {
		n.addrMap[addrU32(h.Addr)] = int32(i)
	}
}

func addrU32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// hostOf returns the index of the host with address dst, or -1.
func (n *Network) hostOf(dst uint32) int32 {
	if n.addrTab != nil {
		if i := dst - n.addrBase; i < uint32(len(n.addrTab)) {
			return n.addrTab[i]
		}
		return -1
	}
	if h, ok := n.addrMap[dst]; ok {
		return h
	}
	return -1
}

// Topology returns the topology the network was built from. Callers must
// not modify it.
func (n *Network) Topology() *Topology { return n.topo }

// SetObserver sets the observer of packet events; nil turns observation
// off, which then costs one nil check per event. On a partitioned network
// each partition records its events and o sees them merged, at every
// barrier, in the order one loop gives (observemerge.go).
func (n *Network) SetObserver(o Observer) {
	n.obs = o
	if n.merge != nil {
		n.merge.out = o
	}
	n.setObservers()
}

// Attach connects a host's NIC: packets for the host are delivered to
// nic.Receive with the host port number they arrived on. It returns the
// host's ports, indexed by port number (= plane, for the builders).
// Packets that reach an unattached host are dropped as DropNoRoute.
func (n *Network) Attach(host string, nic Node) ([]*Port, error) {
	id, ok := n.nodeByNm[host]
	if !ok || !n.nodes[id].host {
		return nil, fmt.Errorf("fabric: attach: no host %q", host)
	}
	if nic == nil {
		return nil, fmt.Errorf("fabric: attach %q: nil NIC", host)
	}
	nd := &n.nodes[id]
	if nd.nic != nil {
		return nil, fmt.Errorf("fabric: attach %q: already attached", host)
	}
	nd.nic = nic
	for _, p := range nd.ports {
		p.peer.deliverTo = nic
	}
	return append([]*Port(nil), nd.ports...), nil
}

// Ports returns a node's ports by port number (nil where unwired), for
// hosts and switches alike.
func (n *Network) Ports(node string) ([]*Port, error) {
	id, ok := n.nodeByNm[node]
	if !ok {
		return nil, fmt.Errorf("fabric: no node %q", node)
	}
	return append([]*Port(nil), n.nodes[id].ports...), nil
}

// LinkPort returns the port sending in direction dir (AtoB or BtoA) of a
// link.
func (n *Network) LinkPort(link string, dir Direction) (*Port, error) {
	l, err := n.link(link)
	if err != nil {
		return nil, err
	}
	if dir > BtoA {
		return nil, fmt.Errorf("fabric: link %q: want direction AtoB or BtoA, not %v", link, dir)
	}
	return l.ends[dir], nil
}

// PointName describes an observation point: "link:AtoB" or a node name.
func (n *Network) PointName(pt Point) string {
	if pt.Link >= 0 && pt.Link < len(n.ports) {
		return n.ports[pt.Link].name
	}
	return pt.Node
}

// PortAt returns the port (link direction) an observer's Point.Link names,
// or nil.
func (n *Network) PortAt(index int) *Port {
	if index < 0 || index >= len(n.ports) {
		return nil
	}
	return n.ports[index]
}

// Index returns the port's observation index (Point.Link).
func (p *Port) Index() int { return p.idx }

func (n *Network) link(name string) (*netLink, error) {
	i, ok := n.linkByNm[name]
	if !ok {
		return nil, fmt.Errorf("fabric: no link %q", name)
	}
	return n.links[i], nil
}

// eachDir calls set for the port of each direction of link that dir names.
func (n *Network) eachDir(link string, dir Direction, set func(*Port)) error {
	l, err := n.link(link)
	if err != nil {
		return err
	}
	switch dir {
	case AtoB, BtoA:
		set(l.ends[dir])
	case Both:
		set(l.ends[AtoB])
		set(l.ends[BtoA])
	default:
		return fmt.Errorf("fabric: link %q: bad direction %d", link, dir)
	}
	return nil
}

// SetImpairment replaces the impairment of one or both directions of a
// link. The loss model restarts in its initial state.
func (n *Network) SetImpairment(link string, dir Direction, imp Impairment) error {
	if err := imp.Validate(); err != nil {
		return fmt.Errorf("fabric: link %q impairment: %w", link, err)
	}
	return n.eachDir(link, dir, func(p *Port) { p.setImpairment(imp) })
}

// SetRate changes a link direction's own rate in bit/s (degrade or
// restore); an impairment's rate still overrides it. It takes effect from
// the next packet to start serializing.
func (n *Network) SetRate(link string, dir Direction, rate float64) error {
	if !(rate >= 1 && rate <= MaxRate) {
		return fmt.Errorf("fabric: link %q: rate %v bit/s: want 1bit..100tbit", link, rate)
	}
	return n.eachDir(link, dir, func(p *Port) { p.setRate(rate) })
}

// SetECN replaces the ECN marking configuration of one or both directions.
func (n *Network) SetECN(link string, dir Direction, c ECNConfig) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("fabric: link %q: %w", link, err)
	}
	return n.eachDir(link, dir, func(p *Port) { p.setECN(c) })
}

// SetLinkUp takes a link down (both directions: queued and propagating
// packets are lost) or brings it back. Routing notices after the detection
// delay.
func (n *Network) SetLinkUp(now sim.Time, link string, up bool) error {
	l, err := n.link(link)
	if err != nil {
		return err
	}
	l.admin = up
	n.refresh(now, []*netLink{l})
	return nil
}

// SetSwitchUp fails or restores a switch: a downed switch's links are all
// down. A link set down with SetLinkUp stays down when its switch returns.
func (n *Network) SetSwitchUp(now sim.Time, sw string, up bool) error {
	id, ok := n.nodeByNm[sw]
	if !ok || n.nodes[id].host {
		return fmt.Errorf("fabric: no switch %q", sw)
	}
	n.nodes[id].up = up
	n.refresh(now, n.linksOf(id))
	return nil
}

// SetPlaneUp fails or restores every switch of a plane.
func (n *Network) SetPlaneUp(now sim.Time, plane int, up bool) error {
	var ls []*netLink
	found := false
	for _, sw := range n.switches {
		if nd := &n.nodes[sw.id]; nd.plane == plane {
			found = true
			nd.up = up
			ls = append(ls, n.linksOf(sw.id)...)
		}
	}
	if !found {
		return fmt.Errorf("fabric: no switch in plane %d", plane)
	}
	n.refresh(now, ls)
	return nil
}

func (n *Network) linksOf(id int) []*netLink {
	var ls []*netLink
	for _, p := range n.nodes[id].ports {
		if p != nil {
			ls = append(ls, p.link)
		}
	}
	return ls
}

// refresh recomputes the data-plane state of links whose inputs changed,
// then runs the idle callbacks owed, once every state is consistent.
func (n *Network) refresh(now sim.Time, ls []*netLink) {
	var kick []*Port
	for _, l := range ls {
		up := l.admin && n.nodes[l.ends[AtoB].fromNode].up && n.nodes[l.ends[BtoA].fromNode].up
		if up == l.up {
			continue
		}
		l.up = up
		l.ends[AtoB].up, l.ends[BtoA].up = up, up
		if !up {
			// Every sender hears of the failure (its idle callback), busy
			// or not: a NIC tells its transports at once that the port is
			// down (softnic).
			for _, p := range l.ends {
				p.goDown(now)
				kick = append(kick, p)
			}
		} else {
			for _, p := range l.ends {
				p.busyPs, p.remNum = int64(now)*1000, 0
				p.idleSince = now
				kick = append(kick, p)
			}
		}
		n.ctrlChange(now, l)
	}
	if n.detect < 0 && n.routesDirty {
		n.recomputeRoutes()
	}
	for _, p := range kick {
		if p.onIdle != nil && p.Idle() {
			p.onIdle(now)
		}
	}
}

// ctrlChange runs the routing state machine after a data-plane change.
func (n *Network) ctrlChange(now sim.Time, l *netLink) {
	if n.detect < 0 {
		if l.up {
			l.ctrl = ctrlUp
		} else {
			l.ctrl = ctrlDown
		}
		n.markRouted(l)
		n.routesDirty = true // refresh recomputes once for all its links
		return
	}
	switch {
	case !l.up && l.ctrl == ctrlUp:
		l.ctrl = ctrlFailing
		n.s.Arm(&l.timer, now+n.detect)
	case !l.up && l.ctrl == ctrlJoining:
		l.ctrl = ctrlDown
		n.s.Disarm(&l.timer)
	case l.up && l.ctrl == ctrlFailing:
		l.ctrl = ctrlUp
		n.s.Disarm(&l.timer)
	case l.up && l.ctrl == ctrlDown:
		l.ctrl = ctrlJoining
		n.s.Arm(&l.timer, now+n.detect)
	}
}

// detected is a link's detection timer: routing now believes its state.
func (n *Network) detected(now sim.Time, l *netLink) {
	switch l.ctrl {
	case ctrlFailing:
		l.ctrl = ctrlDown
	case ctrlJoining:
		l.ctrl = ctrlUp
	default:
		return
	}
	n.markRouted(l)
	// Links failing together (a switch) detect in the same nanosecond;
	// recompute once after all of them.
	if !n.routesDirty {
		n.routesDirty = true
		n.s.Arm(&n.routeTimer, now)
	}
}

// LinkState describes a link for tools: its data-plane state and what
// routing believes ("up", "failing", "down", "joining").
func (n *Network) LinkState(link string) (up bool, routing string, err error) {
	l, err := n.link(link)
	if err != nil {
		return false, "", err
	}
	return l.up, l.ctrl.String(), nil
}
