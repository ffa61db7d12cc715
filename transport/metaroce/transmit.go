package metaroce

import (
	"math"
	"math/bits"

	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// transmitData sends one data packet on port if pacing and the window
// allow: a lost PSN again on its path, else a chunk moved off a path that
// timed out, else a new chunk.
func (c *Conn) transmitData(port int, b []byte) (int, transport.TxMeta) {
	if until, wait := c.s.pacer.wait(c.now); wait {
		c.timers.Arm(&c.paceTimer, until)
		return 0, transport.TxMeta{}
	}
	for w, word := range c.s.lostSet {
		for word != 0 {
			i := 64*w + bits.TrailingZeros64(word)
			word &= word - 1
			p := &c.s.paths[i]
			if p.plane(c.cfg.Ports) != port || p.state != PathActive && p.state != PathDraining {
				continue
			}
			if psn, ok := p.sb.nextLost(); ok && !c.canSend(int(p.sb.entry(psn).size)) {
				continue
			}
			if n := c.resendLost(p, b); n > 0 {
				return c.dataSent(n, p)
			}
		}
	}
	for int(c.s.rexHead) < len(c.s.rexmit) && c.chunk(c.s.rexmit[c.s.rexHead]).where != chunkQueued {
		c.popRexmit() // settled while queued (movedArrived)
	}
	if int(c.s.rexHead) < len(c.s.rexmit) {
		dsn := c.s.rexmit[c.s.rexHead]
		ch := c.chunk(dsn)
		size := int(ch.size)
		if f, _ := c.chunkFailed(ch); f {
			size = 0
		}
		if p := c.pickHealthy(port, size); p != nil {
			c.popRexmit()
			c.st.retransmits++
			return c.dataSent(c.sendChunk(p, dsn, b, 0), p)
		}
	}
	if job, msn, size, ok := c.nextChunkSize(); ok {
		if p := c.pickPath(port, size); p != nil {
			dsn := c.cutChunk(job, msn, size)
			return c.dataSent(c.sendChunk(p, dsn, b, 0), p)
		}
		return 0, transport.TxMeta{}
	}
	if n, p := c.sendCopy(port, b); n > 0 { // nothing to send: the unused share (redundancy.go)
		return c.dataSent(n, p)
	}
	return 0, transport.TxMeta{}
}

// popRexmit drops the head of the retransmit queue.
func (c *Conn) popRexmit() {
	c.s.rexHead++
	if int(c.s.rexHead) == len(c.s.rexmit) {
		c.s.rexmit, c.s.rexHead = c.s.rexmit[:0], 0
	}
}

// dataSent finishes a data transmission: pacing and the packet's framing.
func (c *Conn) dataSent(n int, p *sndPath) (int, transport.TxMeta) {
	if n == 0 || c.state != transport.StateEstablished {
		return 0, transport.TxMeta{}
	}
	c.pace(n)
	c.armPath(p)
	return n, transport.TxMeta{SrcPort: p.entropy, ECT: true}
}

// runLength is how many packets in a row a path takes when its turn
// comes, in a window of w bytes: enough that each path used carries about
// two packets per round trip (ceil(2 x usable paths / window in packets)),
// so that a loss is usually followed by a later packet on the same path
// and seen in its SACK, not left to a timer; but no more than a quarter of
// the window, so that a window still spreads over at least four paths.
// With a window of many packets per path it is 1: plain packet spraying.
func (c *Conn) runLength(w int) int {
	w = max(w/c.mss, 1)
	return max(min((2*int(c.s.usable)+w-1)/w, w/4), 1)
}

// takes reports whether p may carry one more size-byte data packet, a
// run being run packets: it carries data, has SACK-window room, and holds
// no more than its part of the window in whole packets (shares.go) or a
// run, whichever is more.
func (c *Conn) takes(p *sndPath, size, run int) bool {
	if !p.usable() || !p.sb.room() {
		return false
	}
	if size == 0 || p.sb.inflight == 0 {
		return true
	}
	return p.sb.inflight+size <= max(int(p.part), run)*c.mss
}

// pickPath chooses the path of port's plane that carries the next new
// chunk: the current path while its run lasts, else the next one in
// round-robin order whose weighted credit allows it. It returns nil if the
// window or every path of the plane is full.
func (c *Conn) pickPath(port, size int) *sndPath {
	w := c.window()
	if size > 0 && c.s.inflight > 0 && c.s.inflight+size > w {
		return nil
	}
	pk := &c.s.sel.pick[port]
	if pk.blockedEpoch == c.s.roomEpoch && size >= int(pk.blockedSize) {
		return nil // nothing has changed since nothing fitted
	}
	ports := c.cfg.Ports
	if k := uint16(c.activePerPlane()); k != c.s.perPlane {
		c.s.perPlane = k
		c.s.pathsChanged()
	}
	c.shares(w)
	run := c.runLength(w)
	k := int(pk.cursor)
	if r := int(pk.run); r > 0 && r < run {
		if p := &c.s.paths[port+k*ports]; c.takes(p, size, run) {
			pk.run++
			return p
		}
	}
	top := c.s.weightTop
	// Every path of the plane twice, from the one after the cursor, in
	// turn; those not in cand would not take data (pathSel).
	cand := &pk.cand
	for tries, m := 0, 2*cand.len(); tries < m; tries++ {
		k = cand.after(k)
		p := &c.s.paths[port+k*ports]
		if !c.takes(p, size, run) {
			continue
		}
		if top > 0 {
			p.credit += float64(quantWeight(p)) / 16 / top
		}
		if p.credit < 1 {
			continue
		}
		p.credit--
		pk.cursor, pk.run = int32(k), 1
		return p
	}
	pk.blockedEpoch, pk.blockedSize = c.s.roomEpoch, int32(size)
	return nil
}

// pickHealthy chooses the path of port's plane that re-sends a chunk moved
// off a path that timed out: a healthy one if any (so a chunk does not hop
// from one dead path to the next while a plane is down), else any that
// takes data.
func (c *Conn) pickHealthy(port, size int) *sndPath {
	if !c.canSend(size) {
		return nil
	}
	var fallback *sndPath
	for i := port; i < len(c.s.paths); i += c.cfg.Ports {
		p := &c.s.paths[i]
		if !p.usable() || !p.sb.room() {
			continue
		}
		if c.healthy(p) {
			return p
		}
		if fallback == nil {
			fallback = p
		}
	}
	if fallback != nil && !c.anyHealthy() {
		return fallback
	}
	return nil
}

// healthy reports whether p was still delivering when the connection last
// heard from its peer: its last ACK progress within its probe timeout of
// the connection's. Measured against the connection's latest progress,
// not against now: when the chunks to move are all the connection has
// outstanding (nothing left to send), no path has anything to deliver,
// and after a PTO none would have delivered "recently"; every port then
// took the chunks for its own paths, the dead plane's idle port first and
// most, and they went from one of its paths to the next, a probe timeout
// and a probe interval each (plane-failure tiny-lossy, first flights over
// the base RTT, seed 1: h3->h1 had nothing acknowledged for 450 us). A
// path that went silent a PTO before the connection's last progress did
// not answer while another path did; one that was delivering then did.
func (c *Conn) healthy(p *sndPath) bool {
	return p.lastProgress != 0 && c.s.lastProgress-p.lastProgress <= c.pto(p)
}

// anyHealthy reports whether some usable path of the connection is
// healthy.
func (c *Conn) anyHealthy() bool {
	for i := range c.s.paths {
		if p := &c.s.paths[i]; p.usable() && c.healthy(p) {
			return true
		}
	}
	return false
}

// flagPath records whether p has lost PSNs to resend or a probe due.
func (c *Conn) flagPath(p *sndPath) {
	w, m := p.id/64, uint64(1)<<(p.id%64)
	if p.sb.lost > 0 {
		c.s.lostSet[w] |= m
	} else {
		c.s.lostSet[w] &^= m
	}
	if p.probeWant {
		c.s.probeSet[w] |= m
	} else {
		c.s.probeSet[w] &^= m
	}
}

// sendChunk sends chunk dsn on path p under a new PSN.
func (c *Conn) sendChunk(p *sndPath, dsn uint32, b []byte, extra wire.Flags) int {
	return c.sendChunkAs(p, dsn, b, extra, false)
}

// sendChunkAs is sendChunk; a proactive copy (redundancy.go) is not a
// retransmission: it goes without RETX and is not counted as one.
func (c *Conn) sendChunkAs(p *sndPath, dsn uint32, b []byte, extra wire.Flags, copy bool) int {
	c.use(p)
	ch := c.chunk(dsn)
	e := sbEntry{dsn: dsn, size: ch.size, kind: sbData, sentAt: c.now, order: c.nextOrder()}
	if f, st := c.chunkFailed(ch); f {
		ch.abort, ch.status = true, st
		e.kind, e.size = sbAbort, 0
	}
	psn := p.sb.push(e)
	ch.where, ch.path, ch.gen, ch.psn = chunkOnPath, p.id, p.gen, psn
	if ch.tx < math.MaxUint8 {
		ch.tx++
	}
	if ch.job < 0 {
		ch.round = c.msg(ch.msn).rnrTries
	}
	n := c.encodeChunk(b, p, psn, dsn, ch.tx > 1 && !copy, extra)
	if ch.abort && p.sb.entry(psn).kind == sbData { // gathering the payload failed
		p.sb.strip(psn, sbAbort)
	}
	c.s.inflight += int(p.sb.entry(psn).size) // after encoding: demand counts the packet once
	c.sentOnPath(p, n)
	c.st.dataPackets++
	if ch.tx > 1 && !copy {
		p.st.retransmits++
	}
	return n
}

// sentOnPath notes a transmission of n bytes on p: its tail-loss timer
// restarts.
func (c *Conn) sentOnPath(p *sndPath, n int) {
	p.tlpBase, p.tlpSent = c.now, false
	c.countSend(p, n)
}

// countSend counts a packet of n bytes sent on p under a PSN (data,
// filler or probe): path counters and the loss rates' denominators.
func (c *Conn) countSend(p *sndPath, n int) {
	p.st.packets++
	p.st.bytes += uint64(n)
	p.genSent++
	if c.s.lossSent++; c.s.lossSent > lossHalfLife {
		c.s.lossSent /= 2
		c.s.lossLost /= 2
	}
}

// maxRetries is how many times one chunk may be declared lost (by a SACK:
// a later packet on its path arrived, so the path works) before the
// connection gives up: MaxRetries, or more when the measured loss rate
// makes so many losses of one packet in a row likelier than 1e-9 (the
// "chance" rule in doc.go). Tail-loss probes and moves after a timeout
// do not count: they say nothing about the chunk, and a plane that dies
// would otherwise use up the retries of every chunk it held.
func (c *Conn) maxRetries() int {
	k := c.opts.MaxRetries
	if q := min(c.lossRate(), 0.95); q > 0 {
		k = max(k, int(math.Ceil(math.Log(1e-9)/math.Log(q))))
	}
	return min(k, math.MaxUint8-1)
}

// resendLost sends the first lost PSN of p again, under the same PSN.
func (c *Conn) resendLost(p *sndPath, b []byte) int {
	psn, ok := p.sb.nextLost()
	if !ok {
		c.flagPath(p)
		return 0
	}
	e := p.sb.entry(psn)
	first := !e.resent // its first transmission is the one found lost
	p.sb.resend(psn, c.now, c.nextOrder())
	c.flagPath(p)
	var n int
	switch e.kind {
	case sbProbe:
		if first && e.moved && !e.refused && wire.Seq(e.dsn).In(wire.Seq(c.s.dsnBase), wire.Seq(c.s.dsnNext)) {
			// A transmission of a chunk that went again elsewhere was
			// lost (once: the filler's own resends carry nothing). One
			// the receiver refused (an RNR NAK that came after a probe
			// moved the chunk) arrived: the PSN stays open at the
			// receiver, so it reads as a SACK hole, but it is no loss.
			if ch := c.chunk(e.dsn); ch.where != chunkFree {
				c.countLoss(ch, e.dsn)
			}
		}
		if c.state != transport.StateEstablished {
			return 0 // the loss failed the connection
		}
		n = c.encodeProbe(b, p, psn, true)
	default:
		ch := c.chunk(e.dsn)
		if e.kind == sbData {
			c.countLoss(ch, e.dsn)
		}
		if c.state != transport.StateEstablished {
			return 0 // the loss failed the connection
		}
		if f, st := c.chunkFailed(ch); f {
			ch.abort, ch.status = true, st
			p.sb.strip(psn, sbAbort)
		}
		if ch.tx < math.MaxUint8 {
			ch.tx++
		}
		wirePSN := psn
		if c.mutated(MutRetxWrongPSN) {
			wirePSN++
		}
		n = c.encodeChunk(b, p, wirePSN, e.dsn, true, 0)
		if ch.abort && e.kind == sbData {
			p.sb.strip(psn, sbAbort)
		}

	}
	c.s.inflight += int(e.size)
	// A resend does not restart the path's tail-loss timer: only new data
	// and ACK progress do, so a path whose every packet is found lost by
	// other paths' ACKs still times out and moves (probe.go).
	c.countSend(p, n)
	p.st.retransmits++
	c.st.retransmits++
	if c.cfg.Trace != nil {
		c.tracef("path %d: retransmit psn %d (dsn %d)", p.id, psn, e.dsn)
	}
	return n
}

// nextOrder returns the connection's next transmission order
// (lossdetect.go).
func (c *Conn) nextOrder() uint32 {
	c.s.rack.txOrder++
	return c.s.rack.txOrder
}

// countLoss counts a SACK-proven loss of a transmission of chunk dsn and
// gives up when there have been too many.
func (c *Conn) countLoss(ch *chunk, dsn uint32) {
	if ch.losses < math.MaxUint8 {
		ch.losses++
	}
	if int(ch.losses) > c.maxRetries() {
		if c.cfg.Trace != nil {
			c.tracef("dsn %d lost %d times: giving up", dsn, ch.losses)
		}
		c.giveUp(ch)
	}
}

// giveUp fails the connection when a chunk has been lost too often.
func (c *Conn) giveUp(ch *chunk) {
	if ch.job < 0 {
		c.fail(transport.StatusRetryExceeded, ch.msn, true)
	} else {
		c.fail(transport.StatusRetryExceeded, 0, false)
	}
}
