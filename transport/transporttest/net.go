package transporttest

import (
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// IPSealer is implemented by protocols whose integrity check covers the
// framed IPv4 packet (RoCEv2's ICRC). Hosts seal every packet such a
// protocol sends and check every packet before Demux, as a NIC does.
type IPSealer interface {
	Seal(ip []byte)
	Check(ip []byte) bool
}

// Verdict is what a Filter decides for one packet.
type Verdict uint8

// Verdicts.
const (
	Pass      Verdict = iota // deliver normally
	Drop                     // lose the packet
	Duplicate                // deliver it twice
	MarkCE                   // set CE in its IPv4 header (if it is ECN-capable)
)

// Packet is what a Filter sees: one packet leaving its host.
type Packet struct {
	From, To *Host
	// Conn is the sending connection.
	Conn *Conn
	Port int
	Meta transport.TxMeta
	// Payload is the transport payload (after the UDP header) and IP the
	// whole framed packet (Payload is a part of it). Both are valid only
	// during the Filter call; a filter may change bytes in place to model
	// corruption in flight.
	Payload []byte
	IP      []byte
	// Seq numbers the packets sent on the net, from 1.
	Seq uint64
}

// Config describes the network. Zero values mean: one port per host, 4096
// byte path MTU, 100 Gb/s links, 1us per hop, no skew, no queue limit, no
// ECN marking, no random faults.
type Config struct {
	// Seed drives every random choice (faults, route skews, the
	// connections' own random streams).
	Seed uint64
	// Ports is the number of ports (planes) per host.
	Ports int
	// PathMTU is the transport.Config.PathMTU hosts give their connections.
	PathMTU int
	// LinkRate is every link's rate in bits per second; negative means
	// infinitely fast (no serialization, no queues).
	LinkRate float64
	// LinkDelay is the propagation delay of each hop (a packet crosses two:
	// its host's uplink and the destination's downlink); negative means 0.
	LinkDelay sim.Time
	// PathSkew: each route gets a fixed extra delay in [0, PathSkew).
	PathSkew sim.Time
	// QueueBytes bounds a downlink's queue (drop-tail); 0 means unbounded.
	QueueBytes int
	// ECNThreshold marks ECN-capable packets CE when the downlink queue
	// they join holds more than this many bytes; 0 disables marking.
	ECNThreshold int
	// Loss, Dup and Reorder are per-packet probabilities of a random drop, a
	// duplicate, and an extra delay in [0, ReorderDelay) that breaks the
	// path's FIFO order.
	Loss, Dup, Reorder float64
	ReorderDelay       sim.Time
}

func (c Config) withDefaults() Config {
	if c.Ports <= 0 {
		c.Ports = 1
	}
	if c.PathMTU <= 0 {
		c.PathMTU = 4096
	}
	if c.LinkRate == 0 {
		c.LinkRate = 100e9
	}
	if c.LinkRate < 0 {
		c.LinkRate = 0
	}
	if c.LinkDelay == 0 {
		c.LinkDelay = sim.Microsecond
	}
	if c.LinkDelay < 0 {
		c.LinkDelay = 0
	}
	if c.ReorderDelay <= 0 {
		c.ReorderDelay = 5 * sim.Microsecond
	}
	return c
}

// Stats counts what happened to packets on the net.
type Stats struct {
	Sent        uint64 // left a host (before any fault)
	Delivered   uint64 // handed to the destination host
	Lost        uint64 // random loss
	FilterDrops uint64 // dropped by the Filter
	DownDrops   uint64 // hit a link or plane that was down
	QueueDrops  uint64 // downlink queue full
	Duplicated  uint64 // extra copies made (random or by the Filter)
	Marked      uint64 // CE marks set (queue threshold or Filter)
	Reordered   uint64 // given a random extra delay
}

// FrameOverhead is the Ethernet framing a packet costs on a link besides
// its IPv4 bytes: header, FCS, preamble and inter-frame gap.
const FrameOverhead = 14 + 4 + 8 + 12

const ipUDPSize = header.IPv4MinSize + header.UDPSize

// Net is a star network of hosts, one switch per plane.
type Net struct {
	Loop *sim.Loop
	// Filter, if set, sees every packet as it leaves its host.
	Filter func(p *Packet) Verdict
	// Trace is given to every connection's transport.Config.
	Trace transport.Tracer
	// Stats counts packet fates.
	Stats Stats

	cfg       Config
	rnd       *rand.Rand
	hosts     []*Host
	free      []*frame
	seq       uint64
	ipID      uint16
	planeDown []bool
	frameSize int
}

// New returns an empty network on loop.
func New(loop *sim.Loop, cfg Config) *Net {
	cfg = cfg.withDefaults()
	return &Net{
		Loop:      loop,
		cfg:       cfg,
		rnd:       sim.NewRand(cfg.Seed, "transporttest/net"),
		planeDown: make([]bool, cfg.Ports),
		frameSize: ipUDPSize + cfg.PathMTU + transport.HeaderRoom,
	}
}

// Config returns the network's configuration with defaults filled in.
func (n *Net) Config() Config { return n.cfg }

// Hosts returns the hosts in the order they were added.
func (n *Net) Hosts() []*Host { return n.hosts }

// SetPlaneUp takes every link of plane q down or up. Packets already on a
// link are lost when they reach a hop that is down.
func (n *Net) SetPlaneUp(q int, up bool) { n.planeDown[q] = !up }

// AddHost adds a host speaking proto, with its own Memory. Its address is
// 198.18.x.y from its index.
func (n *Net) AddHost(name string, proto transport.Protocol) *Host {
	idx := len(n.hosts)
	h := &Host{
		Name:  name,
		Index: idx,
		Addr:  netip.AddrFrom4([4]byte{198, 18, byte((idx + 1) >> 8), byte(idx + 1)}),
		Proto: proto,
		Mem:   NewMemory(),
		net:   n,
		byID:  make(map[uint32]*Conn),
	}
	h.sealer, _ = proto.(IPSealer)
	h.ports = make([]hostPort, n.cfg.Ports)
	for q := range h.ports {
		p := &h.ports[q]
		p.h, p.q = h, q
		p.txDone.Init(portTxDone, p)
	}
	n.hosts = append(n.hosts, h)
	return h
}

// Connect dials from a to b and runs the loop until both ends are
// established, or fails after limit of virtual time.
func (n *Net) Connect(a, b *Host, limit sim.Time) (*Conn, error) {
	c, err := a.Dial(b)
	if err != nil {
		return nil, err
	}
	end := n.Loop.Now() + limit
	for n.Loop.Now() < end {
		if c.T.State() == transport.StateEstablished && c.Remote != nil &&
			c.Remote.T.State() == transport.StateEstablished {
			return c, nil
		}
		next := n.Loop.Next()
		if next == sim.Never || next > end {
			break
		}
		n.Loop.RunUntil(next)
	}
	if c.T.State() == transport.StateEstablished && c.Remote != nil &&
		c.Remote.T.State() == transport.StateEstablished {
		return c, nil
	}
	return nil, fmt.Errorf("transporttest: connecting %s to %s: not established after %v (dialer %v)",
		a.Name, b.Name, limit, c.T.State())
}

// frame is a packet in flight. Frames are recycled through Net.free, so a
// running net allocates nothing per packet.
type frame struct {
	timer    sim.Timer
	net      *Net
	buf      []byte
	n        int
	from, to *Host
	src      *Conn
	port     int
	toHost   bool // second hop: the event is the delivery at the host
}

func (n *Net) getFrame() *frame {
	if k := len(n.free); k > 0 {
		f := n.free[k-1]
		n.free = n.free[:k-1]
		return f
	}
	f := &frame{net: n, buf: make([]byte, n.frameSize)}
	f.timer.Init(frameEvent, f)
	return f
}

func (n *Net) putFrame(f *frame) {
	f.from, f.to, f.src, f.n, f.toHost = nil, nil, nil, 0, false
	n.free = append(n.free, f)
}

func frameEvent(now sim.Time, arg any) {
	f := arg.(*frame)
	if f.toHost {
		f.net.deliver(now, f)
	} else {
		f.net.atSwitch(now, f)
	}
}

// serialize returns how long a packet of ipLen bytes occupies a link.
func (n *Net) serialize(ipLen int) sim.Time {
	if n.cfg.LinkRate == 0 {
		return 0
	}
	return sim.Time(float64((ipLen+FrameOverhead)*8) / n.cfg.LinkRate * 1e9)
}

// skew is the fixed extra delay of one route.
func (n *Net) skew(from, to *Host, port int, sport uint16) sim.Time {
	if n.cfg.PathSkew <= 0 {
		return 0
	}
	x := n.cfg.Seed ^ uint64(from.Index)<<48 ^ uint64(to.Index)<<32 ^ uint64(port)<<16 ^ uint64(sport)
	// splitmix64 finalizer: a cheap, well-mixed hash.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return sim.Time(x % uint64(n.cfg.PathSkew))
}

// send puts a framed packet on host h's uplink at port q; it returns how
// long the uplink is busy.
func (n *Net) send(now sim.Time, f *frame, meta transport.TxMeta) sim.Time {
	n.seq++
	n.Stats.Sent++
	ip := f.buf[:f.n]
	ser := n.serialize(f.n)
	verdict := Pass
	if n.Filter != nil {
		verdict = n.Filter(&Packet{From: f.from, To: f.to, Conn: f.src, Port: f.port, Meta: meta,
			Payload: ip[ipUDPSize:], IP: ip, Seq: n.seq})
	}
	switch {
	case verdict == Drop:
		n.Stats.FilterDrops++
		n.putFrame(f)
		return ser
	case n.cfg.Loss > 0 && n.rnd.Float64() < n.cfg.Loss:
		n.Stats.Lost++
		n.putFrame(f)
		return ser
	case f.from.ports[f.port].upDown || n.planeDown[f.port]:
		n.Stats.DownDrops++
		n.putFrame(f)
		return ser
	}
	if verdict == MarkCE {
		n.mark(header.IPv4(ip))
	}
	copies := 1
	if verdict == Duplicate || (n.cfg.Dup > 0 && n.rnd.Float64() < n.cfg.Dup) {
		copies = 2
		n.Stats.Duplicated++
	}
	base := now + ser + n.cfg.LinkDelay + n.skew(f.from, f.to, f.port, meta.SrcPort)
	for i := 0; i < copies; i++ {
		g := f
		if i == 1 {
			g = n.getFrame()
			g.from, g.to, g.src, g.port, g.n = f.from, f.to, f.src, f.port, f.n
			copy(g.buf, f.buf[:f.n])
		}
		at := base
		if n.cfg.Reorder > 0 && n.rnd.Float64() < n.cfg.Reorder {
			n.Stats.Reordered++
			at += sim.Time(n.rnd.Int64N(int64(n.cfg.ReorderDelay)))
		}
		n.Loop.Arm(&g.timer, at)
	}
	return ser
}

func (n *Net) mark(ip header.IPv4) {
	if e := ip.ECN(); e == header.ECNECT0 || e == header.ECNECT1 {
		ip.SetECN(header.ECNCE)
		n.Stats.Marked++
	}
}

// atSwitch queues a packet on the destination's downlink.
func (n *Net) atSwitch(now sim.Time, f *frame) {
	dp := &f.to.ports[f.port]
	if dp.downDown || n.planeDown[f.port] {
		n.Stats.DownDrops++
		n.putFrame(f)
		return
	}
	var backlog int
	if dp.busyUntil > now && n.cfg.LinkRate > 0 {
		backlog = int(float64(dp.busyUntil-now) * n.cfg.LinkRate / 8e9)
	}
	size := f.n + FrameOverhead
	if n.cfg.QueueBytes > 0 && backlog+size > n.cfg.QueueBytes {
		n.Stats.QueueDrops++
		n.putFrame(f)
		return
	}
	if n.cfg.ECNThreshold > 0 && backlog > n.cfg.ECNThreshold {
		n.mark(header.IPv4(f.buf[:f.n]))
	}
	start := max(now, dp.busyUntil)
	dp.busyUntil = start + n.serialize(f.n)
	f.toHost = true
	n.Loop.Arm(&f.timer, dp.busyUntil+n.cfg.LinkDelay)
}

// deliver hands a packet to its destination host.
func (n *Net) deliver(now sim.Time, f *frame) {
	dp := &f.to.ports[f.port]
	if dp.downDown || n.planeDown[f.port] {
		n.Stats.DownDrops++
		n.putFrame(f)
		return
	}
	n.Stats.Delivered++
	f.to.receive(now, f)
	n.putFrame(f)
}

// DownlinkBacklog returns the bytes queued on host h's downlink at port q.
func (n *Net) DownlinkBacklog(h *Host, q int) int {
	dp := &h.ports[q]
	now := n.Loop.Now()
	if dp.busyUntil <= now || n.cfg.LinkRate == 0 {
		return 0
	}
	return int(float64(dp.busyUntil-now) * n.cfg.LinkRate / 8e9)
}
