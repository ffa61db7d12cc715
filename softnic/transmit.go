package softnic

// The NIC's transmit side: connections offered to ports when they have
// something to send, each port's scheduler (control packets first, then
// data round robin; the package doc says why), framing and the host's own
// IP packets.

import (
	"slices"

	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// afterIO runs after every interaction with a connection: re-arm its timer
// to its deadline, report a state change, and offer it every port.
func (n *NIC) afterIO(now sim.Time, c *Conn) {
	n.rearm(c)
	n.checkState(c)
	n.markReady(now, c)
	n.drainWoken(now)
}

// drainWoken runs afterIO for the connections woken (wake) during a call
// into a transport, in the order they were woken.
func (n *NIC) drainWoken(now sim.Time) {
	if n.waking {
		return // the outer drain takes them
	}
	n.waking = true
	for n.wokenAt < len(n.woken) { // afterIO may wake more
		w := n.woken[n.wokenAt]
		n.wokenAt++
		n.afterIO(now, w)
	}
	n.woken, n.wokenAt = n.woken[:0], 0
	n.waking = false
}

// wake queues c for afterIO once the current call into a transport
// returns (transport.Waker): the call may be c's own or another
// connection's, and running afterIO within it would let a port's pump
// call into a connection that is still inside a call.
func (n *NIC) wake(c *Conn) {
	// Scanned, not flagged on Conn (which stays in its size class:
	// TestConnSize): wakes are rare (revised grants) and the list short.
	if !slices.Contains(n.woken[n.wokenAt:], c) {
		n.woken = append(n.woken, c)
	}
}

func (n *NIC) rearm(c *Conn) {
	d := c.tc.Deadline()
	if d == sim.Never {
		if c.timer.Armed() {
			n.sched.Disarm(&c.timer)
		}
		return
	}
	if c.timer.When() != d {
		n.sched.Arm(&c.timer, d)
	}
}

func (n *NIC) checkState(c *Conn) {
	s := c.tc.State()
	if s != c.state {
		c.state = s
		if c.onState != nil {
			c.onState(c, s)
		}
	}
	if c.halfOpen {
		n.checkHalf(c)
	}
}

// markReady offers c every port and kicks the idle ones, starting with
// the port after the one its previous data packet left by. Whichever idle
// port is kicked first takes the packet, and a multipath connection's
// packet goes on that port's plane: kicked from port 0 every time, an
// idle NIC gave port 0 every packet a paced connection sent while its
// ports were free, loading the first planes (TestIdlePortsInTurn; spec
// §10 "Idle ports in turn").
func (n *NIC) markReady(now sim.Time, c *Conn) {
	for i := range n.ports {
		n.ports[i].ready.pushBack(c)
		if c.ctl != nil {
			n.ports[i].ctl.pushBack(c)
		}
	}
	k := len(n.ports)
	for i, j := 0, int(c.nextPort)%max(k, 1); i < k; i, j = i+1, j+1 {
		if j == k {
			j = 0
		}
		n.kickPort(now, &n.ports[j])
	}
}

func (n *NIC) kickPort(now sim.Time, pt *nicPort) {
	if pt.pumping || pt.w == nil || !pt.w.Idle() {
		return
	}
	n.pump(now, pt)
}

func (n *NIC) fireKick(now sim.Time, arg any) {
	n.kickPort(now, arg.(*nicPort))
	n.drainWoken(now)
}

func (n *NIC) fireConn(now sim.Time, arg any) {
	c := arg.(*Conn)
	c.tc.OnTimer(now)
	n.afterIO(now, c)
}

// pump sends on port pt while its wire is idle and something is waiting.
func (n *NIC) pump(now sim.Time, pt *nicPort) {
	if pt.pumping || pt.w == nil {
		return
	}
	n.checkPort(now, pt)
	pt.pumping = true
	for sent := 0; pt.w.Idle(); sent++ {
		if sent == maxBurst {
			n.sched.Arm(&pt.kick, now)
			break
		}
		if !n.sendOne(now, pt) {
			break
		}
	}
	pt.pumping = false
}

// sendOne sends one packet on pt: control packets first, then host
// packets and connections take turns; connections go round-robin. It
// returns false if nothing was waiting.
func (n *NIC) sendOne(now sim.Time, pt *nicPort) bool {
	if pt.ctl.n > 0 && n.sendFrom(now, pt, &pt.ctl) {
		return true
	}
	if pt.hN > 0 && (pt.hostTx || pt.ready.n == 0) {
		pt.hostTx = false
		n.sendHost(now, pt)
		return true
	}
	pt.hostTx = true
	if n.sendFrom(now, pt, &pt.ready) {
		return true
	}
	if pt.hN > 0 {
		n.sendHost(now, pt)
		return true
	}
	return false
}

// sendFrom sends the next packet of the connections on list l (pt's
// data or control list), round robin: a connection that sent goes to the
// back, one that had nothing leaves the list until its next event. It
// returns false if none had anything.
func (n *NIC) sendFrom(now sim.Time, pt *nicPort, l *readyList) bool {
	maxPayload := n.mtu + transport.HeaderRoom
	for c := l.popFront(); c != nil; c = l.popFront() {
		if !n.mayHave(c, pt, l) {
			// Nothing to ask for (transport.ControlPender,
			// TransmitPender): the refused offer without the ask. Its
			// deadline and state are as the last call into c left them
			// and the NIC re-armed and checked after it; only retiring
			// is left to do.
			n.retire(c)
			continue
		}
		b := n.pool.Get(IPv4UDPSize + maxPayload)
		b.SetLen(maxPayload)
		n.dmaTx, n.txLazy, n.txAsked = b, false, false
		var k int
		var meta transport.TxMeta
		if l == &pt.ctl {
			k, meta = c.ctl.TransmitControl(now, pt.idx, b.Data())
		} else {
			k, meta = c.tc.Transmit(now, pt.idx, b.Data())
		}
		n.dmaTx = nil
		if k <= 0 || k > maxPayload {
			if k > maxPayload {
				n.stats.TransmitOverruns++
			}
			b.Free()
			n.rearm(c)
			n.checkState(c)
			n.retire(c)
			continue
		}
		l.pushBack(c)
		if l == &pt.ready {
			c.nextPort = uint16((pt.idx + 1) % len(n.ports))
		}
		b = n.finishTx(b, k, c.proto.sealer == nil)
		n.frame(b, c, k, meta)
		c.stats.TxPackets++
		c.stats.TxBytes += uint64(k)
		c.stats.PortTxPackets[pt.idx]++
		n.transmit(now, pt, b)
		n.rearm(c)
		n.checkState(c)
		return true
	}
	return false
}

// mayHave reports whether c may have a packet for pt on list l: false
// only if its transport says it has none.
func (n *NIC) mayHave(c *Conn, pt *nicPort, l *readyList) bool {
	if c.pend == nil {
		return true
	}
	if l == &pt.ctl {
		return c.pend.ControlPending(pt.idx)
	}
	return c.pend.TransmitPending(pt.idx)
}

// frame prepends UDP and IPv4 headers to a k-byte transport payload.
func (n *NIC) frame(b *packet.Buffer, c *Conn, k int, meta transport.TxMeta) {
	header.UDP(b.Prepend(header.UDPSize)).Encode(meta.SrcPort, c.proto.port, k)
	f := header.IPv4Fields{
		TotalLength: uint16(IPv4UDPSize + k),
		ID:          n.ipID,
		Protocol:    header.IPv4ProtoUDP,
		Src:         n.addr,
		Dst:         c.peer,
	}
	n.ipID++
	if meta.ECT {
		f.TOS = header.ECNECT0
		n.stats.ECTSent++
	}
	header.IPv4(b.Prepend(header.IPv4MinSize)).Encode(&f)
	if c.proto.sealer != nil {
		c.proto.sealer.Seal(b.Data())
	}
}

func (n *NIC) transmit(now sim.Time, pt *nicPort, b *packet.Buffer) {
	l := uint64(b.Len())
	n.stats.TxPackets++
	n.stats.TxBytes += l
	pt.stats.TxPackets++
	pt.stats.TxBytes += l
	pt.w.Send(now, b)
}

func (n *NIC) sendHost(now sim.Time, pt *nicPort) {
	b := pt.host[pt.hHead]
	pt.host[pt.hHead] = nil
	pt.hHead++
	if pt.hHead == len(pt.host) {
		pt.hHead = 0
	}
	pt.hN--
	n.hostN--
	n.stats.HostTxPackets++
	n.transmit(now, pt, b)
}

// growHost doubles the port's host queue (to at most limit), keeping its
// packets in order: the queue is made on the first host packet and grows
// with need, so a simulated NIC whose host sends nothing holds no queue
// (256 pointers a port was 288 KB at 128 hosts).
func (pt *nicPort) growHost(limit int) {
	q := make([]*packet.Buffer, min(max(2*len(pt.host), 8), limit))
	for i := range pt.hN {
		j := pt.hHead + i
		if j >= len(pt.host) {
			j -= len(pt.host)
		}
		q[i] = pt.host[j]
	}
	pt.host, pt.hHead = q, 0
}

// SendIP sends a packet from the host (a kernel packet read from the TUN
// device): a complete IPv4 packet. The NIC takes ownership of b, picks the
// plane by a hash of the flow's 5-tuple (so one flow stays on one plane and
// in order) among ports that are up, and queues it behind the port's other
// host packets: at most Config.HostQueue a port, or all ports together with
// Config.SharedHostQueue. Bad packets, packets whose source address is not
// the NIC's (spoofed) and full queues are counted drops.
func (n *NIC) SendIP(now sim.Time, b *packet.Buffer) {
	ip := header.IPv4(b.Data())
	if ip.Validate() != nil {
		n.drop(DropMalformed, b)
		return
	}
	if ip.SrcU32() != n.addrU32 {
		n.drop(DropSpoofed, b)
		return
	}
	src, dst, proto, sp, dp := header.FiveTuple(ip)
	h := uint64(src)<<32 | uint64(dst)
	h ^= uint64(proto)<<40 | uint64(sp)<<16 | uint64(dp)
	h = mix64(h ^ n.seed)
	np := len(n.ports)
	start := int(h % uint64(np))
	var pt *nicPort
	for i := 0; i < np; i++ {
		c := &n.ports[(start+i)%np]
		if c.w != nil && (c.up == nil || c.up.Up()) {
			pt = c
			break
		}
	}
	if pt == nil {
		n.drop(DropPortDown, b)
		return
	}
	if n.hostAll && n.hostN >= n.hostQ {
		n.drop(DropHostQueue, b)
		return
	}
	if pt.hN == len(pt.host) {
		if len(pt.host) >= n.hostQ {
			n.drop(DropHostQueue, b)
			return
		}
		pt.growHost(n.hostQ)
	}
	i := pt.hHead + pt.hN
	if i >= len(pt.host) {
		i -= len(pt.host)
	}
	pt.host[i] = b
	pt.hN++
	n.hostN++
	n.kickPort(now, pt)
}
