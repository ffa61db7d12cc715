// Package udpgen is a paced UDP traffic generator: a Host that sends UDP
// flows through its fabric ports at a set rate (or back to back) and counts
// what it receives per flow — order, duplicates, CE marks and payload
// damage. The `udp` workload uses it, and the fabric's tests use it to
// exercise a fabric end to end without a transport.
package udpgen

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// MinSize is the smallest packet a flow sends: IPv4 and UDP headers plus
// the 8-byte sequence number the receiver checks.
const MinSize = header.IPv4MinSize + header.UDPSize + 8

// FlowSpec describes a UDP flow.
type FlowSpec struct {
	// Name labels the flow in Stats (default "flow<index>").
	Name string
	// Dst is the destination host's address.
	Dst netip.Addr
	// SrcPort and DstPort complete the 5-tuple; the source port is the
	// flow's ECMP entropy.
	SrcPort, DstPort uint16
	// Plane is the host port the flow sends on.
	Plane int
	// Size is every packet's IPv4 total length (MinSize..packet.MaxSize).
	Size int
	// Rate paces the flow in bit/s of IPv4 bytes; packets go into the
	// port's queue on schedule, whatever it holds. 0 sends back to back,
	// pull-style: one packet each time the port goes idle (flows sharing a
	// port take turns).
	Rate float64
	// Count is the number of packets to send; 0 sends until Stop.
	Count int
	// Start delays the first packet after Host.Start.
	Start sim.Time
	// ECN is every packet's ECN codepoint (header.ECNECT0 lets switches
	// mark it).
	ECN uint8
	// TTL of every packet; 0 means 64.
	TTL uint8
}

// FlowStats are a sending flow's counters.
type FlowStats struct {
	Name      string
	Sent      uint64
	SentBytes uint64
	Done      bool
}

// RecvStats count what a host received from one flow (one source address
// and UDP port pair).
type RecvStats struct {
	Src              netip.Addr
	SrcPort, DstPort uint16
	Packets, Bytes   uint64
	// CE counts packets that arrived marked Congestion Experienced.
	CE uint64
	// OutOfOrder counts first copies of packets that arrived after a
	// packet with a higher sequence number.
	OutOfOrder uint64
	// Duplicates counts packets whose sequence number arrived before.
	Duplicates uint64
	// Corrupt counts packets whose payload pattern was damaged.
	Corrupt     uint64
	First, Last sim.Time
	maxSeq      uint64
	any         bool
	seen        []uint64 // bitset of sequence numbers received
}

// Host is a fabric.Node that sends UDP flows and counts received packets.
// It is not safe for concurrent use: it runs on the fabric's loop.
type Host struct {
	name  string
	addr  netip.Addr
	pool  *packet.Pool
	s     sim.Scheduler
	ports []*fabric.Port
	flows []*flow
	pull  [][]*flow // per port, the pull-style flows
	rr    []int     // per port, next pull flow to try
	rx    map[rxKey]*RecvStats
	// Other counts received packets that are not valid IPv4/UDP.
	other   uint64
	ipID    uint16
	started bool
}

var _ fabric.Node = (*Host)(nil)

type rxKey struct {
	src          uint32
	sport, dport uint16
}

type flow struct {
	h       *Host
	spec    FlowSpec
	timer   sim.Timer
	seq     uint64
	sent    uint64
	bytes   uint64
	nextPs  int64
	remNum  uint64
	rateBps uint64
	active  bool // started and not finished
	stopped bool
}

// NewHost returns a host with address addr that gets buffers from pool and
// timers from s. Attach it with Network.Attach and pass the ports to
// SetPorts (or use AttachAll).
func NewHost(name string, addr netip.Addr, pool *packet.Pool, s sim.Scheduler) *Host {
	return &Host{name: name, addr: addr, pool: pool, s: s, rx: map[rxKey]*RecvStats{}}
}

// AttachAll makes a Host for every host of n's topology (in topology
// order), attaches it and gives it its ports.
func AttachAll(n *fabric.Network, pool *packet.Pool, s sim.Scheduler) ([]*Host, error) {
	var hs []*Host
	for _, th := range n.Topology().Hosts {
		h := NewHost(th.Name, th.Addr, pool, s)
		ports, err := n.Attach(th.Name, h)
		if err != nil {
			return nil, fmt.Errorf("udpgen: attaching %s: %w", th.Name, err)
		}
		h.SetPorts(ports)
		hs = append(hs, h)
	}
	return hs, nil
}

