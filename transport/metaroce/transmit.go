package metaroce

import (
	"math"
	"math/bits"

	"github.com/mrlab/mrlab/transport"
)

// transmitData sends one data packet on port if pacing and windows allow:
// a lost PSN again on its path, else a chunk moved off a failed path, else
// a new chunk.
func (c *Conn) transmitData(port int, b []byte) (int, transport.TxMeta) {
	if c.now < c.s.nextSend {
		c.timers.Arm(&c.paceTimer, c.s.nextSend)
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
			if n := c.resendLost(p, b); n > 0 {
				return c.dataSent(n, p)
			}
		}
	}
	if c.s.rexHead < len(c.s.rexmit) {
		dsn := c.s.rexmit[c.s.rexHead]
		ch := c.chunk(dsn)
		size := int(ch.size)
		if f, _ := c.chunkFailed(ch); f {
			size = 0
		}
		if p := c.pickPath(port, size); p != nil {
			c.s.rexHead++
			if c.s.rexHead == len(c.s.rexmit) {
				c.s.rexmit, c.s.rexHead = c.s.rexmit[:0], 0
			}
			c.st.retransmits++
			return c.dataSent(c.sendChunk(p, dsn, b), p)
		}
	}
	if job, msn, size, ok := c.nextChunkSize(); ok {
		if p := c.pickPath(port, size); p != nil {
			dsn := c.cutChunk(job, msn, size)
			return c.dataSent(c.sendChunk(p, dsn, b), p)
		}
	}
	return 0, transport.TxMeta{}
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

// pickPath chooses, round robin among the active paths of port's plane,
// one with congestion-window room for a size-byte chunk; it returns nil if
// none has room or the connection-wide in-flight cap is reached.
func (c *Conn) pickPath(port, size int) *sndPath {
	if size > 0 && c.s.inflight > 0 && c.s.inflight+size > c.inflightCap() {
		return nil
	}
	if c.s.blockedEpoch[port] == c.s.roomEpoch && size >= c.s.blockedSize[port] {
		return nil // nothing has changed since nothing fitted
	}
	ports := c.cfg.Ports
	n := (len(c.s.paths) - port + ports - 1) / ports // paths on this plane
	k := c.s.cursor[port]
	for tries := 0; tries < n; tries++ {
		if k >= n {
			k = 0
		}
		p := &c.s.paths[port+k*ports]
		k++
		if p.state != PathActive || !p.sb.room() {
			continue
		}
		if size > 0 && p.sb.inflight > 0 && p.cwnd-p.sb.inflight < size {
			continue
		}
		c.s.cursor[port] = k
		return p
	}
	c.s.blockedEpoch[port], c.s.blockedSize[port] = c.s.roomEpoch, size
	return nil
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
func (c *Conn) sendChunk(p *sndPath, dsn uint32, b []byte) int {
	ch := c.chunk(dsn)
	e := sbEntry{dsn: dsn, size: ch.size, kind: sbData}
	if f, st := c.chunkFailed(ch); f {
		ch.abort, ch.status = true, st
		e.kind, e.size = sbAbort, 0
	}
	if p.sb.empty() {
		p.rtoBase = c.now
	}
	psn := p.sb.push(e)
	ch.where, ch.path, ch.gen, ch.psn = chunkOnPath, p.id, p.gen, psn
	ch.tx++
	if ch.job < 0 {
		ch.round = c.msg(ch.msn).rnrTries
	}
	n := c.encodeChunk(b, p, psn, dsn, ch.tx > 1)
	if ch.abort && p.sb.entry(psn).kind == sbData { // gathering the payload failed
		p.sb.strip(psn, sbAbort)
	}
	c.s.inflight += int(p.sb.entry(psn).size) // after encoding: demand counts the packet once
	p.tlpBase, p.tlpSent = c.now, false
	p.st.packets++
	p.st.bytes += uint64(n)
	c.st.dataPackets++
	if c.s.lossSent++; c.s.lossSent > lossHalfLife {
		c.s.lossSent /= 2
		c.s.lossLost /= 2
	}
	if ch.tx > 1 {
		p.st.retransmits++
	}
	if c.retries(ch) > c.opts.MaxRetries {
		c.giveUp(ch)
	}
	return n
}

// retries is how many times ch has been sent for lack of an answer, the
// count MaxRetries bounds. A tail-loss probe under heavy random loss does
// not count: it re-sends the newest chunk of a path whose ACK is late,
// which at a third of packets lost each way is mostly a lost ACK; in a
// 10% per-link loss trial one chunk, probed on path after path, used up
// its 16 sends in 260us and failed a healthy connection. A dead peer is
// still caught: its paths time out and fail (AllFailedTimeout).
func (c *Conn) retries(ch *chunk) int {
	if ch.tx == math.MaxUint8 {
		return math.MaxUint8 // the count would wrap: give up
	}
	return int(ch.tx) - int(ch.probes)
}

// resendLost sends the first lost PSN of p again, under the same PSN.
func (c *Conn) resendLost(p *sndPath, b []byte) int {
	psn, ok := p.sb.nextLost()
	if !ok {
		c.flagPath(p)
		return 0
	}
	p.sb.resend(psn)
	c.flagPath(p)
	e := p.sb.entry(psn)
	var n int
	switch e.kind {
	case sbProbe:
		n = c.encodeProbe(b, p, psn, true)
	default:
		ch := c.chunk(e.dsn)
		if f, st := c.chunkFailed(ch); f {
			ch.abort, ch.status = true, st
			p.sb.strip(psn, sbAbort)
		}
		ch.tx++
		n = c.encodeChunk(b, p, psn, e.dsn, true)
		if ch.abort && e.kind == sbData {
			p.sb.strip(psn, sbAbort)
		}
		if c.retries(ch) > c.opts.MaxRetries {
			c.giveUp(ch)
		}
	}
	c.s.inflight += int(e.size)
	p.tlpBase = c.now
	p.st.packets++
	p.st.bytes += uint64(n)
	p.st.retransmits++
	c.st.retransmits++
	if c.cfg.Trace != nil {
		c.tracef("path %d: retransmit psn %d (dsn %d)", p.id, psn, e.dsn)
	}
	return n
}

// giveUp fails the connection when a chunk has been sent MaxRetries times.
func (c *Conn) giveUp(ch *chunk) {
	if ch.job < 0 {
		c.fail(transport.StatusRetryExceeded, ch.msn, true)
	} else {
		c.fail(transport.StatusRetryExceeded, 0, false)
	}
}

// lossHalfLife is how many packets the connection's loss rate averages
// over (roughly).
const lossHalfLife = 4096
