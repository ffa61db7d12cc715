package metaroce

import (
	"math"
	"math/bits"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// ACK generation. One ACK answers data that arrived on any number of the
// peer's paths: its fixed part describes one path (the latest to receive
// data on the port the ACK leaves by, whose entropy the ACK reuses so that
// the path's reverse route moves with it) and records describe the rest.
// Each arrival makes its path owed to the next ackRedundancy ACKs (one
// loss-free, two or more under measured loss), so lost ACKs lose no path's state; records are cumulative (cum, SACK, CE
// and received counts), so no congestion signal is lost either.
//
// An ACK is sent once AckEvery data packets have arrived since the last
// one, or AckDelay after the first of them, and at once on a hole, a hole
// filled, a duplicate, a probe or ACKREQ, a message completely placed, or
// a move of the sender's share by more than a tenth.
//
// Under measured loss (ackRedundancy above two) an ACK whose paths are
// still owed is followed, one full packet's serialization at the line
// rate later, by one extra copy (if nothing made an ACK due sooner) that
// settles nothing owed: lost ACKs are then not rare, the sender's loss
// detection across paths waits for the state a lost ACK carried, and a
// sparse stream's later arrivals, whose ACKs carry the owed copies, may
// be far apart (16 streams of 4 KiB messages, 16 outstanding, 10% loss
// per link: 0.495 -> 0.514 of loss-free goodput, seeds 1-15 median).
// The owed copies still ride on later arrivals' ACKs, spread in time, so
// a burst of loss that takes the quick copy leaves them. Tried and not
// kept: the owed copies themselves a packet time apart (0.521, but under
// bursty loss all of them fell in one burst: TestAckLossNotResent 0.55%
// -> 2.28% of arrivals resent; doubling the spacing per copy did not
// help); copies on a timer loss-free too, at AckDelay
// (TestManyConnsFewMoves 1.56% -> 0.38% resent, but the plane-failure
// claim's seed 1 0.903 -> 0.893 of the surviving capacity, under its
// 0.9, though the mean of seeds 1-12 was 0.961 both ways).

// ackRedundancy is how many ACKs carry a path's state after each of its
// arrivals: as many as it takes for all of them to be lost by chance with
// probability below 1e-3 at the loss rate the receiver measures (the
// chance rule, doc.go; an ACK crosses as many links as the data it
// answers, so it is lost about as often), at most maxAckRedundancy. One
// while the measured loss is below 1e-3 (a loss-free fabric): a second
// copy of every record there only takes wire from the data (a ring
// all-reduce's ACKs share each host's uplink with its next step's data:
// about 15 ACKs of 200-240 bytes per 256 KiB step with two copies). A path whose state no ACK
// delivered looks, to the sender's loss detection across paths, like a
// path whose packets were lost: at 47% loss end to end (six links at
// 10%) two ACKs were both lost for one arrival in five, and each such
// arrival was sent again (regimes 10%: 95.2% of the loss ceiling, worst
// cell 88.4%, seeds 1-5; 97.1% and 92.1% with the rule).
func (c *Conn) ackRedundancy() uint8 {
	q := float64(c.r.lossQ) / 65536
	k, all := uint8(1), q
	for all >= 1e-3 && k < maxAckRedundancy {
		k++
		all *= q
	}
	return k
}

// maxAckRedundancy bounds ackRedundancy (the chance rule's count at 50%
// loss).
const maxAckRedundancy = 10

// noteArrival updates the receiver's loss estimate with a data packet
// that arrived: the fraction of arrivals that are retransmissions (each
// one's first transmission was lost, or taken for lost), averaged over
// about 64 arrivals, in units of 1/65536.
func (c *Conn) noteArrival(retx bool) {
	if retx {
		c.r.lossQ += (math.MaxUint16 - c.r.lossQ) >> 6
	} else {
		c.r.lossQ -= c.r.lossQ >> 6
	}
}

// rcvPath is the receiving side's view of one of the peer's paths.
type rcvPath struct {
	seen    bool
	gen     uint8
	owed    uint8 // ACKs that must still carry this path's state
	ece     bool  // a CE mark arrived since the path's last record
	sack    sack
	ce, rx  uint16   // cumulative CE-marked and received packets, this gen
	echoTS  uint32   // ts of the latest packet, echoed in the next ACK
	arrived sim.Time // when that packet arrived (echo_ts advances by the wait)
	port    int      // where the path's packets arrive
	sport   uint16   // the path's entropy: ACKs that lead with it use it too
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

// nakFor returns the index of the first queued NAK for port, or -1.
func (c *Conn) nakFor(port int) int {
	for i := range c.r.naks {
		if c.r.naks[i].port == port {
			return i
		}
	}
	return -1
}

// transmitNak sends the first queued NAK for port.
func (c *Conn) transmitNak(port int, b []byte) (int, transport.TxMeta) {
	i := c.nakFor(port)
	if i < 0 {
		return 0, transport.TxMeta{}
	}
	k := c.r.naks[i]
	c.r.naks = append(c.r.naks[:i], c.r.naks[i+1:]...)
	f := wire.NakFields{
		Common: wire.Common{Type: wire.TypeNak, Path: k.path, Gen: k.gen, DstConn: c.peer, PSN: k.psn, TS: c.ts()},
		Reason: k.reason, Stream: k.stream, MSN: k.msn, DSN: k.dsn, EchoTS: k.echo,
	}
	wire.Nak(b).Put(&f)
	c.st.naksSent++
	n := wire.Seal(b, wire.NakSize)
	if k.reason == wire.NakAccess {
		// A remote access error is fatal to the responder's end, as
		// to an RC QP's: the NAK goes out, then the connection errs
		// (its own requests flushed, the peer told by CLOSE), so a
		// peer guessing keys pays a handshake per guess.
		c.fail(transport.StatusFlushed, 0, false)
	}
	return n, transport.TxMeta{SrcPort: k.sport}
}

// owe makes the next ACKs carry path pid's state.
func (c *Conn) owe(pid int) {
	rp := c.r.paths[pid]
	rp.owed = c.ackRedundancy()
	c.r.dirty[pid/64] |= 1 << (pid % 64)
	if rp.port >= 0 && rp.port < len(c.r.lastOn) {
		c.r.lastOn[rp.port] = int16(pid)
	}
}

// ackNow makes an ACK due at once.
func (c *Conn) ackNow() {
	c.r.ackDue = true
	c.timers.Disarm(&c.ackTimer)
}

// ackCount counts a data packet toward the next ACK: due after AckEvery
// of them, or AckDelay after the first.
func (c *Conn) ackCount() {
	if c.r.pending++; c.r.pending >= c.opts.AckEvery {
		c.ackNow()
	} else if !c.ackTimer.Armed() && !c.r.ackDue {
		c.timers.Arm(&c.ackTimer, c.now+c.ackDelay)
	}
}

// onAckTimer makes the held-back ACK due.
func (c *Conn) onAckTimer() {
	if c.r.pending == 0 && !c.r.ackDue {
		c.r.pending = -1 // no arrival held: the timer is the quick copy's (encodeAck)
	}
	c.r.ackDue = true
}

// transmitAck sends the due ACK if a path it owes arrived on port.
func (c *Conn) transmitAck(port int, b []byte) (int, transport.TxMeta) {
	lead := c.ackLead(port)
	if lead < 0 {
		return 0, transport.TxMeta{} // none due, or it leaves by another port
	}
	n := c.encodeAck(b, lead)
	return n, transport.TxMeta{SrcPort: c.r.paths[lead].sport}
}

// ackLead returns the path that leads the ACK due on port (the latest to
// receive on port if it is owed, else the lowest owed path whose packets
// arrive on port), or -1 if no ACK is due or none leaves by port. It
// changes nothing.
func (c *Conn) ackLead(port int) int {
	if !c.r.ackDue {
		return -1
	}
	if pid := int(c.r.lastOn[port]); pid >= 0 && c.r.dirty[pid/64]&(1<<(pid%64)) != 0 {
		return pid
	}
	for w, word := range c.r.dirty {
		for word != 0 {
			i := bits.TrailingZeros64(word)
			word &^= 1 << i
			if c.r.paths[64*w+i].port == port {
				return 64*w + i
			}
		}
	}
	return -1
}

// pathAck returns path pid's state for an ACK and settles what it owes
// (nothing for the quick extra copy).
func (c *Conn) pathAck(pid int, extra bool) wire.PathAck {
	rp := c.r.paths[pid]
	a := wire.PathAck{Path: uint8(pid), Gen: rp.gen, ECE: rp.ece, Cum: rp.sack.cum,
		EchoTS: rp.echoTS + uint32(c.now-rp.arrived), CECount: rp.ce, RxCount: rp.rx, SACK: rp.sack.bits}
	c.mutateAck(&a)
	rp.ece = false
	if rp.owed > 0 && !extra {
		rp.owed--
	}
	if rp.owed == 0 {
		c.r.dirty[pid/64] &^= 1 << (pid % 64)
	}
	return a
}

// encodeAck writes an ACK led by path lead, with a record for every other
// path it owes that fits in b.
func (c *Conn) encodeAck(b []byte, lead int) int {
	extra := c.r.pending < 0 // the quick copy on the timer: it settles nothing owed
	first := c.pathAck(lead, extra)
	f := wire.AckFields{
		Common:   wire.Common{Type: wire.TypeAck, Path: first.Path, Gen: first.Gen, DstConn: c.peer, PSN: first.Cum, TS: c.ts()},
		EchoTS:   first.EchoTS,
		CECount:  first.CECount,
		RxCount:  first.RxCount,
		RateHint: c.hintKBs(),
		SACK:     first.SACK,
	}
	if first.ECE {
		f.Flags |= wire.FlagECE
	}
	if c.slot >= 0 && !c.opts.DisableRateHint && c.proto.alloc.busy {
		f.Flags |= wire.FlagBusy
	}
	off, recs, full := wire.AckSize, 0, false
	for w := range c.r.dirty {
		word := c.r.dirty[w]
		for word != 0 {
			i := bits.TrailingZeros64(word)
			word &^= 1 << i
			pid := 64*w + i
			if pid == lead {
				continue
			}
			size := wire.AckRecordSize
			if c.r.paths[pid].sack.bits != ([wire.SACKWords]uint64{}) {
				size = wire.AckRecordSACKSize
			}
			if recs == wire.MaxAckRecords || off+size+wire.TrailerSize > len(b) {
				full = true
				break
			}
			r := c.pathAck(pid, extra)
			off = wire.PutRecord(b, off, &r)
			recs++
		}
	}
	f.Records = recs
	wire.Ack(b).Put(&f)
	c.r.lastHint = f.RateHint
	c.r.pending = 0
	c.r.ackDue = full // what did not fit goes in the next ACK, at once
	c.timers.Disarm(&c.ackTimer)
	if !full && !extra && c.ackRedundancy() > 2 && c.owesAny() && !c.mutated(MutNoAckSpacing) {
		c.timers.Arm(&c.ackTimer, c.now+c.granularity())
	}
	c.st.acksSent++
	return wire.Seal(b, off)
}

// owesAny reports whether some path's state is owed to a later ACK.
func (c *Conn) owesAny() bool {
	for _, w := range c.r.dirty {
		if w != 0 {
			return true
		}
	}
	return false
}

// hintKBs is the peer's fair share of this NIC, in kB/s, for an ACK.
func (c *Conn) hintKBs() uint32 {
	if c.opts.DisableRateHint || c.slot < 0 {
		return wire.NoRateHint
	}
	s := c.proto.alloc.share(c.slot, c.now) / 1000
	return uint32(max(1, min(s, wire.NoRateHint-1)))
}
