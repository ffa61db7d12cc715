package metaroce

import (
	"math"
	"math/bits"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// Congestion control: one controller per connection, spread over its
// paths. ECN is the congestion signal; loss is repaired, never a signal;
// RTT sizes windows and timers.
//
// The connection has one pacing rate R and one window W, the bytes it may
// have in flight on all its paths together:
//
//	R = min(line rate, hint, L) x m
//	W = 5/4 x R x baseRTT / (1 - loss) + 2 MSS   (one packet before the first ACK)
//
// hint is the receiver's fair share for this sender (none: the line
// rate); L the level of the NIC's sending budget, which keeps its
// connections' rates together within its capacity (sendshare.go); baseRTT the minimum RTT measured plus the peer's largest ACK
// delay; loss the connection's measured loss rate, at most 0.5 here (lost
// packets do not occupy the receiver, but hold their place in W until
// their loss is seen). The pacer keeps the rate; the window bounds what a
// sender has out when its ACKs are late: a quarter of a BDP above the
// base BDP, and two packets for ACK coalescing and the pacer's grain, so
// it does not bind while queues are short, and a queue that builds behind
// paced senders stops growing at about a quarter of their BDP. m in
// (0, 1] is DCTCP's window in rate form, over the connection's packets on
// all paths: alpha <- (1-g) alpha + g F once per
// round (a smoothed RTT), F the round's CE-marked fraction; an ACK
// reporting marks multiplies m by (1 - alpha/2), at most once per round,
// unless the receiver says its own link is busy and it answers the marks
// itself by lowering every sender's hint alike (ratehint.go);
// while ACKs bring no marks m grows back by 1/16 per round (of time:
// a sender whose share is a fraction of a packet per round trip recovers
// as fast as one with a hundred). So marks from a queue anywhere on the
// paths slow the sender, a shared queue settles around the switches'
// marking threshold, and every sender through it sees the same signal and
// moves the same way. A new data packet goes out only if it
// fits W, or nothing is in flight; packets without payload are neither
// windowed nor paced.
//
// Each path's share of W is its weight 1 - alpha_p (at least 1/16) over
// the sum of the usable paths' weights, alpha_p the EWMA (gain g per
// packet) of the marked fraction of the path's packets: a congestion mark
// trims the path that saw it and steers the next packets to paths that
// are clear, while a queue every path crosses (the receiver's link) marks
// all alike and leaves the shares even. The shares are whole packets
// (shares.go): the first flight's sum to it; afterwards each is rounded
// down, so total in flight is at most W whatever the number of paths.
//
// The receiver side is the fair-share hint in every ACK (ratehint.go).
// Before the receiver's first ACK a connection has one packet in flight,
// and the receiver counts a newly accepted connection as an active sender
// from the start, so the first hints of an N-to-1 incast are already C/N
// and its first flight is N packets.

// ipUDPOverhead is what IPv4 and UDP add below a MetaRoCE packet; the
// NIC's link layer framing is not the transport's to count.
const ipUDPOverhead = 20 + 8

// dataOverhead is what a full data packet adds to its payload on the
// wire (IPv4 bytes).
const dataOverhead = wire.DataSize + wire.TrailerSize + ipUDPOverhead

// minMult is the least m: a sender keeps sending (at least one packet in
// flight, paced) however often it is marked.
const minMult = 1.0 / 1024

// aiPerRound is how much m grows per round (smoothed RTT) without marks;
// the receiver's link control grows the fraction it hands out by as much
// per period.
const aiPerRound = 1.0 / 16

// alpha0 is the sender's alpha before its first round ends. DCTCP starts
// at 1 (RFC 8257) so that a window that began as a guess halves on the
// first mark; this rate begins at the receiver's fair share, so the first
// mark (a short flow's transient, another flow's burst) trims it by an
// eighth, and persistent marks raise alpha round by round.
const alpha0 = 1.0 / 4

// minWeight is the least weight a path keeps in the window however
// heavily it is marked: its share keeps measuring it.
const minWeight = 1.0 / 16

// baseRTT is the round trip the window is sized over: the minimum RTT
// measured plus the peer's ACK delay. Before any data sample it is the
// handshake's RTT with the timers' allowance for serialization.
func (c *Conn) baseRTT() sim.Time {
	if c.s.dataRTT {
		return c.s.minRTT + c.peerAckDelay
	}
	rtt := c.s.srtt
	if rtt == 0 {
		rtt = c.opts.SetupTimeout
	}
	return rtt + initialSerializations*c.granularity() + c.peerAckDelay
}

// lossRate is the fraction of the packets the connection recently sent
// under PSNs (data, fillers, probes) that its paths' SACKs reported lost
// (a path that timed out is a dead route, not loss on the routes that
// work, and is not counted).
func (c *Conn) lossRate() float64 { return c.s.lossLost / max(c.s.lossSent, 1) }

// lossHalfLife is how many packets the connection's loss rate averages
// over (roughly).
const lossHalfLife = 4096

// refRate is the rate the connection may use without marks: its line
// rate, or the receiver's hint when that is lower, scaled down when the
// NIC's connections' hints add up to more than its capacity
// (sendshare.go).
func (c *Conn) refRate() float64 {
	if c.s.hint > 0 {
		return min(c.lineBytes, c.s.hint) * c.sendScale()
	}
	return c.lineBytes
}

// window is W: the bytes the connection may have in flight.
func (c *Conn) window() int {
	if !c.s.heard && !c.opts.DisableRateHint {
		// Before the receiver has answered at all, one packet: it probes
		// for the receiver's share. An N-to-1 incast whose senders each
		// sent a BDP first filled the receiver's queue N times over. A
		// dialer whose SYN_ACK offered a first share (first_share) sends
		// one first-ACK round trip of that rate instead, if it starts in
		// time (firstFlight): the acceptor's grants add up to at most its
		// capacity, so N dialers' first flights add up to one BDP, and it
		// is over when the first ACK brings the hint of N.
		return max(c.mss, c.firstFlight())
	}
	return c.s.window(c.paceRate(), c.baseRTT(), c.lossRate(), c.mss) + int(min(c.ctl.firstCredit, int32(c.s.inflight)))
}

// firstFlight is the window before the first ACK of a dialer whose
// SYN_ACK offered a first share: that rate (the hint until an ACK brings
// one) over the first ACK's round trip (firstFlightRTT, setup.go), if the
// first data went within two
// of them after the SYN_ACK (the acceptor holds the grant against its
// capacity for four after our EST arrives, and the grant ends when that
// first packet arrives; later data waits for the first ACK's hint with
// one packet). Judged when the first packet went, not now: a flight that
// starts late in the two RTTs outlasts them, and stopped there (a ring
// all-reduce's first step, 6 ns before the lapse, sent one packet per
// plane and waited a round trip); 0 otherwise. With HoldFirstGrant the
// acceptor holds the grant until that data arrives, and the flight goes
// whenever it does: the grants still add up to at most the capacity, but
// a late flight lands on top of the shares handed out meanwhile.
func (c *Conn) firstFlight() int {
	if !c.dialer || c.s.hint == 0 {
		return 0
	}
	if !c.opts.HoldFirstGrant && c.firstFlightLate() {
		return 0
	}
	return min(int(c.s.hint*c.firstFlightRTT().Seconds()), c.pathCount()*maxPathWindow/2*c.mss)
}

// flightLeft takes n bytes that left flight (acknowledged, declared lost,
// moved off a path, presumed gone) off the first-flight credit: the
// credit is the first flight's bytes still in flight, so a flight whose
// losses leave flight does not keep the window open (W + credit over
// bytes no longer outstanding let the window stop binding: a granted
// incast sender's 1.9 MB of credit outlived its flight by 12 RTTs).
func (c *Conn) flightLeft(n int) {
	c.ctl.firstCredit -= int32(min(n, int(c.ctl.firstCredit)))
}

// canSend reports whether a new data packet of size payload bytes fits the
// window.
func (c *Conn) canSend(size int) bool {
	return size == 0 || c.s.inflight == 0 || c.s.inflight+size <= c.window()
}

// ccOnRecord runs congestion control for one ACK record of p that newly
// acknowledged pkts packets (bytes of payload) and reported dce new CE
// marks among drx newly received packets: the path's mark EWMA and share
// here, the connection's m and alpha in the controller.
func (c *Conn) ccOnRecord(p *sndPath, pkts, bytes, drx, dce int) {
	s := &c.s
	c.flightLeft(bytes)
	if drx > 0 {
		p.alpha.add(c.opts.ECNGain, drx, dce)
		if q := quantWeight(p); q != p.wq {
			p.wq = q
			s.sharesDirty = true // a weight: which paths are spare has not changed
		}
		p.roundPkts += drx
		p.roundCE += dce
		p.st.acked += uint64(drx)
		p.st.ceAcked += uint64(dce)
	}
	if dce > 0 {
		c.st.ceEchoes++
	}
	a := ccSample{acked: pkts, rx: drx, ce: dce, srtt: s.srtt, latest: s.latest(), peerBusy: s.peerBusy}
	if k, cut := s.onAck(c.now, a, c.opts.ECNGain); cut && c.cfg.Trace != nil {
		c.tracef("path %d: ECE, rate x %.3f -> %.3f (alpha %.3f)", p.id, k.from, k.to, k.alpha)
	}
	if pkts > 0 && !wire.Seq(p.sb.una).Before(wire.Seq(p.roundEnd)) {
		c.endPathRound(p)
	}
}

// quantWeight is p's weight in sixteenths, the grain at which shares are
// recomputed.
func quantWeight(p *sndPath) uint8 {
	return p.alpha.weight()
}

// endPathRound closes a path's round (its packets sent since the last
// round end are acknowledged) and watches for a path that stays heavily
// marked while most others do not: a hot link, which it drains off.
func (c *Conn) endPathRound(p *sndPath) {
	if p.roundPkts > 0 {
		f := float64(p.roundCE) / float64(p.roundPkts)
		if f > c.opts.RepathMarkFraction {
			p.markRounds++
		} else {
			p.markRounds = 0
		}
		p.heavy = p.markRounds > 0
		if int(p.markRounds) >= c.opts.RepathMarkRounds && p.state == PathActive && c.fewHeavy() {
			p.state = PathDraining
			p.markRounds = 0
			c.s.pathsChanged()
			if c.cfg.Trace != nil {
				c.tracef("path %d: marked heavily for %d rounds, draining to move", p.id, c.opts.RepathMarkRounds)
			}
		}
	}
	p.roundPkts, p.roundCE = 0, 0
	p.roundEnd = p.sb.nxt
}

// fewHeavy reports whether fewer than half of the active paths are heavily
// marked: then marking is a hot link, not the receiver's own congestion,
// and moving helps.
func (c *Conn) fewHeavy() bool {
	heavy, active := 0, 0
	for i := range c.s.paths {
		q := &c.s.paths[i]
		if q.state == PathActive {
			active++
			if q.heavy {
				heavy++
			}
		}
	}
	return 2*heavy < active
}

// noteHint takes the receiver's fair-share hint from an ACK.
func (c *Conn) noteHint(h uint32) {
	first := !c.s.heard
	if !c.s.heard && c.firstFlight() > 0 {
		c.ctl.firstCredit = int32(min(c.s.inflight, math.MaxInt32))
	}
	if !c.s.heard {
		c.s.sharesDirty = true // the parts are rounded down from now on (shares.go)
	}
	c.s.heard = true
	var hint float64
	if h != wire.NoRateHint && !c.opts.DisableRateHint && !c.mutated(MutIgnoreRateHint) {
		hint = float64(h) * 1000
	}
	if c.cfg.Trace != nil && (hint > c.s.hint*1.1 || hint < c.s.hint*0.9) {
		c.tracef("rate hint %.3f Gb/s -> %.3f Gb/s", c.s.hint*8/1e9, hint*8/1e9)
	}
	if hint == 0 || c.s.hint == 0 || first && c.opts.ReviseFirstGrant {
		// With revised grants (ReviseFirstGrant) the first ACK releases
		// the pacer: the gap before it was the first share's, a grant for
		// one round trip. A late flight's lone packet paced at a 63-to-1
		// incast's revised share of C/63 (one packet per ~20 us at 100G)
		// held each sender past its first ACK, and the senders resumed
		// together for the rest of the run: marks every period, wide
		// settle never, 0.91 of the link (TestClaimIncast63Settles);
		// released, wide settle 0 RTTs and 0.999 of the link.
		c.s.pacer.release(c.now)
	} else {
		c.s.pacer.speedUp(c.now, c.s.hint, hint) // more room: the rest of the gap shrinks
	}
	c.s.hint = hint
	c.noteBacklog(false)
}

// paceRate is R, in bytes per second.
func (c *Conn) paceRate() float64 { return c.s.rate(c.refRate()) }

// pace accounts a packet of n bytes sent now at R (pacer.go).
func (c *Conn) pace(n int) {
	first := c.ctl.flight == flightNone
	if first {
		c.ctl.flight = flightInTime
		if c.flightLate() {
			c.ctl.flight = flightLate
		}
	}
	c.s.pacer.sent(c.now, n, c.paceRate(), c.lineBytes)
	if first && c.opts.ReviseFirstGrant && c.s.pacer.next > c.now {
		// With revised grants every dialer of an acceptor holds the
		// same share when data starts, and senders paced alike from the
		// same instant keep the same phase: their packets reach the
		// receiver together every interval (64-host all-to-all at 100G:
		// 2,065 marks against 2, 0.81x lossless RoCEv2 against 0.91x).
		// The first interval is stretched by a random fraction of
		// itself, once: 36 marks, 0.93x. The fraction comes from the
		// connection's nonce (random, chosen by the dialer), not a new
		// draw, which would move every later entropy choice.
		frac := float64(c.nonce>>11) / (1 << 53)
		c.s.pacer.next += sim.Time(frac * float64(c.s.pacer.next-c.now))
	}
}

// The first flight's start (ctlState.flight).
const (
	flightNone   = iota // no data packet has gone yet
	flightInTime        // the first went within two handshake RTTs of the SYN_ACK
	flightLate          // it went later
)

// flightLate reports whether a first data packet going now is late for
// the first flight: more than two handshake RTTs after the SYN_ACK.
func (c *Conn) flightLate() bool { return c.now > c.ctl.echoAt+2*c.s.srtt }

// firstFlightLate reports whether the first flight is late: its first
// packet went late, or none has gone and one going now would be.
func (c *Conn) firstFlightLate() bool {
	return c.ctl.flight == flightLate || (c.ctl.flight == flightNone && c.flightLate())
}

// demandKBs is the rate the sender asks of the receiver, in kB/s: what it
// has queued (new data and the packets declared lost or moved that wait
// to be sent again: resendBacklog) and in flight, plus the size-byte
// packet being sent, over one base RTT, and at least one MSS per base
// RTT and 1 kB/s; at most its line rate. Lost packets count: taking them
// out of flight must not make a sender that still has them to send look
// application-limited to the receiver's water-filling (a first flight's
// losses, resent at the share of N, kept the hint a third below it).
//
// With nothing queued (the packet is the last the sender has to send:
// the packets in flight went before it) the demand is 0, which says so:
// the receiver stops counting the sender at once (allocator.observe)
// and its ACK offers what one more sender would get, the share the
// sender's next message starts at. Asking on for what is in flight kept
// a sender done with its last message active at the receiver for its
// whole activity window, four packet intervals at its share, however
// idle the receiver's link (plane-scaling, one plane, 250 connections
// per receiver: the last senders stayed paced at C/250 for 340 us).
func (c *Conn) demandKBs(size int) uint32 {
	backlog := c.s.unsent + c.resendBacklog()
	if backlog == 0 {
		return 0
	}
	rtt := c.baseRTT()
	want := max(backlog+int64(c.s.inflight)+int64(size), int64(c.mss))
	d := min(float64(want)/rtt.Seconds(), c.lineBytes)
	return uint32(max(1, min(d/1000, wire.NoRateHint-1)))
}

// resendBacklog bounds the bytes waiting to be sent again: the entries
// declared lost on the paths in lostSet and the chunks in the retransmit
// queue, an MSS each (some queued chunks may have settled meanwhile).
func (c *Conn) resendBacklog() int64 {
	n := len(c.s.rexmit) - int(c.s.rexHead)
	for w, word := range c.s.lostSet {
		for word != 0 {
			i := 64*w + bits.TrailingZeros64(word)
			word &= word - 1
			n += c.s.paths[i].sb.lost
		}
	}
	return int64(n) * int64(c.mss)
}

// The connection's rate controller (the rules above): DCTCP's
// window in rate form, m, and its alpha over all the connection's packets.
// It knows nothing of paths, timers or the wire: it takes what each ACK
// record says and gives the rate and the window.

// ccSample is what one ACK record tells the controller.
type ccSample struct {
	acked int // packets newly acknowledged
	rx    int // packets newly received at the peer
	ce    int // CE marks among them
	// srtt is the connection's smoothed RTT (a round's length), latest the
	// larger of it and the latest sample (how long a cut holds).
	srtt, latest sim.Time
	// peerBusy: the receiver answers marks itself, through its hints.
	peerBusy bool
}

// dctcp is the controller's state; sndState embeds it, so its fields read
// as c.s.mult and so on.
type dctcp struct {
	mult, alpha             float64  // m, and alpha over all paths
	roundStart              sim.Time // the current round (one srtt) began here
	roundAcked, roundMarked int32    // the round's received and marked packets
	cutUntil                sim.Time // the earliest next cut
	aiAt                    sim.Time // m's growth is counted from here
}

// newDCTCP is a controller before any ACK: m = 1 (the reference rate),
// alpha alpha0.
func newDCTCP() dctcp { return dctcp{mult: 1, alpha: alpha0} }

// onAck takes one ACK record at now, g being the EWMA gain: marks cut m
// by (1 - alpha/2) at most once per latest RTT (not while the peer is
// busy), an ACK of new packets without marks grows m by aiPerRound per
// srtt of time since the last ACK, and a round of srtt ends by folding
// its marked fraction into alpha. cut says m was cut, what by.
func (d *dctcp) onAck(now sim.Time, a ccSample, g float64) (c ccCut, cut bool) {
	if a.rx > 0 {
		d.roundAcked += int32(a.rx)
		d.roundMarked += int32(a.ce)
	}
	if a.ce > 0 {
		if now >= d.cutUntil && !a.peerBusy {
			c.from, c.alpha, cut = d.mult, d.alpha, true
			d.mult = max(d.mult*(1-d.alpha/2), minMult)
			c.to = d.mult
			d.cutUntil = now + a.latest
		}
		d.aiAt = now
	} else if a.acked > 0 {
		if d.mult < 1 {
			d.mult = min(1, d.mult+float64(now-d.aiAt)/float64(max(a.srtt, 1))*aiPerRound)
		}
		d.aiAt = now
	}
	if now-d.roundStart >= max(a.srtt, 1) {
		if d.roundAcked > 0 {
			f := min(float64(d.roundMarked)/float64(d.roundAcked), 1)
			d.alpha = (1-g)*d.alpha + g*f
		}
		d.roundStart, d.roundAcked, d.roundMarked = now, 0, 0
	}
	return c, cut
}

// ccCut is one cut of m, for the trace: from, to, at alpha.
type ccCut struct{ from, to, alpha float64 }

// rate is R in bytes per second: the reference rate (the line rate, or
// the receiver's hint when lower) times m.
func (d *dctcp) rate(ref float64) float64 { return ref * d.mult }

// window is W in bytes for the rate R over the base RTT at the loss
// rate loss (at most 0.5 counts): 5/4 x R x base / (1 - loss) + 2 MSS.
func (d *dctcp) window(rate float64, base sim.Time, loss float64, mss int) int {
	return int(rate*base.Seconds()*5/4/(1-min(loss, 0.5))) + 2*mss
}
