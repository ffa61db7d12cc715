package metaroce

import (
	"math"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// onNak handles a refused chunk. An RNR turns the PSN into a filler (a
// probe under the same PSN, so the path's hole closes) and parks the chunk
// for a back-off; a protection or invalid-request NAK fails the message
// and resends the PSN as ABORT, which tells the receiver the sender has
// seen the error.
func (c *Conn) onNak(n wire.Nak) {
	c.st.naksReceived++
	c.ensurePaths()
	if int(n.Path()) >= len(c.s.paths) {
		c.st.dropMalformed++
		return
	}
	p := &c.s.paths[n.Path()]
	psn := n.PSN()
	if n.Gen() != p.gen || !p.sb.outstanding(psn) {
		c.st.staleAcks++
		return
	}
	e := p.sb.entry(psn)
	if e.kind == sbProbe && e.moved && !e.acked && e.dsn == n.DSN() {
		// The chunk's earlier transmission was refused: its arrival must
		// not settle the chunk (movedArrived); the copy sent since meets
		// the same answer on its own.
		e.refused = true
	}
	if e.acked || e.kind == sbProbe || e.dsn != n.DSN() || e.kind == sbAbort && n.Reason() != wire.NakRNR {
		c.st.staleAcks++
		return
	}
	ch := c.chunk(e.dsn)
	if ch.job >= 0 || ch.msn != n.MSN() || ch.where != chunkOnPath {
		c.st.dropMalformed++
		return
	}
	// A NAK answers the packet it refuses at once, echoing its timestamp:
	// a data packet's round trip. Without the sample a connection that
	// only meets RNR NAKs keeps the RTT of its probes' small packets, and
	// a refused SEND's NAK, which crosses each hop a serialization later,
	// came back after the PTO: a probe burst after every RNR retry.
	c.rttSample(p, sim.Time(c.ts()-n.EchoTS()), e.kind == sbData && int(e.size) >= c.mss)
	if !e.lost {
		c.s.inflight -= p.sb.markLost(psn)
		c.flagPath(p)
	}
	m := c.msg(ch.msn)
	switch n.Reason() {
	case wire.NakRNR:
		c.st.rnrNaks++
		p.sb.strip(psn, sbProbe)
		// Every chunk of a message sent in one round comes back refused;
		// only the first refusal of a round starts a new back-off.
		if ch.round == m.rnrTries {
			if m.rnrTries < math.MaxUint8 { // saturates: retrying forever must not wrap to 0
				m.rnrTries++
			}
			if c.rnrRetries >= 0 && int(m.rnrTries) > int(c.rnrRetries) {
				if c.cfg.Trace != nil {
					c.tracef("RNR msn %d: retries exceeded", ch.msn)
				}
				c.fail(transport.StatusRNRRetryExceeded, ch.msn, true)
				return
			}
			back := c.opts.RNRDelay << min(int(m.rnrTries)-1, 16)
			m.rnrUntil = c.now + min(back, c.opts.RTOMax)
			if c.cfg.Trace != nil {
				c.tracef("RNR msn %d stream %d: receiver has no buffer, retry %d in %v", ch.msn, m.wr.Stream, m.rnrTries, m.rnrUntil-c.now)
			}
		}
		ch.where = chunkRNR
		c.s.rnr = append(c.s.rnr, rnrWait{dsn: e.dsn, at: m.rnrUntil})
		if !c.rnrTimer.Armed() || c.rnrTimer.When() > m.rnrUntil {
			c.timers.Arm(&c.rnrTimer, m.rnrUntil)
		}
	default:
		status := transport.StatusRemoteAccess
		if n.Reason() == wire.NakInvalid {
			status = transport.StatusRemoteInvalidRequest
		}
		c.st.protectionNaks++
		if n.Reason() == wire.NakAccess {
			// Fatal to the requester's end, as a remote access error is
			// to an RC QP: the request completes with the error, every
			// other is flushed, the connection is in Error.
			if c.cfg.Trace != nil {
				c.tracef("NAK msn %d stream %d: %v, connection fails", ch.msn, m.wr.Stream, n.Reason())
			}
			c.fail(status, ch.msn, true)
			return
		}
		if c.cfg.Trace != nil && !m.failed {
			c.tracef("NAK msn %d stream %d: %v, failing the request", ch.msn, m.wr.Stream, n.Reason())
		}
		c.failMsg(ch.msn, status)
		ch.abort, ch.status = true, status
		p.sb.strip(psn, sbAbort)
	}
	c.armPath(p)
}

// onRNRTimer moves chunks whose back-off has ended to the retransmit queue.
func (c *Conn) onRNRTimer() {
	next := sim.Never
	k := 0
	for _, w := range c.s.rnr {
		if w.at <= c.now {
			if ch := c.chunk(w.dsn); ch.where == chunkRNR {
				ch.where = chunkQueued
				c.s.rexmit = append(c.s.rexmit, w.dsn)
			}
			continue
		}
		next = min(next, w.at)
		c.s.rnr[k] = w
		k++
	}
	waited := len(c.s.rnr) > 0
	c.s.rnr = c.s.rnr[:k]
	if next != sim.Never {
		c.timers.Arm(&c.rnrTimer, next)
	}
	if waited && k == 0 {
		// The wait is over: paths that held only fillers through it
		// (rnrWaiting) probe again, a PTO from now, as if they had just
		// sent.
		for i := range c.s.paths {
			p := &c.s.paths[i]
			if (p.state == PathActive || p.state == PathDraining) && !p.sb.empty() && c.holdsNoChunk(p) {
				p.tlpBase, p.tlpSent = c.now, false
				c.armPath(p)
			}
		}
	}
}
