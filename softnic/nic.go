// Package softnic is mrlab's software RDMA NIC: one per host, one port per
// plane. It offers a verbs-style API (protection domains, memory regions
// with keys and access flags, connections set up in-band over the fabric,
// WRITE/SEND/RECV/READ with scatter-gather lists, completion queues), frames
// what its transports produce into IPv4/UDP (ECT on the way out, CE read on
// the way in, the path's entropy as UDP source port), demultiplexes incoming
// packets to transport connections or to the host port, and counts
// everything.
//
// Each port's transmit scheduler serves connections' control packets
// (ACK, NAK, CNP, handshake: transport.ControlTransmitter) strictly ahead
// of data, as an RDMA NIC's responder has its own queue for them; data
// and the host's packets then take turns, connections in round robin. A
// NIC tells the transports that watch their ports (transport.PortWatcher)
// when a port's link goes down or comes back.
//
// A NIC is driven by one event loop: it gets the time from its caller and
// its timers from a sim.Scheduler, never reads a clock, never starts a
// goroutine, and is not safe for concurrent use. In steady state it
// allocates nothing per packet.
package softnic

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"

	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// Framing sizes: every transport packet is IPv4 (20 bytes, no options) +
// UDP (8 bytes) + the transport's payload.
const (
	IPv4UDPSize = header.IPv4MinSize + header.UDPSize
	// smallPacket is the pool's small size class: payloads that fit are
	// copied out of the large transmit buffer so ACKs do not pin 9 KB each.
	smallPacket = 512
	// maxBurst bounds how many packets one pump sends back to back while a
	// wire stays idle, so a misbehaving wire or transport cannot spin the
	// loop at one instant.
	maxBurst = 256
)

// Config configures a NIC.
type Config struct {
	// Name names the NIC (its host) in traces and random streams.
	Name string
	// Addr is the host's IPv4 address; every port shares it.
	Addr netip.Addr
	// Ports is the number of ports, one per plane.
	Ports int
	// Rate is each port's line rate in bits per second; 0 takes it from
	// the first wire at SetWires.
	Rate float64
	// PathMTU is the largest RDMA payload per packet (256..4096); 0 means 4096.
	PathMTU int
	// Sched is the event loop.
	Sched sim.Scheduler
	// Pool supplies packet buffers.
	Pool *packet.Pool
	// Seed seeds the NIC's random streams (key tags, connections'
	// streams).
	Seed uint64
	// KeySource, if set, draws memory keys, region addresses and the base
	// of connection ids, so that they differ in every run and no host can
	// predict another's: live labs pass CryptoSource. nil draws keys and
	// addresses from Seed and numbers connections from a fixed base, as
	// sim mode's reproducible traces need.
	KeySource rand.Source
	// Protocols are the transports this NIC speaks, one instance per NIC
	// (a Protocol holds NIC-wide state). Dial picks one by kind; incoming
	// packets pick one by UDP destination port.
	Protocols []transport.Protocol
	// HostQueue is the per-port queue of host packets waiting to be sent;
	// 0 means 256.
	HostQueue int
	// SharedHostQueue makes HostQueue one bound on the host packets
	// waiting at all the NIC's ports together, as a real NIC's packet
	// buffer is shared by its ports: one port (one flow hashes to one)
	// may hold all of it. A host's kernel is paced at the sum of its
	// NIC's ports, so one flow can arrive at that sum and its port must
	// absorb it; a per-port bound held only the port's share.
	SharedHostQueue bool
	// Trace, if set, receives transports' protocol decisions.
	Trace transport.Tracer
}

// Sealer is implemented by protocols whose packets carry a CRC over the
// IPv4 packet (RoCEv2's ICRC). The NIC seals each packet after framing it
// and checks each one before demultiplexing it.
type Sealer interface {
	Seal(ip []byte)
	Check(ip []byte) bool
}

// Errors from NIC set-up and connection calls.
var (
	ErrNoProtocol = errors.New("softnic: no such transport on this NIC")
	ErrWires      = errors.New("softnic: wrong number of wires")
	ErrBadPD      = errors.New("softnic: protection domain of another NIC")
)

type protoEntry struct {
	p      transport.Protocol
	kind   transport.Kind
	port   uint16
	sealer Sealer
}

