package metaroce

import (
	"math/bits"

	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// rcvPath is the receiving side's view of one of the peer's paths.
type rcvPath struct {
	seen    bool
	gen     uint8
	sack    sack
	ce, rx  uint16 // cumulative CE-marked and received packets, this gen
	pending int    // packets since the last ACK
	ece     bool   // a CE mark arrived since the last ACK
	echoTS  uint32 // ts of the latest packet, echoed in the next ACK
	port    int    // where the path's packets arrive: its ACKs go back there
	sport   uint16 // the path's entropy: its ACKs use it too
}

// reset starts a new generation of the path.
func (r *rcvPath) reset(gen uint8) {
	*r = rcvPath{seen: true, gen: gen, port: r.port, sport: r.sport}
}

type nakItem struct {
	path, gen uint8
	reason    wire.NakReason
	stream    uint16
	port      int
	sport     uint16
	psn       uint32
	msn       uint32
	dsn       uint32
	echo      uint32
}

// maxNaks bounds the NAK queue; a NAK that does not fit is dropped, and the
// sender's retransmission brings it back.
const maxNaks = 64

// queueNak queues a NAK for a refused packet.
func (c *Conn) queueNak(d wire.Data, pid int, reason wire.NakReason, rx transport.RxMeta) {
	if len(c.r.naks) >= maxNaks {
		c.st.naksDropped++
		return
	}
	c.r.naks = append(c.r.naks, nakItem{path: uint8(pid), gen: d.Gen(), reason: reason, stream: d.Stream(),
		port: rx.Port, sport: rx.SrcPort, psn: d.PSN(), msn: d.MSN(), dsn: d.DSN(), echo: d.TS()})
}

// transmitNak sends the first queued NAK for port.
func (c *Conn) transmitNak(port int, b []byte) (int, transport.TxMeta) {
	for i := range c.r.naks {
		k := c.r.naks[i]
		if k.port != port {
			continue
		}
		c.r.naks = append(c.r.naks[:i], c.r.naks[i+1:]...)
		f := wire.NakFields{
			Common: wire.Common{Type: wire.TypeNak, Path: k.path, Gen: k.gen, DstConn: c.peer, PSN: k.psn, TS: c.ts()},
			Reason: k.reason, Stream: k.stream, MSN: k.msn, DSN: k.dsn, EchoTS: k.echo,
		}
		wire.Nak(b).Put(&f)
		c.st.naksSent++
		return wire.Seal(b, wire.NakSize), transport.TxMeta{SrcPort: k.sport}
	}
	return 0, transport.TxMeta{}
}

// ackNow makes path pid's ACK due.
func (c *Conn) ackNow(pid int) {
	c.r.due[pid/64] |= 1 << (pid % 64)
	c.r.delayed[pid/64] &^= 1 << (pid % 64)
}

// ackLater holds path pid's ACK for at most DelayedAck.
func (c *Conn) ackLater(pid int) {
	if c.r.due[pid/64]&(1<<(pid%64)) != 0 {
		return
	}
	c.r.delayed[pid/64] |= 1 << (pid % 64)
	if !c.ackTimer.Armed() {
		c.timers.Arm(&c.ackTimer, c.now+c.opts.DelayedAck)
	}
}

// onAckTimer makes every delayed ACK due.
func (c *Conn) onAckTimer() {
	for w := range c.r.delayed {
		c.r.due[w] |= c.r.delayed[w]
		c.r.delayed[w] = 0
	}
}

// transmitAck sends the ACK of a due path whose packets arrive on port.
func (c *Conn) transmitAck(port int, b []byte) (int, transport.TxMeta) {
	for w, word := range c.r.due {
		for word != 0 {
			i := bits.TrailingZeros64(word)
			word &^= 1 << i
			pid := 64*w + i
			rp := &c.r.paths[pid]
			if rp.port != port {
				continue
			}
			c.r.due[w] &^= 1 << i
			return c.encodeAck(b, pid, rp), transport.TxMeta{SrcPort: rp.sport}
		}
	}
	return 0, transport.TxMeta{}
}

func (c *Conn) encodeAck(b []byte, pid int, rp *rcvPath) int {
	f := wire.AckFields{
		Common:   wire.Common{Type: wire.TypeAck, Path: uint8(pid), Gen: rp.gen, DstConn: c.peer, PSN: rp.sack.cum, TS: c.ts()},
		EchoTS:   rp.echoTS,
		CECount:  rp.ce,
		RxCount:  rp.rx,
		RateHint: c.hintKBs(),
		SACK:     rp.sack.bits,
	}
	c.r.lastHint = f.RateHint
	if rp.ece {
		f.Flags |= wire.FlagECE
	}
	rp.pending, rp.ece = 0, false
	wire.Ack(b).Put(&f)
	c.st.acksSent++
	return wire.Seal(b, wire.AckSize)
}

// hintKBs is the peer's fair share of this NIC, in kB/s, for an ACK.
func (c *Conn) hintKBs() uint32 {
	if c.opts.DisableRateHint || c.slot < 0 {
		return wire.NoRateHint
	}
	s := c.proto.alloc.share(c.slot, c.now) / 1000
	return uint32(max(1, min(s, wire.NoRateHint-1)))
}
