package metaroce

import "github.com/mrlab/mrlab/transport/metaroce/wire"

// Proactive copies (spec §10, "Copies while the share is unused").
//
// A connection with few messages outstanding (an application-limited
// one) leaves part of its share unused, and each loss it suffers holds
// its stream's in-order completion for about two round trips: one to find
// the loss (no signal shows it sooner: the one-RTT oracle of
// TestTargetShallowLoss), one to repair it. Under measured loss such a
// connection spends its own unused share on a second transmission of
// each chunk it has outstanding, under a new PSN on another path, so a
// chunk is late only when both are lost.
//
// The rule, from measured quantities only:
//   - loss: the connection's measured loss rate p is at least
//     copyLossFloor (1e-3), i.e. one transmission per chunk fails the
//     chance rule (p^1 not below 1e-3; §10 Chance count). Loss-free (p
//     below it, every loss-free run) nothing changes.
//   - room: nothing else to send (no lost PSN waiting, no moved chunk
//     queued, no new chunk to cut: nothing posted, or the peer's message
//     or DSN window full; a new chunk the window holds back holds the
//     copies back too) and the bytes on the
//     wire, the chunks in flight plus the copies not yet settled
//     (copyFlight), stay within the share's bandwidth-delay product, R x
//     the base RTT, R the rate the connection is paced at (the receiver's
//     share, capped by the line and by congestion control). Copies go
//     through the same pacer as data, so the connection's sending rate
//     stays at most R: it spends only what it was given and does not use.
//   - no queue and no failure: not while congestion control holds the
//     rate below the share (m < 1: a queue on the way marks, and a copy
//     would deepen it), nor while the receiver answers marks itself
//     (BUSY), nor while a path the connection used is out of service
//     (suspect, probing, failed): that loss is the timers' to handle, not
//     chance's (plane-failure claim, seed 1: 0.922 of the surviving
//     capacity without copies, 0.897 with copies during the failure,
//     0.948 with this condition).
//   - which: the oldest chunk whose only transmission is its first one and
//     is still in flight, once each (a cursor over the DSNs).
//
// The copy takes the original's place as the chunk's transmission (the
// original's PSN becomes a filler, as after a tail-loss probe): whichever
// of the two is acknowledged first settles the chunk (§10 Earlier copies),
// the receiver places it once (the DSN window), and a filler found lost
// is closed with a bare PROBE, never resent with payload. A copy carries
// no RETX: it is not a retransmission. The receiver's loss estimate (§4,
// the fraction of arrivals that are retransmissions) counts a copy that
// arrives as a first transmission and a lost one by its filler's RETX
// probe (receiver.go onProbe), so it stays the per-packet loss and the
// ACK redundancy rule neither inflates (copies flagged RETX: half the
// arrivals, ten ACKs each) nor collapses (counting data packets only, it
// fell from 0.043 to 0.001 at 1% per link, one ACK per arrival). The
// sender's own loss rate counts copies like any packet (sent and, if
// lost, lost): a per-packet rate that copies do not move.
//
// Tried and not kept (seed 1 of TestCopiesSeeds unless said): as many
// transmissions as the chance count asks (p^n below 1e-3; 1% per link is
// about 4% end to end, so three): the budget then covers fewer chunks,
// one stream 1% 0.813 -> 0.787, 16 streams 10% 0.640 -> 0.613; the
// window W as the budget instead of R x base RTT: the same figures (the
// budget is seldom what stops a copy); copies of resent chunks too (seeds
// 1-5): one stream 0.811 both, 16 streams 10% 0.663 -> 0.651, 10us one
// stream 0.499 -> 0.484.

// copyLossFloor is the measured loss rate from which a chunk is sent
// twice: the chance bound (1e-3) of a single transmission.
const copyLossFloor = 1e-3

// sendCopy sends one proactive copy on port if the rule above allows,
// returning its size and path (0, nil if none went).
func (c *Conn) sendCopy(port int, b []byte) (int, *sndPath) {
	if c.mutated(MutNoCopies) || !c.s.heard || c.lossRate() < copyLossFloor || c.s.mult < 1 || c.s.peerBusy {
		return 0, nil // loss-free, or a queue on the way: no share to spare
	}
	if int(c.s.rexHead) < len(c.s.rexmit) || c.s.lostSet != [4]uint64{} {
		return 0, nil // resends first, whichever port they wait for
	}
	bdp := int(c.paceRate() * c.baseRTT().Seconds())
	if wire.Seq(c.copyNext).Before(wire.Seq(c.s.dsnBase)) {
		c.copyNext = c.s.dsnBase
	}
	for ; c.copyNext != c.s.dsnNext; c.copyNext++ {
		dsn := c.copyNext
		ch := c.chunk(dsn)
		if ch.where != chunkOnPath || ch.tx != 1 || ch.copied || ch.abort {
			continue
		}
		p := &c.s.paths[ch.path]
		if ch.gen != p.gen || !p.sb.outstanding(ch.psn) {
			continue
		}
		if e := p.sb.entry(ch.psn); e.kind != sbData || !e.counts() {
			continue // acknowledged, found lost or presumed gone: recovery's
		}
		size := int(ch.size)
		if c.s.inflight+int(c.copyFlight)+size > bdp || !c.allInService() {
			return 0, nil
		}
		q := c.pickCopyPath(port, p)
		if q == nil {
			return 0, nil // another port may have a path for it
		}
		c.s.inflight -= p.sb.move(ch.psn)
		ch.copied = true
		c.copyFlight += int32(size)
		c.copies++
		c.copyNext++
		if c.cfg.Trace != nil {
			c.tracef("path %d: copy of dsn %d (psn %d on path %d)", q.id, dsn, ch.psn, p.id)
		}
		return c.sendChunkAs(q, dsn, b, 0, true), q
	}
	return 0, nil
}

// allInService reports whether every path the connection used is in
// service (not suspect, probing or failed): loss on a path out of service
// is its timers' work, not chance. It reads every path, so sendCopy asks
// it only once a copy is due.
func (c *Conn) allInService() bool {
	for i := range c.s.paths {
		if p := &c.s.paths[i]; p.used() && (p.state != PathActive || p.suspect) {
			return false
		}
	}
	return true
}

// pickCopyPath chooses the path of port's plane that carries a copy of a
// chunk sent on orig, never orig itself: the first after orig (so copies
// spread as the originals do) that is in service (active, or spare: the
// active-path cap of §9 keeps new data on few paths so their SACKs show
// holes, and a connection with one chunk in flight has one active path
// per plane), has SACK-window room and is delivering (healthy, or not yet
// used: a copy on a path that stopped answering would be the one lost).
func (c *Conn) pickCopyPath(port int, orig *sndPath) *sndPath {
	ports := c.cfg.Ports
	n := (len(c.s.paths) - port + ports - 1) / ports
	k := 0
	if int(orig.id)%ports == port {
		k = int(orig.id) / ports
	}
	for tries := 0; tries < n; tries++ {
		if k++; k >= n {
			k = 0
		}
		q := &c.s.paths[port+k*ports]
		if q != orig && q.serviceable() && q.sb.room() && c.healthy(q) {
			return q
		}
	}
	return nil
}