// Name returns the host's name.
func (h *Host) Name() string { return h.name }

// Addr returns the host's address.
func (h *Host) Addr() netip.Addr { return h.addr }

// SetPorts gives the host its ports (from Network.Attach), index = plane.
func (h *Host) SetPorts(ports []*fabric.Port) {
	h.ports = ports
	h.pull = make([][]*flow, len(ports))
	h.rr = make([]int, len(ports))
	for i, p := range ports {
		if p != nil {
			p.SetOnIdle(func(now sim.Time) { h.pullSend(now, i) })
		}
	}
	for _, f := range h.flows {
		if f.spec.Rate == 0 && f.spec.Plane < len(h.pull) {
			h.pull[f.spec.Plane] = append(h.pull[f.spec.Plane], f)
		}
	}
}

// AddFlow adds a flow and returns its index in Stats. Flows added after
// Start begin at once (after their Start delay).
func (h *Host) AddFlow(f FlowSpec) (int, error) {
	switch {
	case !f.Dst.Is4():
		return 0, fmt.Errorf("udpgen: flow %q: destination %v is not IPv4", f.Name, f.Dst)
	case f.Size < MinSize || f.Size > packet.MaxSize:
		return 0, fmt.Errorf("udpgen: flow %q: size %d: want %d..%d", f.Name, f.Size, MinSize, packet.MaxSize)
	case f.Rate < 0 || f.Count < 0 || f.Start < 0:
		return 0, fmt.Errorf("udpgen: flow %q: negative rate, count or start", f.Name)
	case f.Plane < 0 || (h.ports != nil && (f.Plane >= len(h.ports) || h.ports[f.Plane] == nil)):
		return 0, fmt.Errorf("udpgen: flow %q: host %s has no port %d", f.Name, h.name, f.Plane)
	}
	if f.Name == "" {
		f.Name = fmt.Sprintf("flow%d", len(h.flows))
	}
	fl := &flow{h: h, spec: f}
	if f.Rate > 0 {
		fl.rateBps = uint64(f.Rate + 0.5)
		if fl.rateBps == 0 {
			fl.rateBps = 1
		}
	}
	fl.timer.Init(func(now sim.Time, arg any) { arg.(*flow).fire(now) }, fl)
	h.flows = append(h.flows, fl)
	if f.Rate == 0 && h.pull != nil {
		h.pull[f.Plane] = append(h.pull[f.Plane], fl)
	}
	if h.started {
		fl.begin(h.s.Now())
	}
	return len(h.flows) - 1, nil
}

// Start starts every flow (each after its Start delay).
func (h *Host) Start(now sim.Time) {
	h.started = true
	for _, f := range h.flows {
		f.begin(now)
	}
}

// Stop stops every flow; packets already sent keep going.
func (h *Host) Stop() {
	for _, f := range h.flows {
		f.stopped, f.active = true, false
		h.s.Disarm(&f.timer)
	}
}

func (f *flow) begin(now sim.Time) {
	if f.active || f.stopped {
		return
	}
	f.active = true
	f.nextPs = int64(now+f.spec.Start) * 1000
	f.h.s.Arm(&f.timer, now+f.spec.Start)
}

func (f *flow) finished() bool {
	return f.stopped || (f.spec.Count > 0 && f.sent >= uint64(f.spec.Count))
}

// fire is the flow's timer: a paced flow sends and schedules its next
// packet; a pull flow's timer marks its start and kicks an idle port.
func (f *flow) fire(now sim.Time) {
	if f.finished() {
		f.active = false
		return
	}
	h := f.h
	if f.rateBps == 0 {
		if p := h.port(f.spec.Plane); p != nil && p.Idle() {
			h.pullSend(now, f.spec.Plane)
		}
		return
	}
	h.send(now, f)
	if f.finished() {
		f.active = false
		return
	}
	num := uint64(f.spec.Size)*8*1e12 + f.remNum
	f.remNum = num % f.rateBps
	f.nextPs += int64(num / f.rateBps)
	h.s.Arm(&f.timer, sim.Time((f.nextPs+999)/1000))
}

func (h *Host) port(plane int) *fabric.Port {
	if plane < len(h.ports) {
		return h.ports[plane]
	}
	return nil
}

// pullSend sends the next packet of the pull-style flows on a port, round
// robin.
func (h *Host) pullSend(now sim.Time, plane int) {
	fs := h.pull[plane]
	for range fs {
		i := h.rr[plane] % len(fs)
		h.rr[plane] = i + 1
		f := fs[i]
		if !f.active || f.finished() {
			continue
		}
		if f.timer.Armed() {
			continue // not started yet
		}
		h.send(now, f)
		if f.finished() {
			f.active = false
		}
		return
	}
}

