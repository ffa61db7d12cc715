package rocev2

import (
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

// This file is the QP side of connection management (cm.go has the wire
// format): REQ/REP/RTU to connect, DREQ/DREP to close, each retried every
// CMTimeout until answered.

// cmPacketLen is the length of a CM packet: BTH, message, ICRC.
const cmPacketLen = ib.BTHSize + CMSize + ib.ICRCSize

// acceptREQ sets up a passive QP from the REQ that opened it.
func (c *Conn) acceptREQ(now sim.Time, m CMMessage) {
	c.tid = m.TID()
	c.peerQPN = m.SenderQPN()
	c.mtu = min(c.mtu, m.MTU())
	c.req.maxReads = min(c.o.MaxReads, max(int(m.ReadDepth()), 1))
	c.resp.epsn = ib.PSN(m.StartPSN())
	c.cm.send, c.cm.waiting, c.cm.retries = CMRep, CMRep, c.o.CMRetries
	if c.tr != nil {
		c.tr.Tracef(now, c.localID, "qp %#x: REQ from qp %#x (psn %d, mtu %d), sending REP", c.qpn, c.peerQPN, m.StartPSN(), m.MTU())
	}
}

// buildCM writes the pending CM message into b.
func (c *Conn) buildCM(now sim.Time, b []byte) int {
	if len(b) < cmPacketLen {
		return 0
	}
	attr := c.cm.send
	c.cm.send = 0
	bth := ib.BTH(b)
	bth.Encode(&ib.BTHFields{Opcode: ib.OpSendOnly, PKey: ib.DefaultPKey, DestQP: cmQPN})
	f := CMFields{Attr: attr, TID: c.tid, SenderQPN: c.qpn, ReceiverQPN: c.peerQPN,
		StartPSN: uint32(c.req.startPSN), MTU: c.mtu, ReadDepth: uint8(c.o.MaxReads)}
	if attr == CMReq {
		f.Service = c.cfg.Service
	}
	CMMessage(b[ib.BTHSize:]).Encode(&f)
	clear(b[ib.BTHSize+CMSize : cmPacketLen])
	if attr == c.cm.waiting {
		c.cm.deadline = now + c.o.CMTimeout
	}
	c.stats.CMSent++
	return cmPacketLen
}

// cmTimeout resends the message we wait an answer to, or gives up.
func (c *Conn) cmTimeout(now sim.Time) {
	if c.cm.retries == 0 {
		attr := c.cm.waiting
		c.cm.waiting, c.cm.deadline = 0, sim.Never
		if c.tr != nil {
			c.tr.Tracef(now, c.localID, "qp %#x: CM %v unanswered after %d retries", c.qpn, attr, c.o.CMRetries)
		}
		if attr == CMReq || attr == CMRep {
			c.fail(now, transport.StatusRetryExceeded, "connection setup timed out")
		}
		return
	}
	c.cm.retries--
	c.cm.send = c.cm.waiting
	c.cm.deadline = sim.Never // re-armed when the retry is sent
	c.stats.CMRetries++
	if c.tr != nil {
		c.tr.Tracef(now, c.localID, "qp %#x: CM %v timeout, retrying", c.qpn, c.cm.waiting)
	}
}

// receiveCM handles a CM message addressed to this QP.
func (c *Conn) receiveCM(now sim.Time, pk *ib.Packet) {
	if pk.BTH.Opcode() != ib.OpSendOnly {
		c.stats.Malformed++
		return
	}
	m := CMMessage(pk.Payload)
	if m.Validate() != nil || m.TID() != c.tid {
		c.stats.Malformed++
		return
	}
	if a := m.Attr(); a != CMReq && m.ReceiverQPN() != c.qpn {
		c.stats.Malformed++
		return
	}
	switch m.Attr() {
	case CMReq:
		// Our REP was lost (or is late): answer again.
		if !c.active && c.state != transport.StateClosed && c.state != transport.StateError {
			c.cm.send = CMRep
		}
	case CMRep:
		if !c.active {
			c.stats.Malformed++
			return
		}
		switch c.state {
		case transport.StateConnecting:
			c.peerQPN = m.SenderQPN()
			c.mtu = min(c.mtu, m.MTU())
			c.req.maxReads = min(c.o.MaxReads, max(int(m.ReadDepth()), 1))
			c.resp.epsn = ib.PSN(m.StartPSN())
			c.cm.send = CMRTU
			c.establish(now, "REP received")
		case transport.StateEstablished:
			c.cm.send = CMRTU // our RTU was lost
		}
	case CMRTU:
		if !c.active && c.state == transport.StateConnecting {
			c.establish(now, "RTU received")
		}
	case CMDReq:
		if c.state != transport.StateClosed {
			c.state = transport.StateClosed
			c.stopTimers()
			c.req.flush(c, transport.StatusFlushed)
			c.resp.flush(c)
			c.p.forget(c)
			if c.tr != nil {
				c.tr.Tracef(now, c.localID, "qp %#x: closed by peer", c.qpn)
			}
		}
		c.cm.waiting, c.cm.deadline = 0, sim.Never
		c.cm.send = CMDRep
	case CMDRep:
		if c.cm.waiting == CMDReq {
			c.cm.waiting, c.cm.deadline = 0, sim.Never
		}
	}
}

// establish moves a connecting QP to Established.
func (c *Conn) establish(now sim.Time, why string) {
	c.state = transport.StateEstablished
	c.cm.waiting, c.cm.deadline = 0, sim.Never
	if c.tr != nil {
		c.tr.Tracef(now, c.localID, "qp %#x: established with qp %#x (%s), mtu %d, window %d pkts, src port %d",
			c.qpn, c.peerQPN, why, c.mtu, c.req.window, c.srcPort)
	}
}

// buildCNP writes a congestion notification packet: BTH with BECN set and
// 16 reserved bytes (RoCEv2 Annex A17.9.2).
func (c *Conn) buildCNP(b []byte) int {
	const n = ib.BTHSize + ib.CNPPadSize + ib.ICRCSize
	if len(b) < n {
		return 0
	}
	ib.BTH(b).Encode(&ib.BTHFields{Opcode: ib.OpCNP, PKey: ib.DefaultPKey, BECN: true, DestQP: c.peerQPN})
	clear(b[ib.BTHSize:n])
	return n
}