// nicPort is one port's transmit side. Its scheduler has two classes:
// control (connections that may owe an ACK, NAK, CNP or handshake message
// on the port, asked through transport.ControlTransmitter) is served
// strictly first; then host packets and data take turns, connections in
// round robin. An ACK so never waits behind other connections' data: with
// 250 connections sending on a port, one round of the data round robin
// is 250 packets, 82 us at 100 Gbit/s, far above the fabric's round trip
// (plane-scaling: 17,000 tail-loss probes fired on late ACKs). A
// connection joins the control list after every event, in the order of
// its events, whether it owes control or not (that order is the order
// its control goes in), and so the data list; one whose transport says
// it has nothing (transport.ControlPender, TransmitPender) leaves the
// list unasked, without a buffer.
type nicPort struct {
	idx     int
	w       Wire
	up      upper
	ready   readyList
	ctl     readyList
	host    []*packet.Buffer // ring of host packets waiting
	hHead   int
	hN      int
	hostTx  bool // host's turn next
	pumping bool
	down    bool // its link was down when last looked at (checkPort)
	kick    sim.Timer
	stats   PortStats
}

// NIC is one host's software RDMA NIC.
type NIC struct {
	// woken are the connections a transport woke (transport.Waker) whose
	// afterIO is due once the current call into it returns; waking is
	// set while drainWoken runs them, wokenAt the next it runs.
	woken   []*Conn
	wokenAt int
	waking  bool

	name    string
	addr    netip.Addr
	addrU32 uint32
	sched   sim.Scheduler
	org     *sim.Origin // see New
	pool    *packet.Pool
	seed    uint64
	mtu     int
	rate    float64
	trace   transport.Tracer

	// dmaTx and dmaRx are the packet a connection is building
	// (Transmit) or reading (Receive), for the DMA engine (memView):
	// synthetic content is tracked by where it lies in the packet.
	dmaTx, dmaRx *packet.Buffer
	// rxZero, rxZeroN: the received packet's bytes that travelled as a
	// count (a header-only packet's elided payload), at rxZero of dmaRx's
	// buffer (packet.Buffer.Offset), for ZeroSpan.
	rxZero, rxZeroN int
	// txLazy: ReadLazy left zeros unwritten in dmaTx (payload.go says
	// who writes them); txAsked: ZeroSpan was asked about it since, and
	// reported txZeroN bytes at txZero of its buffer.
	txLazy, txAsked bool
	txZero, txZeroN int

	protos []protoEntry
	ports  []nicPort
	host   HostPort

	conns   []*Conn         // by LocalID-1; nil once retired
	retired TransportTotals // counters of retired connections
	setups  map[setupKey]*Conn
	listen  map[uint16]*ListenOptions // by service
	half    map[uint16][]*Conn        // half-open passive connections by service, oldest first
	sources map[uint32]*source        // per source address (guard.go)
	onIdle  []func(sim.Time)
	ipID    uint16
	hostQ   int  // each port's host queue holds at most this many (Config.HostQueue)
	hostAll bool // hostQ bounds all ports' host packets together (Config.SharedHostQueue)
	hostN   int  // host packets waiting at all ports
	keyRand *rand.Rand

	nextPD   uint32
	mrs      map[uint32]*MR // live regions by key
	byAddr   []*MR          // live regions by address
	oldKeys  []uint32       // ring of the last recentKeys deregistered keys
	oldNext  int
	connBase uint32 // added to a connection's index in its id

	stats Stats
}

// setupKey identifies a connection request so that a retransmitted request
// reaches the connection the first one created instead of opening another.
type setupKey struct {
	src  uint32
	port uint16
	sum  uint64
}

