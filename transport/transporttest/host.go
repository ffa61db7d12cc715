package transporttest

import (
	"fmt"
	"net/netip"

	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// HostStats counts what a host's NIC did with received packets.
type HostStats struct {
	Received     uint64 // payloads handed to a connection
	BadFrame     uint64 // IPv4/UDP framing or destination port wrong
	BadCheck     uint64 // IPSealer.Check failed
	DemuxErrors  uint64 // Demux returned an error
	NoConn       uint64 // no connection with the demultiplexed id
	AcceptErrors uint64 // Accept refused a setup request
}

// Host is one NIC: a protocol, a memory table and ports.
type Host struct {
	Name  string
	Index int
	Addr  netip.Addr
	Proto transport.Protocol
	Mem   *Memory
	Stats HostStats
	// LastAcceptError is the most recent Accept error, for test failures.
	LastAcceptError error

	net    *Net
	sealer IPSealer
	ports  []hostPort
	conns  []*Conn
	byID   map[uint32]*Conn
	nextID uint32
}

// hostPort is one port: its uplink transmitter and the downlink queue the
// plane's switch feeds it from.
type hostPort struct {
	h        *Host
	q        int
	busy     bool // uplink is serializing a packet
	txDone   sim.Timer
	rr       int // next connection to poll
	upDown   bool
	downDown bool
	// busyUntil is when the downlink finishes sending what is queued on it.
	busyUntil sim.Time
}

func portTxDone(now sim.Time, arg any) {
	p := arg.(*hostPort)
	p.busy = false
	p.h.poll(now, p)
}

// SetLinkUp takes host h's links on port q (uplink and downlink) down or
// up, and tells the host's connections that watch their ports
// (transport.PortWatcher), as a NIC does.
func (h *Host) SetLinkUp(q int, up bool) {
	h.ports[q].upDown, h.ports[q].downDown = !up, !up
	var mask uint32
	for i := range h.ports {
		if !h.ports[i].upDown && i < 32 {
			mask |= 1 << i
		}
	}
	now := h.net.Loop.Now()
	for _, c := range h.conns {
		if w, ok := c.T.(transport.PortWatcher); ok {
			w.SetPortsUp(now, mask)
			c.rearm()
		}
	}
	h.kick(now)
}

// Conns returns the host's connections in the order they were opened.
func (h *Host) Conns() []*Conn { return h.conns }

// Conn is one connection end on a host.
type Conn struct {
	// T is the transport's connection.
	T transport.Conn
	// Host is where this end lives and Peer the host at the other end.
	Host, Peer *Host
	// Remote is the other end, once the harness has seen it accepted.
	Remote *Conn
	// Completions holds every completion in the order it was delivered.
	Completions []transport.Completion
	// OnComplete, if set, is called for every completion (after it is
	// appended to Completions).
	OnComplete func(c *Conn, wc transport.Completion)

	timer sim.Timer
}

func connTimer(now sim.Time, arg any) {
	c := arg.(*Conn)
	c.T.OnTimer(now)
	c.rearm()
	c.Host.kick(now)
}

func (c *Conn) complete(wc transport.Completion) {
	c.Completions = append(c.Completions, wc)
	if c.OnComplete != nil {
		c.OnComplete(c, wc)
	}
}

// rearm sets the connection's timer to its Deadline.
func (c *Conn) rearm() {
	loop := c.Host.net.Loop
	if d := c.T.Deadline(); d != sim.Never {
		loop.Arm(&c.timer, d)
	} else {
		loop.Disarm(&c.timer)
	}
}

// PostSend posts a work request now and lets the host transmit.
func (c *Conn) PostSend(wr *transport.WorkRequest) error {
	now := c.Host.net.Loop.Now()
	err := c.T.PostSend(now, wr)
	c.rearm()
	c.Host.kick(now)
	return err
}

// PostRecv posts a receive now and lets the host transmit.
func (c *Conn) PostRecv(wr *transport.WorkRequest) error {
	now := c.Host.net.Loop.Now()
	err := c.T.PostRecv(now, wr)
	c.rearm()
	c.Host.kick(now)
	return err
}

// Close closes the connection now.
func (c *Conn) Close() {
	now := c.Host.net.Loop.Now()
	c.T.Close(now)
	c.rearm()
	c.Host.kick(now)
}

func (h *Host) newConn(peer *Host) (*Conn, transport.Config) {
	// Ids are unique across the net (host i's are 1000(i+1)+k), so traces
	// that print them are unambiguous.
	h.nextID++
	id := uint32(1000*(h.Index+1)) + h.nextID
	c := &Conn{Host: h, Peer: peer}
	c.timer.Init(connTimer, c)
	cfg := transport.Config{
		LocalID:  id,
		Ports:    len(h.ports),
		LineRate: h.net.cfg.LinkRate,
		PathMTU:  h.net.cfg.PathMTU,
		Memory:   h.Mem,
		Complete: c.complete,
		Rand:     sim.NewRand(h.net.cfg.Seed, fmt.Sprintf("transporttest/%s/%d", h.Name, id)),
		Trace:    h.net.Trace,
	}
	if cfg.LineRate == 0 {
		cfg.LineRate = 100e9 // an infinitely fast link still needs a nominal rate
	}
	return c, cfg
}

func (h *Host) add(c *Conn) {
	h.conns = append(h.conns, c)
	h.byID[c.T.LocalID()] = c
	c.rearm()
}

// Dial opens a connection to peer. It sends its setup request as soon as a
// port polls it.
func (h *Host) Dial(peer *Host) (*Conn, error) {
	now := h.net.Loop.Now()
	c, cfg := h.newConn(peer)
	t, err := h.Proto.Dial(now, cfg)
	if err != nil {
		return nil, fmt.Errorf("transporttest: %s dialing %s: %w", h.Name, peer.Name, err)
	}
	c.T = t
	h.add(c)
	h.kick(now)
	return c, nil
}

// kick polls every idle port.
func (h *Host) kick(now sim.Time) {
	for q := range h.ports {
		if !h.ports[q].busy {
			h.poll(now, &h.ports[q])
		}
	}
}

// maxBurst bounds one poll on an infinitely fast link, so a transport that
// never stops producing cannot hang a test.
const maxBurst = 1 << 16

// poll asks the host's connections, round robin, for a packet for port p
// and sends it.
func (h *Host) poll(now sim.Time, p *hostPort) {
	n := h.net
	for burst := 0; burst < maxBurst && !p.busy; burst++ {
		if len(h.conns) == 0 {
			return
		}
		f := n.getFrame()
		sent := false
		for i := 0; i < len(h.conns); i++ {
			c := h.conns[(p.rr+i)%len(h.conns)]
			room := f.buf[ipUDPSize : ipUDPSize+n.cfg.PathMTU+transport.HeaderRoom]
			k, meta := c.T.Transmit(now, p.q, room)
			c.rearm()
			if k <= 0 {
				continue
			}
			p.rr = (p.rr + i + 1) % len(h.conns)
			f.from, f.to, f.src, f.port = h, c.Peer, c, p.q
			f.n = h.frame(f.buf, k, meta, c.Peer)
			ser := n.send(now, f, meta)
			if ser > 0 {
				p.busy = true
				n.Loop.Arm(&p.txDone, now+ser)
			}
			sent = true
			break
		}
		if !sent {
			n.putFrame(f)
			return
		}
	}
}

// frame writes the IPv4 and UDP headers in front of a k-byte payload and
// returns the packet length.
func (h *Host) frame(buf []byte, k int, meta transport.TxMeta, to *Host) int {
	total := ipUDPSize + k
	var tos uint8
	if meta.ECT {
		tos = header.ECNECT0
	}
	h.net.ipID++
	header.IPv4(buf).Encode(&header.IPv4Fields{
		TOS:         tos,
		TotalLength: uint16(total),
		ID:          h.net.ipID,
		Protocol:    header.IPv4ProtoUDP,
		Src:         h.Addr,
		Dst:         to.Addr,
	})
	header.UDP(buf[header.IPv4MinSize:]).Encode(meta.SrcPort, h.Proto.UDPPort(), k)
	if h.sealer != nil {
		h.sealer.Seal(buf[:total])
	}
	return total
}

// receive is the NIC's receive path: check the framing, demultiplex, and
// hand the payload to its connection (or accept a new one).
func (h *Host) receive(now sim.Time, f *frame) {
	ip := header.IPv4(f.buf[:f.n])
	if ip.Validate() != nil || ip.Protocol() != header.IPv4ProtoUDP {
		h.Stats.BadFrame++
		return
	}
	udp := header.UDP(ip.Payload())
	if !udp.Valid() || udp.DstPort() != h.Proto.UDPPort() {
		h.Stats.BadFrame++
		return
	}
	if h.sealer != nil && !h.sealer.Check(ip) {
		h.Stats.BadCheck++
		return
	}
	payload := udp.Payload()
	rx := transport.RxMeta{Port: f.port, SrcPort: udp.SrcPort(), CE: ip.ECN() == header.ECNCE}
	id, setup, err := h.Proto.Demux(payload)
	if err != nil {
		h.Stats.DemuxErrors++
		return
	}
	if setup {
		c, cfg := h.newConn(f.from)
		t, err := h.Proto.Accept(now, cfg, payload, rx)
		if err != nil {
			h.Stats.AcceptErrors++
			h.LastAcceptError = err
			return
		}
		c.T = t
		if f.src != nil && f.src.Remote == nil {
			c.Remote, f.src.Remote = f.src, c
		}
		h.add(c)
		h.Stats.Received++
		h.kick(now)
		return
	}
	c := h.byID[id]
	if c == nil {
		h.Stats.NoConn++
		return
	}
	h.Stats.Received++
	c.T.Receive(now, payload, rx)
	c.rearm()
	h.kick(now)
}

// Now returns the network's current time.
func (h *Host) Now() sim.Time { return h.net.Loop.Now() }

// Net returns the network the host is on.
func (h *Host) Net() *Net { return h.net }