// send builds and sends one packet of f: IPv4, UDP, then the sequence
// number and a byte pattern derived from it.
func (h *Host) send(now sim.Time, f *flow) {
	p := h.port(f.spec.Plane)
	if p == nil {
		return
	}
	b := h.pool.Get(f.spec.Size)
	b.SetLen(f.spec.Size)
	d := b.Data()
	h.ipID++
	header.IPv4(d).Encode(&header.IPv4Fields{
		TOS: f.spec.ECN & 3, TotalLength: uint16(f.spec.Size), ID: h.ipID, TTL: f.spec.TTL,
		Protocol: header.IPv4ProtoUDP, Src: h.addr, Dst: f.spec.Dst,
	})
	payload := d[header.IPv4MinSize+header.UDPSize:]
	header.UDP(d[header.IPv4MinSize:]).Encode(f.spec.SrcPort, f.spec.DstPort, len(payload))
	binary.BigEndian.PutUint64(payload, f.seq)
	fill(payload[8:], f.seq)
	f.seq++
	f.sent++
	f.bytes += uint64(f.spec.Size)
	p.Send(now, b)
}

func fill(b []byte, seq uint64) {
	for i := range b {
		b[i] = byte(seq) + byte(i)
	}
}

// Receive implements fabric.Node: it counts the packet against its flow and
// frees it.
func (h *Host) Receive(now sim.Time, port int, b *packet.Buffer) {
	defer b.Free()
	ip := header.IPv4(b.Data())
	if ip.Validate() != nil || ip.Protocol() != header.IPv4ProtoUDP {
		h.other++
		return
	}
	u := header.UDP(ip[ip.HeaderLength():ip.TotalLength()])
	if !u.Valid() {
		h.other++
		return
	}
	k := rxKey{ip.SrcU32(), u.SrcPort(), u.DstPort()}
	st := h.rx[k]
	if st == nil {
		st = &RecvStats{Src: ip.Src(), SrcPort: k.sport, DstPort: k.dport, First: now}
		h.rx[k] = st
	}
	st.Packets++
	st.Bytes += uint64(len(ip))
	st.Last = now
	if ip.ECN() == header.ECNCE {
		st.CE++
	}
	pl := u.Payload()
	if len(pl) < 8 {
		st.Corrupt++
		return
	}
	seq := binary.BigEndian.Uint64(pl)
	if seq < maxTrackedSeq {
		w := int(seq / 64)
		for len(st.seen) <= w {
			st.seen = append(st.seen, 0)
		}
		if st.seen[w]&(1<<(seq%64)) != 0 {
			st.Duplicates++
			return
		}
		st.seen[w] |= 1 << (seq % 64)
	}
	if st.any && seq < st.maxSeq {
		st.OutOfOrder++
	}
	if !st.any || seq > st.maxSeq {
		st.maxSeq = seq
	}
	st.any = true
	for i, c := range pl[8:] {
		if c != byte(seq)+byte(i) {
			st.Corrupt++
			break
		}
	}
}

// maxTrackedSeq bounds the duplicate bitset (a corrupted sequence number
// must not make it huge).
const maxTrackedSeq = 1 << 26

// Stats returns the sending flows' counters, in AddFlow order.
func (h *Host) Stats() []FlowStats {
	out := make([]FlowStats, len(h.flows))
	for i, f := range h.flows {
		out[i] = FlowStats{Name: f.spec.Name, Sent: f.sent, SentBytes: f.bytes, Done: f.finished()}
	}
	return out
}

// Received returns what the host received, per source flow, sorted by
// source address and ports.
func (h *Host) Received() []RecvStats {
	out := make([]RecvStats, 0, len(h.rx))
	for _, st := range h.rx {
		c := *st
		c.seen = nil
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b RecvStats) int {
		return cmp.Or(a.Src.Compare(b.Src), cmp.Compare(a.SrcPort, b.SrcPort), cmp.Compare(a.DstPort, b.DstPort))
	})
	return out
}

// ReceivedTotal sums Received.
func (h *Host) ReceivedTotal() (packets, bytes uint64) {
	for _, st := range h.rx {
		packets += st.Packets
		bytes += st.Bytes
	}
	return
}

// Other returns how many received packets were not IPv4/UDP.
func (h *Host) Other() uint64 { return h.other }