// New returns a NIC with no wires yet; attach them with SetWires.
func New(cfg Config) (*NIC, error) {
	if !cfg.Addr.Is4() {
		return nil, fmt.Errorf("creating NIC %q: address %v is not IPv4", cfg.Name, cfg.Addr)
	}
	if cfg.Ports < 1 {
		return nil, fmt.Errorf("creating NIC %q: %d ports, want at least 1", cfg.Name, cfg.Ports)
	}
	if cfg.Sched == nil || cfg.Pool == nil {
		return nil, fmt.Errorf("creating NIC %q: missing scheduler or packet pool", cfg.Name)
	}
	if cfg.PathMTU == 0 {
		cfg.PathMTU = 4096
	}
	if cfg.PathMTU < 256 || cfg.PathMTU > 4096 {
		return nil, fmt.Errorf("creating NIC %q: path MTU %d outside 256..4096", cfg.Name, cfg.PathMTU)
	}
	if cfg.HostQueue == 0 {
		cfg.HostQueue = 256
	}
	a4 := cfg.Addr.As4()
	n := &NIC{
		name:    cfg.Name,
		addr:    cfg.Addr,
		addrU32: uint32(a4[0])<<24 | uint32(a4[1])<<16 | uint32(a4[2])<<8 | uint32(a4[3]),
		sched:   cfg.Sched,
		// One origin numbers every event the NIC arms (its ports' kicks,
		// CQ notifications, connections' timers, oracle replays), so a
		// connection made mid-run needs no new number.
		org:     cfg.Sched.NewOrigin(),
		pool:    cfg.Pool,
		seed:    cfg.Seed,
		mtu:     cfg.PathMTU,
		rate:    cfg.Rate,
		trace:   cfg.Trace,
		setups:  make(map[setupKey]*Conn),
		hostQ:   cfg.HostQueue,
		hostAll: cfg.SharedHostQueue,
		keyRand: sim.NewRand(cfg.Seed, cfg.Name+"/nic/keys"),
		mrs:     make(map[uint32]*MR),
	}
	if cfg.KeySource != nil {
		n.keyRand = rand.New(cfg.KeySource)
		n.connBase = n.keyRand.Uint32N(maxConnBase)
	}
	for _, p := range cfg.Protocols {
		e := protoEntry{p: p, kind: p.Kind(), port: p.UDPPort()}
		for _, o := range n.protos {
			if o.kind == e.kind || o.port == e.port {
				return nil, fmt.Errorf("creating NIC %q: transports %v and %v share a kind or UDP port %d",
					cfg.Name, o.kind, e.kind, e.port)
			}
		}
		e.sealer, _ = p.(Sealer)
		n.protos = append(n.protos, e)
	}
	n.ports = make([]nicPort, cfg.Ports)
	n.onIdle = make([]func(sim.Time), cfg.Ports)
	for i := range n.ports {
		pt := &n.ports[i]
		pt.idx = i
		pt.ready.slot = i
		pt.ctl.slot = cfg.Ports + i
		pt.kick.Init(n.fireKick, pt)
		pt.kick.Own(n.org)
		n.onIdle[i] = func(now sim.Time) { n.pump(now, pt) }
	}
	return n, nil
}

// SetWires attaches the NIC's ports to their links, one wire per port in
// plane order.
func (n *NIC) SetWires(wires ...Wire) error {
	if len(wires) != len(n.ports) {
		return fmt.Errorf("attaching NIC %q: %d wires for %d ports: %w", n.name, len(wires), len(n.ports), ErrWires)
	}
	for i, w := range wires {
		pt := &n.ports[i]
		pt.w = w
		pt.up, _ = w.(upper)
		w.SetOnIdle(n.onIdle[i])
	}
	if n.rate == 0 {
		n.rate = wires[0].Rate()
	}
	return nil
}

// SetHostPort sets where non-transport packets go. nil drops them (counted).
func (n *NIC) SetHostPort(h HostPort) { n.host = h }

// Name returns the NIC's name.
func (n *NIC) Name() string { return n.name }

// Addr returns the NIC's address.
func (n *NIC) Addr() netip.Addr { return n.addr }

// Ports returns the number of ports.
func (n *NIC) Ports() int { return len(n.ports) }

// PortsUp returns which ports' links are up, bit i for port i (ports past
// 31 are not reported); a port on a wire that cannot fail counts as up.
func (n *NIC) PortsUp() uint32 {
	var m uint32
	for i := range min(len(n.ports), 32) {
		if u := n.ports[i].up; u == nil || u.Up() {
			m |= 1 << i
		}
	}
	return m
}

// Rate returns the per-port line rate in bits per second.
func (n *NIC) Rate() float64 { return n.rate }

// PathMTU returns the largest RDMA payload per packet.
func (n *NIC) PathMTU() int { return n.mtu }

// Stats returns a copy of the NIC's counters.
func (n *NIC) Stats() Stats { return n.stats }

// PortStats returns a copy of port i's counters.
func (n *NIC) PortStats(i int) PortStats { return n.ports[i].stats }

// Conns returns the NIC's connections in the order they were opened,
// except those retired (closed, with nothing left to send or time).
func (n *NIC) Conns() []*Conn {
	var out []*Conn
	for _, c := range n.conns {
		if c != nil {
			out = append(out, c)
		}
	}
	return out
}

