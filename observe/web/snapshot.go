package web

import (
	"net/netip"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// Snapshot is a lab's state at one instant of lab time: cumulative
// counters, as the fabric, the NICs and the transports keep them. Rates
// are differences between two snapshots (see buildFrame). A live lab
// answers GET /web/snapshot with one; a replay file stores them as
// differences.
type Snapshot struct {
	T sim.Time `json:"t_ns"`
	// Dirs are the link directions, indexed as Topology numbers them.
	Dirs []DirState `json:"dirs"`
	// SwitchDown lists the switches that are down (failed or in a failed
	// plane), by name.
	SwitchDown []string `json:"switch_down,omitempty"`
	// Hosts are the hosts' NIC counters, in topology order.
	Hosts []HostState `json:"hosts"`
	// Conns are the open connections, each end separately; Paths is
	// filled only for the connections the snapshot was asked about.
	Conns []ConnState `json:"conns"`
}

// DirState is one link direction.
type DirState struct {
	Up      bool    `json:"up"`
	Queue   int     `json:"queue"` // bytes waiting
	TxBytes uint64  `json:"tx_bytes"`
	Drops   uint64  `json:"drops"`
	Marks   uint64  `json:"marks"`
	Rate    float64 `json:"rate_bps"`
	Impair  string  `json:"impair,omitempty"` // netem spelling, "" for none
}

// HostState is one host's NIC counters.
type HostState struct {
	TxBytes     uint64 `json:"tx_bytes"`
	RxBytes     uint64 `json:"rx_bytes"`
	TxPackets   uint64 `json:"tx_packets"`
	RxPackets   uint64 `json:"rx_packets"`
	CEReceived  uint64 `json:"ce_received"`
	Drops       uint64 `json:"drops"`
	Retransmits uint64 `json:"retx"`
	Timeouts    uint64 `json:"timeouts"`
}

// ConnKey names one end of a connection: its host and local id.
type ConnKey struct {
	Host string `json:"host"`
	ID   uint32 `json:"id"`
}

// ConnState is one end of a connection.
type ConnState struct {
	ConnKey
	Peer      string `json:"peer"`
	PeerID    uint32 `json:"peer_id,omitempty"` // the peer's id of this connection (0: unknown)
	Transport string `json:"transport"`
	State     string `json:"state"`
	// Cwnd is summed over paths; TxBytes counts bytes sent (the send
	// rate's counter), Acked bytes delivered or placed.
	Cwnd           int64    `json:"cwnd"`
	InFlight       int64    `json:"inflight"`
	SRTT           sim.Time `json:"srtt_ns"`
	TxBytes        uint64   `json:"tx_bytes"`
	Acked          uint64   `json:"acked_bytes"`
	Retransmits    uint64   `json:"retx"`
	Timeouts       uint64   `json:"timeouts"`
	EntropyChanges uint64   `json:"entropy_changes"`
	RateHint       float64  `json:"rate_hint_bps"`
	NumPaths       int      `json:"num_paths"`
	// Paths, when asked for: each sending path with its current route.
	Paths []PathState `json:"paths,omitempty"`
}

// PathState is one sending path of a connection.
type PathState struct {
	Plane       int      `json:"plane"`
	Entropy     uint16   `json:"entropy"`
	State       string   `json:"state"`
	Cwnd        int64    `json:"cwnd"`
	InFlight    int64    `json:"inflight"`
	SRTT        sim.Time `json:"srtt_ns"`
	RTO         sim.Time `json:"rto_ns"`
	TxBytes     uint64   `json:"tx_bytes"`
	Acked       uint64   `json:"acked"` // packets
	CEAcked     uint64   `json:"ce_acked"`
	Retransmits uint64   `json:"retx"`
	Timeouts    uint64   `json:"timeouts"`
	// Route is the link directions a data packet on this path crosses
	// now (the switches' current routes and ECMP hashes); Reached says
	// whether it gets to the peer.
	Route   []int `json:"route"`
	Reached bool  `json:"reached"`
}

// Probe reads a lab's state for snapshots. It runs on the lab's loop
// goroutine, like everything that touches the fabric and the NICs, and
// only when asked: nothing per packet.
type Probe struct {
	net      *fabric.Network
	topo     *fabric.Topology
	hosts    []probeHost
	names    map[netip.Addr]string
	switches []string
	st       transport.Stats // one connection's report, storage reused
	// The current snapshot's path and route storage (see conn).
	paths  []PathState
	routes []int
}

type probeHost struct {
	name string
	nic  *softnic.NIC
}

// NewProbe returns a probe of a built network. Add the hosts' NICs with
// AddNIC as they are made.
func NewProbe(n *fabric.Network) *Probe {
	p := &Probe{net: n, topo: n.Topology(), names: map[netip.Addr]string{}}
	for _, h := range p.topo.Hosts {
		p.names[h.Addr] = h.Name
		p.hosts = append(p.hosts, probeHost{name: h.Name})
	}
	for _, s := range p.topo.Switches {
		p.switches = append(p.switches, s.Name)
	}
	return p
}

// AddNIC registers a host's NIC; its counters and connections show up in
// snapshots from then on.
func (p *Probe) AddNIC(host string, nic *softnic.NIC) {
	for i := range p.hosts {
		if p.hosts[i].name == host {
			p.hosts[i].nic = nic
		}
	}
}

// Topology returns the probed lab's topology.
func (p *Probe) Topology() Topology { return TopologyOf(p.topo) }

// Snapshot reads every link direction, switch, NIC and connection at now.
// paths selects the connections whose paths (and routes) to include; nil
// includes none.
func (p *Probe) Snapshot(now sim.Time, paths func(ConnKey) bool) *Snapshot {
	s := &Snapshot{T: now, Dirs: make([]DirState, p.net.NumPorts()), Hosts: make([]HostState, len(p.hosts))}
	// Fresh storage: the previous snapshot keeps its own.
	p.paths, p.routes = nil, make([]int, 0, 4096)
	snap := p.net.Counters()
	for i := range s.Dirs {
		port := p.net.PortAt(i)
		d := &s.Dirs[i]
		d.Up, d.Queue, d.Rate = port.Up(), port.QueueBytes(), port.Rate()
		if imp := port.Impairment(); !imp.IsZero() {
			d.Impair = imp.String()
		}
	}
	// Counters are sorted by name; match them to directions by port.
	for _, lc := range snap.Links {
		port, err := p.net.LinkPort(lc.Link, lc.Dir)
		if err != nil {
			continue
		}
		d := &s.Dirs[port.Index()]
		d.TxBytes, d.Drops, d.Marks = lc.TxBytes, lc.Drops.Total(), lc.ECNMarks
	}
	for _, name := range p.switches {
		if up, err := p.net.NodeUp(name); err == nil && !up {
			s.SwitchDown = append(s.SwitchDown, name)
		}
	}
	for i, h := range p.hosts {
		if h.nic == nil {
			continue
		}
		st := h.nic.Stats()
		tt := h.nic.TransportTotals()
		s.Hosts[i] = HostState{TxBytes: st.TxBytes, RxBytes: st.RxBytes, TxPackets: st.TxPackets, RxPackets: st.RxPackets,
			CEReceived: st.CEReceived, Drops: st.Dropped(), Retransmits: tt.Retransmits, Timeouts: tt.Timeouts}
		for _, c := range h.nic.Conns() {
			if c == nil {
				continue
			}
			s.Conns = append(s.Conns, p.conn(h.name, h.nic, c, paths))
		}
	}
	return s
}

// peerIDer is a transport connection that knows its peer's id for it
// (MetaRoCE's connection ids; the RoCEv2 baseline's trace names QPs by
// their local id only).
type peerIDer interface{ PeerID() uint32 }

// conn reads one connection's transport figures (transport.Stats).
func (p *Probe) conn(host string, nic *softnic.NIC, c *softnic.Conn, paths func(ConnKey) bool) ConnState {
	tc := c.Transport()
	tc.ReportStats(&p.st)
	st := &p.st
	cs := ConnState{ConnKey: ConnKey{host, c.ID()}, Peer: p.names[c.Peer()], Transport: c.Kind().String(), State: c.State().String(),
		Cwnd: int64(st.Cwnd), InFlight: int64(st.InFlight), SRTT: st.SRTT, TxBytes: st.TxBytes, Acked: st.BytesPlaced,
		Retransmits: st.Retransmits, Timeouts: st.Timeouts, EntropyChanges: st.EntropyChanges, RateHint: st.RateHint,
		NumPaths: len(st.Paths)}
	if cs.Peer == "" {
		cs.Peer = c.Peer().String()
	}
	if pi, ok := tc.(peerIDer); ok {
		cs.PeerID = pi.PeerID()
	}
	if paths == nil || !paths(cs.ConnKey) {
		return cs
	}
	var dport uint16
	if proto := nic.Protocol(c.Kind()); proto != nil {
		dport = proto.UDPPort()
	}
	// Paths and routes of all connections share a few large arrays: a
	// snapshot of every path of a big lab is then a few allocations, not
	// one per path. (A slice keeps the array it was cut from alive when
	// append moves on to a new one.)
	n := len(st.Paths)
	if cap(p.paths)-len(p.paths) < n {
		p.paths = make([]PathState, 0, max(1024, 2*n))
	}
	cs.Paths = p.paths[len(p.paths) : len(p.paths)+n : len(p.paths)+n]
	p.paths = p.paths[:len(p.paths)+n]
	for i := range cs.Paths {
		ps := &st.Paths[i]
		path := &cs.Paths[i]
		*path = PathState{Plane: ps.Port, Entropy: ps.Entropy, State: ps.State, Cwnd: int64(ps.Cwnd), InFlight: int64(ps.InFlight),
			SRTT: ps.SRTT, RTO: ps.RTO, TxBytes: ps.TxBytes, Acked: ps.PacketsAcked, CEAcked: ps.CEAcked,
			Retransmits: ps.Retransmits, Timeouts: ps.Timeouts}
		ft := fabric.FlowTuple{Src: nic.Addr(), Dst: c.Peer(), Proto: header.IPv4ProtoUDP, SrcPort: ps.Entropy, DstPort: dport}
		start := len(p.routes)
		p.routes, path.Reached, _ = p.net.FlowPath(host, ps.Port, ft, p.routes)
		path.Route = p.routes[start:len(p.routes):len(p.routes)]
	}
	return cs
}
