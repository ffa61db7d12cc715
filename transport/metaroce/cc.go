package metaroce

import (
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// Congestion control is bilateral.
//
// Sender side, per path: DCTCP-style ECN AIMD. Once per round (a path
// RTT, ended when the PSN that was next at the round's start is acked)
// alpha <- (1-g) alpha + g F, F the fraction of the round's ACKed packets
// that were CE-marked. An ACK reporting new marks cuts cwnd to
// cwnd (1 - alpha/2), at most once per round; an ACK without marks grows
// cwnd by one MSS per cwnd of ACKed bytes. Loss without marks does not
// cut: it is retransmitted and counted against the path's health instead.
// An RTO sets cwnd to one MSS.
//
// Receiver side, per NIC: the fair-share hint in every ACK (ratehint.go).
// The sender paces its total rate at min(line rate, hint) and caps what it
// has in flight at hint x (base RTT + ACK delay) x 1.25 (see hintRTT for
// why not SRTT); while a queue inflates the RTT, it paces below the hint
// in proportion (drainRate). Before the receiver's first ACK a connection
// has one packet in flight, and the receiver counts a newly accepted
// connection as an active sender from the start, so the first hints of an
// N-to-1 incast are already C/N and the first flight is N packets, not N
// BDPs: incast settles in the first round trip or two.

// ccOnAck updates p's window for pkts newly ACKed packets (bytes of
// payload) of which dce were CE-marked.
func (c *Conn) ccOnAck(p *sndPath, pkts, bytes, dce int) {
	if pkts == 0 && dce == 0 {
		return
	}
	p.roundPkts += pkts
	p.roundCE += dce
	p.st.acked += uint64(pkts)
	p.st.ceAcked += uint64(dce)
	if dce > 0 {
		c.st.ceEchoes++
		if !wire.Seq(p.sb.una).Before(wire.Seq(p.cutEnd)) {
			old := p.cwnd
			p.cwnd = max(c.mss, int(float64(p.cwnd)*(1-p.alpha/2)))
			p.cwndFrac = 0
			p.cutEnd = p.sb.nxt
			if c.cfg.Trace != nil {
				c.tracef("path %d: ECE, cwnd %d -> %d (alpha %.3f)", p.id, old, p.cwnd, p.alpha)
			}
		}
	} else if bytes > 0 {
		p.cwndFrac += bytes
		if p.cwndFrac >= p.cwnd {
			p.cwndFrac -= p.cwnd
			p.cwnd = min(p.cwnd+c.mss, maxPathWindow*c.mss)
		}
	}
	if !wire.Seq(p.sb.una).Before(wire.Seq(p.roundEnd)) {
		c.endRound(p)
	}
}

// endRound closes a DCTCP round: update alpha, and watch for a path that
// stays heavily marked while the others do not (a hot link: move off it).
func (c *Conn) endRound(p *sndPath) {
	if p.roundPkts > 0 {
		f := min(float64(p.roundCE)/float64(p.roundPkts), 1)
		g := c.opts.ECNGain
		p.alpha = (1-g)*p.alpha + g*f
		if f > c.opts.RepathMarkFraction {
			p.markRounds++
		} else {
			p.markRounds = 0
		}
		p.heavy = p.markRounds > 0
		if p.markRounds >= c.opts.RepathMarkRounds && p.state == PathActive && c.fewHeavy() {
			p.state = PathDraining
			p.markRounds = 0
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
	c.s.heard = true
	var hint float64
	if h != wire.NoRateHint && !c.opts.DisableRateHint {
		hint = float64(h) * 1000
	}
	if c.cfg.Trace != nil && (hint > c.s.hint*1.1 || hint < c.s.hint*0.9) {
		c.tracef("rate hint %.3f Gb/s -> %.3f Gb/s", c.s.hint*8/1e9, hint*8/1e9)
	}
	if hint == 0 || c.s.hint == 0 {
		c.s.nextSend = min(c.s.nextSend, c.now)
	} else if hint > c.s.hint && c.s.nextSend > c.now {
		// More room: the pacer must not keep waiting out a gap computed at
		// the old, lower rate; it shortens the rest of the gap in
		// proportion. (Ending the gap at once let 63 senders, whose hints
		// move up and down a few percent as the receiver's water-filling
		// follows their demands, each send early on every small rise: the
		// queue at the receiver grew by a packet per sender every time.)
		c.s.nextSend = c.now + sim.Time(float64(c.s.nextSend-c.now)*c.s.hint/hint)
	}
	c.s.hint = hint
}

// inflightCap is the connection-wide in-flight limit: one packet until
// the receiver's first ACK, then two line-rate BDPs, and hint x hintRTT x
// 1.25 once the receiver has sent a hint, but never below two packets.
func (c *Conn) inflightCap() int {
	rtt := max(c.s.minRTT, c.opts.BaseRTT)
	limit := int(2 * c.lineBytes * rtt.Seconds())
	if c.s.hint > 0 {
		limit = min(limit, int(c.s.hint*c.hintRTT().Seconds()*1.25/c.deliveredFraction()))
	} else if !c.s.heard && !c.opts.DisableRateHint {
		// Before the receiver has answered at all, one packet: it probes
		// for the receiver's share. An N-to-1 incast whose senders each
		// sent a BDP first filled the receiver's queue N times over; one
		// packet each costs a lone sender one round trip of start-up.
		return c.mss
	}
	// At least two packets: with one, the sender idles while each packet's
	// ACK comes back, which at low line rates (a window of about one packet)
	// wastes most of the link.
	return max(limit, 2*c.mss)
}

// deliveredFraction is the share of what is in flight expected to reach
// the receiver: 1 - the connection's loss rate once that is heavy (see
// randomLossRate), else 1. Bytes in flight that the fabric dropped hold
// no place in the receiver's queue, yet until their loss is seen they
// count against the in-flight cap; at 34% end-to-end loss a third of the
// cap was held by packets that no longer existed.
func (c *Conn) deliveredFraction() float64 {
	l := c.lossRate()
	if l <= randomLossRate {
		return 1
	}
	return 1 - min(l, 0.5)
}

// hintRTT is the round-trip time the hint's in-flight cap is computed
// over: the base (minimum) RTT plus the receiver's ACK delay, which every
// ACK may add. HPCC sizes its window the same way (rate x base RTT x eta).
// The smoothed RTT would include the queue the cap is meant to prevent: a
// standing queue would justify itself and drain only at the hint's 5%
// headroom, instead of within a round trip or two.
func (c *Conn) hintRTT() sim.Time {
	base := c.opts.BaseRTT
	if c.s.minRTT > 0 {
		base = c.s.minRTT
	}
	return base + c.opts.DelayedAck
}

// wireOverhead is what a packet costs on the wire besides its transport
// payload: IPv4, UDP and Ethernet framing.
const wireOverhead = 20 + 8 + 38

// pace spaces data packets at the hinted rate (lowered by drainRate while
// a queue stands) when it is below line rate, with no burst allowance: 63
// senders each allowed two packets back to back put 530 KB at once into a
// 512 KiB queue. A packet without payload (a probe, a
// hole filler, an ABORT) is not paced and does not delay the next one:
// it adds nothing to the receiver's load, and pacing it at a hint given
// while the sender was idle (and asked for almost nothing) once held a
// connection's next message for 86 ms.
func (c *Conn) pace(n int) {
	rate := c.s.hint
	if rate <= 0 || n <= wire.DataSize+wire.TrailerSize {
		return
	}
	rate = min(rate, c.drainRate())
	if rate >= c.lineBytes {
		return
	}
	gap := sim.Time(float64(n+wireOverhead) / rate * 1e9)
	c.s.nextSend = max(c.s.nextSend, c.now) + gap
}

// drainRate is the in-flight cap expressed as a rate: hint x hintRTT x
// 1.25 over the latest RTT sample (not the smoothed RTT, which lags by
// several samples and kept senders below their share for rounds after the
// queue had gone: 32-to-1 settled in 23 RTTs with it, 10 with the latest
// sample). While a queue at the receiver inflates the
// RTT, it paces the sender below the hint in proportion, so the queue
// drains within a round trip or two. The in-flight cap alone cannot do
// this when the hint is small: its two-packet floor (which keeps a slow
// live link busy) then lets a deep queue stand, draining only at the
// hint's 5% headroom (63-to-1 took 70 RTTs). Pacing has no packet
// granularity, so it neither stands a queue nor starves a sender whose
// fair share is between one and two packets per round trip.
func (c *Conn) drainRate() float64 {
	rtt := c.s.lastRTT
	target := c.hintRTT() + c.hintRTT()/4
	if rtt <= target {
		return c.s.hint
	}
	return c.s.hint * float64(target) / float64(rtt)
}

// demandKBs is the rate the sender asks of the receiver, in kB/s: what it
// has queued and in flight, plus the size-byte packet being sent, over one
// RTT, and at least one MSS per RTT; at most its line rate. The floor
// matters: a packet sent with nothing else queued (the last
// retransmission of a message) used to advertise a demand of 0, the
// receiver then gave the sender a share of almost nothing, and the
// sender's next message was paced at that share until an ACK said
// otherwise.
func (c *Conn) demandKBs(size int) uint32 {
	rtt := max(c.s.srtt, c.opts.BaseRTT)
	want := max(c.s.unsent+int64(c.s.inflight)+int64(size), int64(c.mss))
	d := min(float64(want)/rtt.Seconds(), c.lineBytes)
	return uint32(min(d/1000, wire.NoRateHint-1))
}