// TransportTotals sums the transport counters of every connection the NIC
// has had, retired ones included.
func (n *NIC) TransportTotals() TransportTotals {
	t := n.retired
	var s transport.Stats // one report's storage for every connection
	for _, c := range n.conns {
		if c == nil {
			continue
		}
		if cr, ok := c.tc.(transport.CounterReporter); ok {
			cr.ReportCounters(&s) // no per-path walk: the totals need none
		} else {
			c.tc.ReportStats(&s)
		}
		t.add(&s)
	}
	return t
}

// retire forgets a connection that is closed (or failed) and has nothing
// left to send or time, so that a long-running lab does not keep every
// connection it ever had. Its counters go to the NIC's totals; packets for
// it are from then on counted as DropUnknownConn.
func (n *NIC) retire(c *Conn) {
	if c.retired || (c.state != transport.StateClosed && c.state != transport.StateError) ||
		c.tc.Deadline() != sim.Never {
		return
	}
	for i := range c.links {
		if c.links[i].in {
			return // another port has not been asked yet
		}
	}
	s := c.TransportStats()
	n.retired.add(&s)
	c.retired = true
	n.sched.Disarm(&c.timer)
	n.conns[n.connIndex(c.id)] = nil
	if c.setup != nil {
		delete(n.setups, *c.setup)
	}
}

// Protocol returns the NIC's transport of the given kind, or nil.
func (n *NIC) Protocol(k transport.Kind) transport.Protocol {
	if e := n.protoByKind(k); e != nil {
		return e.p
	}
	return nil
}

func (n *NIC) protoByKind(k transport.Kind) *protoEntry {
	for i := range n.protos {
		if n.protos[i].kind == k {
			return &n.protos[i]
		}
	}
	return nil
}

func (n *NIC) protoByPort(port uint16) *protoEntry {
	for i := range n.protos {
		if n.protos[i].port == port {
			return &n.protos[i]
		}
	}
	return nil
}

func (n *NIC) drop(r DropReason, p *packet.Buffer) {
	n.stats.Drops[r]++
	if p != nil {
		p.Free()
	}
}

// Receive implements fabric.Node: a packet arrived on a port. It takes
// ownership of p.
func (n *NIC) Receive(now sim.Time, port int, p *packet.Buffer) {
	p, b := n.showRx(p)
	n.receive(now, port, p, b)
	if b != p {
		n.pool.Unshow()
	}
}

// showRx returns where p's bytes are read, b, and notes where its elided
// payload lies (ZeroSpan). A header-only packet is read with its bytes
// back: transports and the host port read packets as bytes (its runs say
// what the zeros stand for). They are shown in the pool's lent buffer
// (packet.Pool.Show; the caller ends the loan when b is not p), not
// expanded into a buffer of their own unless that one is lent already
// (a receive inside a receive): then p is the expanded packet, and b too.
// A whole packet is its own b.
func (n *NIC) showRx(p *packet.Buffer) (owned, b *packet.Buffer) {
	holeAt, hole := p.Hole()
	n.rxZero, n.rxZeroN = 0, 0
	if hole == 0 {
		return p, p
	}
	b = n.pool.Show(p)
	if b == nil {
		p = p.Expand()
		b = p
	}
	base, _ := b.Offset(b.Data())
	n.rxZero, n.rxZeroN = base+holeAt, hole
	return p, b
}

// receive is Receive of packet p, whose bytes b holds (p itself, or the
// pool's buffer that shows a header-only p). p is what is freed or
// dropped; b is what is read, and what the DMA engine sees (dmaRx).
func (n *NIC) receive(now sim.Time, port int, p, b *packet.Buffer) {
	data := b.Data()
	n.stats.RxPackets++
	n.stats.RxBytes += uint64(len(data))
	if port >= 0 && port < len(n.ports) {
		n.ports[port].stats.RxPackets++
		n.ports[port].stats.RxBytes += uint64(len(data))
	}
	ip := header.IPv4(data)
	// A packet the fabric tagged had its headers validated when it
	// entered (and nothing since has touched them but TTL and ECN, which
	// keep the checksum right).
	if !p.Flow.Valid && ip.Validate() != nil {
		n.drop(DropMalformed, p)
		return
	}
	ip = ip[:ip.TotalLength()]
	if ip.Protocol() == header.IPv4ProtoUDP {
		hl := ip.HeaderLength()
		udp := header.UDP(ip[hl:])
		if !udp.Valid() {
			n.drop(DropMalformed, p)
			return
		}
		if e := n.protoByPort(udp.DstPort()); e != nil {
			n.receiveTransport(now, port, p, b, ip, udp, e)
			return
		}
	}
	if n.host == nil {
		n.drop(DropNoHostPort, p)
		return
	}
	n.stats.HostRxPackets++
	n.host.Deliver(now, ip)
	p.Free()
}

