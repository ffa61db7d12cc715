package metaroce

import (
	"math/bits"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// onAck processes an ACK: its rate hint, then each path record in it.
func (c *Conn) onAck(a wire.Ack) {
	c.st.acksReceived++
	c.noteHint(a.RateHint())
	c.s.peerBusy = wire.Header(a).Flags()&wire.FlagBusy != 0
	r := a.First()
	c.onPathAck(&r)
	for i, off := 0, wire.AckSize; i < a.Records() && c.state == transport.StateEstablished; i++ {
		r, off = a.Record(off)
		c.onPathAck(&r)
	}
	if c.state == transport.StateEstablished {
		c.rackDetect()
	}
}

// onPathAck processes one path's state from an ACK: settle what it
// covers, take an RTT sample, run congestion control, detect losses (a
// hole below a PSN that was sent later and has arrived) and judge the
// path's health.
func (c *Conn) onPathAck(r *wire.PathAck) {
	c.ensurePaths()
	if int(r.Path) >= len(c.s.paths) {
		c.st.dropMalformed++
		return
	}
	p := &c.s.paths[r.Path]
	if r.Gen != p.gen {
		c.st.staleAcks++
		return
	}
	c.use(p)
	cum := r.Cum
	sb := &p.sb
	// cum is in [una, nxt], or a little before una (an older record
	// overtaken by a newer one); anything else is not of this path.
	if !wire.Seq(cum).Within(wire.Seq(sb.una), wire.Seq(sb.nxt)) && wire.Seq(cum).Span(wire.Seq(sb.una)) > 4*maxPathWindow {
		c.st.dropMalformed++
		return
	}
	pkts, bytes := 0, 0
	// The newest PSN the record reports arrived is the packet its echo_ts
	// belongs to (paths are FIFO): whether it was a full-size data packet
	// decides whether its RTT can be the base RTT (rtt.go).
	top := cum - 1
	for w := wire.SACKWords - 1; w >= 0; w-- {
		if word := r.SACK[w]; word != 0 {
			top = cum + uint32(wire.SACKWordBits*(w+1)-bits.TrailingZeros64(word))
			break
		}
	}
	full := sb.outstanding(top) && sb.entry(top).kind == sbData && int(sb.entry(top).size) >= c.mss
	// Only a record whose cum is in [una, nxt] acknowledges cumulatively;
	// an older one carries nothing cumulative we lack.
	for psn := sb.una; wire.Seq(cum).Within(wire.Seq(sb.una), wire.Seq(sb.nxt)) && psn != cum; psn++ {
		k, n := c.ackEntry(p, psn, top, r.EchoTS)
		pkts += k
		bytes += n
	}
	for w := range wire.SACKWords {
		word := r.SACK[w]
		for word != 0 {
			i := bits.LeadingZeros64(word)
			word &^= 1 << (wire.SACKWordBits - 1 - i)
			psn := cum + 1 + uint32(wire.SACKWordBits*w+i)
			if !sb.outstanding(psn) {
				continue
			}
			k, n := c.ackEntry(p, psn, top, r.EchoTS)
			pkts += k
			bytes += n
		}
	}
	if c.state != transport.StateEstablished {
		return // a completion callback closed us
	}
	sb.advance()
	drx := int(uint16(r.RxCount - p.lastRx))
	dce := int(uint16(r.CECount - p.lastCE))
	if c.mutated(MutIgnoreECN) {
		dce = 0
	}
	if drx > 4*maxPathWindow || dce > drx {
		drx, dce = 0, 0 // an older record, overtaken
	} else {
		p.lastRx, p.lastCE = r.RxCount, r.CECount
	}
	if pkts > 0 {
		// The path delivers: restart its timers (RFC 8985 re-arms on every
		// ACK that acknowledges something new, SACKed or not).
		p.tlpBase, p.tlpSent, p.tlps, p.lastProgress = c.now, false, 0, c.now
		p.silentLoss = false
		c.s.lastProgress = c.now
		if p.suspect {
			p.suspect = false
			c.s.pathsChanged()
		}
		if p.timeouts > 0 || p.state == PathProbing || p.state == PathFailed {
			c.pathRecovered(p)
		}
		c.rttSample(p, sim.Time(c.ts()-r.EchoTS), full)
	}
	c.ccOnRecord(p, pkts, bytes, drx, dce)
	if pkts > 0 {
		c.detectLoss(p)
	}
	if p.state == PathDraining && sb.empty() {
		c.repath(p, whyMarks, false)
		p.state = PathActive
		c.s.pathsChanged()
	}
	c.armPath(p)
}

// ackEntry settles one PSN reported by a record whose echo_ts is echo;
// it returns the packets and payload bytes it newly acknowledged.
//
// It feeds the reordering window (lossdetect.go): a first transmission
// overtaken by a later-sent one that had arrived gives the path a lateness
// sample, and a PSN declared lost proves the declaration spurious when it
// is acknowledged before its resend went, or when the record's echo_ts is
// older than the resend (paths are FIFO, echo_ts is the path's latest data
// packet's ts plus the receiver's hold: the resend had not arrived, so the
// first transmission did; RFC 3522's timestamp test).
func (c *Conn) ackEntry(p *sndPath, psn, top, echo uint32) (int, int) {
	wasLost := p.sb.lost
	e := p.sb.entry(psn)
	age, older := sim.Time(int32(c.ts()-echo)), int32(echo-uint32(e.sentAt)) < 0
	switch {
	case e.acked:
	case e.lost:
		c.spurious(p, psn, top, age, older) // declared lost, arrived: not resent yet
	case e.resent && e.kind == sbData && older:
		c.spurious(p, psn, top, age, older) // the first transmission arrived
	case e.resent:
		c.s.reo.recovered()
	}
	if !e.acked && !e.resent && psn == top {
		c.noteLateness(p, e.order, age)
	}
	e, newly, left := p.sb.ack(psn)
	if !newly {
		return 0, 0
	}
	c.s.inflight -= left
	// Only a first transmission is a reference for loss detection across
	// paths (Karn). Tried and not kept: a resend as well when the record's
	// echo_ts shows the resend arrived (RFC 8985 allows timestamps to
	// disambiguate): 16 streams at 10% loss 0.530 -> 0.532 mean (seeds
	// 1-10), 10us one stream 0.463 -> 0.462: no gain for the doubt.
	if !e.resent {
		c.s.rack.delivered(e.order, e.sentAt, c.now)
	}
	if p.sb.lost != wasLost {
		c.flagPath(p) // a PSN declared lost arrived after all
	}
	switch {
	case e.kind != sbProbe:
		ch := c.chunk(e.dsn)
		if ch.where == chunkOnPath && ch.path == p.id && ch.gen == p.gen && ch.psn == psn {
			c.chunkResolved(e.dsn)
		}
	case e.moved && !e.resent && !e.refused:
		c.movedArrived(e.dsn)
	}
	return 1, int(e.size)
}

// movedArrived settles chunk dsn when the first transmission of a PSN it
// left (a tail-loss probe sent it again, or a timeout moved it) turns out
// to have arrived: that packet carried the chunk, so the chunk is
// delivered wherever its later copy is (spec §4: the cumulative ACK of
// every PSN that carried a message's chunks completes it). A copy queued
// for resending is dropped from the queue when its turn comes; a copy
// outstanding on a path becomes a filler there.
func (c *Conn) movedArrived(dsn uint32) {
	if !wire.Seq(dsn).In(wire.Seq(c.s.dsnBase), wire.Seq(c.s.dsnNext)) {
		return // settled long ago
	}
	ch := c.chunk(dsn)
	switch ch.where {
	case chunkOnPath:
		if q := &c.s.paths[ch.path]; ch.gen == q.gen && q.sb.outstanding(ch.psn) {
			if e := q.sb.entry(ch.psn); !e.acked && e.kind == sbData && e.dsn == dsn {
				c.s.inflight -= q.sb.move(ch.psn)
			}
		}
	case chunkQueued, chunkRNR:
	default:
		return
	}
	c.st.earlierArrived++
	if c.cfg.Trace != nil {
		c.tracef("dsn %d: an earlier transmission arrived", dsn)
	}
	c.chunkResolved(dsn)
}

// detectLoss declares lost every outstanding PSN of p sent before the
// latest transmission known to have arrived: paths are FIFO, so it is a
// loss, not reordering.
func (c *Conn) detectLoss(p *sndPath) {
	var trace func(psn uint32)
	if c.cfg.Trace != nil {
		trace = func(psn uint32) { c.tracef("path %d: SACK hole psn %d, retransmit", p.id, psn) }
	}
	newLosses, left := p.sb.detectLoss(trace)
	if newLosses > 0 {
		c.lossesFound(p, newLosses, newLosses, left)
	}
}

// lossesFound accounts for n transmissions of p newly declared lost,
// whose payload (left bytes) left flight.
// Of them, judged were sent before the path's latest ACK progress: those
// are loss on a route that works and count in the loss rate and the
// path's repath test; the rest are the silence of a path whose ACKs have
// stopped, which its timers judge (probe.go).
func (c *Conn) lossesFound(p *sndPath, newLosses, judged, left int) {
	c.s.inflight -= left
	c.flightLeft(left)
	p.st.losses += uint64(newLosses)
	c.st.losses += uint64(newLosses)
	c.s.lossLost += float64(judged)
	c.flagPath(p)
	if judged > 0 {
		c.noteLosses(p, judged)
	}
	if newLosses > judged {
		p.silentLoss = true // later packets on other paths arrived; this path said nothing
	}
}