// receiveTransport hands p (its bytes in b, see receive) to its transport.
func (n *NIC) receiveTransport(now sim.Time, port int, p, b *packet.Buffer, ip header.IPv4, udp header.UDP, e *protoEntry) {
	if ip.DstU32() != n.addrU32 {
		n.drop(DropNotMine, p)
		return
	}
	if e.sealer != nil && !e.sealer.Check(ip) {
		n.drop(DropICRC, p)
		return
	}
	payload := udp.Payload()
	rx := transport.RxMeta{Port: port, SrcPort: udp.SrcPort(), CE: ip.ECN() == header.ECNCE}
	id, setup, err := e.p.Demux(payload)
	if err != nil {
		n.drop(DropMalformed, p)
		return
	}
	if rx.CE {
		n.stats.CEReceived++
	}
	if setup {
		n.accept(now, e, ip, payload, rx)
		p.Free()
		return
	}
	i := n.connIndex(id)
	if i < 0 || n.conns[i] == nil || n.conns[i].proto != e {
		n.drop(DropUnknownConn, p)
		return
	}
	c := n.conns[i]
	if ip.SrcU32() != c.peerU32 {
		n.drop(DropWrongPeer, p)
		return
	}
	c.stats.RxPackets++
	c.stats.RxBytes += uint64(len(payload))
	if rx.CE {
		c.stats.CEReceived++
	}
	n.dmaRx = b
	c.tc.Receive(now, payload, rx)
	n.dmaRx = nil
	p.Free()
	n.afterIO(now, c)
}

// accept opens the passive end of a connection from a setup request, half
// open until its handshake completes (guard.go), or hands a repeated
// request to the connection the first one opened.
func (n *NIC) accept(now sim.Time, e *protoEntry, ip header.IPv4, payload []byte, rx transport.RxMeta) {
	key := setupKey{src: ip.SrcU32(), port: e.port, sum: fnv64(payload)}
	if c := n.setups[key]; c != nil {
		c.stats.RxPackets++
		c.stats.RxBytes += uint64(len(payload))
		c.tc.Receive(now, payload, rx)
		n.afterIO(now, c)
		return
	}
	var service uint16
	if sr, ok := e.p.(transport.ServiceReader); ok {
		service = sr.SetupService(payload)
	}
	l := n.listen[service]
	if l == nil {
		n.stats.Drops[DropNoListener]++
		return
	}
	src := n.sourceOf(ip.SrcU32())
	if !n.admit(now, src, service) {
		return
	}
	c := n.newConn(e, ip.Src(), l.ConnOptions)
	c.service = service
	tc, err := e.p.Accept(now, n.connConfig(c), payload, rx)
	if err != nil {
		n.conns = n.conns[:len(n.conns)-1]
		n.stats.Drops[DropNoListener]++
		return
	}
	c.setTransport(tc)
	n.tellPorts(now, c)
	c.state = tc.State()
	n.setups[key] = c
	c.setup = &key
	c.stats.RxPackets++
	c.stats.RxBytes += uint64(len(payload))
	n.addHalf(c, src)
	n.afterIO(now, c)
}

func fnv64(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, x := range b {
		h ^= uint64(x)
		h *= 1099511628211
	}
	return h
}

// mix64 is SplitMix64's finalizer: a cheap, well-spread hash.
func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func (n *NIC) connConfig(c *Conn) transport.Config {
	return transport.Config{
		LocalID:  c.id,
		Ports:    len(n.ports),
		LineRate: n.rate,
		PathMTU:  n.mtu,
		Memory:   &c.mem,
		Complete: c.complete,
		Rand:     sim.NewRand(n.seed, n.name+"/conn/"+strconv.FormatUint(uint64(c.id), 10)),
		Trace:    n.trace,
		Service:  c.service,
	}
}
