package rocev2

import (
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

// sendWQE is a posted WRITE, SEND or READ.
type sendWQE struct {
	wr     transport.WorkRequest
	psn    ib.PSN // first PSN, assigned when the WQE is first sent
	npkts  int    // PSNs it uses (a READ uses one per response packet)
	length int
	rcvd   int              // READ: response packets placed so far
	bad    transport.Status // a local protection error found at post or send time
}

// requester is the sending half of a QP: a send queue, PSNs and go-back-N.
//
// The send queue is a ring indexed by ever-growing positions:
//
//	head <= next <= assigned <= tail
//
// [head, tail) are uncompleted WQEs; those before assigned have PSNs; next
// is the WQE holding nxt, the next PSN to send. PSNs: una (oldest
// unacknowledged) <= nxt <= hi (one past the highest ever sent) <= postPSN
// (first PSN of the next WQE to get one). Go-back-N moves nxt (and next)
// back; ACKs move una (and head) forward.
type requester struct {
	o        *Options
	q        []sendWQE
	head     uint64
	next     uint64
	assigned uint64
	tail     uint64

	startPSN, postPSN ib.PSN
	una, nxt, hi      ib.PSN

	window      int
	sinceAckReq int
	retries     int // left before StatusRetryExceeded; reset by progress
	rnrRetries  int // left before StatusRNRRetryExceeded; reset by progress
	rnrLimit    int // rnr_retry: Options.RNRRetry unless SetRNRRetry; 7 is forever
	ackDeadline sim.Time
	rnrUntil    sim.Time // 0 unless waiting out an RNR NAK
	// retrying is set when a NAK or a gap starts a go-back-N retry and
	// cleared by progress. While it is set, further NAKs and gaps belong to
	// the same loss episode (packets that were already in flight) and are
	// ignored, as rxe's started_retry does; only the ACK timeout acts.
	retrying bool
	readsOut int // READ requests sent whose data is not all in
	maxReads int

	// Loss recovery of current NICs (selrepeat.go): the selective-repeat
	// resend queue, the round-trip estimator behind the adaptive timer
	// and the transmit window, the adaptive timer's backoff, the slow
	// restart window (0: not restarting) and when progress last came.
	conn *Conn // for the line rate and the negotiated MTU
	// recovering is set by a selective-repeat timeout until una passes
	// recoverTo (hi at the timeout): every ACK short of it means the
	// responder's next hole, sent before the timeout, is lost too
	// (NewReno's partial ACK), and that PSN is resent at once.
	recovering bool
	recoverTo  ib.PSN
	// lastResent and lastResentAt are the last selective resend: a NAK
	// for the same PSN within a round trip of it is a repeat the resend
	// already answers.
	lastResent   ib.PSN
	lastResentAt sim.Time
	rs           resendQueue
	rtt          rttEstimator
	backoff      int
	cwnd         int
	progAt       sim.Time
}

func (r *requester) init(o *Options, start ib.PSN, window int) {
	r.o = o
	r.q = make([]sendWQE, 16)
	r.startPSN, r.postPSN, r.una, r.nxt, r.hi = start, start, start, start, start
	r.window = window
	r.retries, r.rnrRetries, r.rnrLimit = o.RetryCount, o.RNRRetry, o.RNRRetry
	r.ackDeadline = sim.Never
	r.maxReads = o.MaxReads
}

func (r *requester) at(pos uint64) *sendWQE { return &r.q[pos&uint64(len(r.q)-1)] }

// npkts is the number of packets (PSNs) of an n-byte message.
func npkts(n, mtu int) int {
	if n == 0 {
		return 1
	}
	return (n + mtu - 1) / mtu
}

// post queues a work request, checking its local SGEs now so that a bad
// one fails in order, as a completion, when it reaches the head.
func (r *requester) post(c *Conn, wr *transport.WorkRequest) error {
	switch wr.Op {
	case transport.OpWrite, transport.OpWriteImm, transport.OpSend, transport.OpSendImm, transport.OpRead:
	default:
		return transport.ErrBadRequest
	}
	if wr.NumSGE < 0 || wr.NumSGE > transport.MaxSGE {
		return transport.ErrBadRequest
	}
	n := wr.Len()
	if n > 1<<31 {
		return transport.ErrBadRequest
	}
	if int(r.tail-r.head) >= r.o.SendQueue {
		return transport.ErrQueueFull
	}
	if int(r.tail-r.head) == len(r.q) {
		r.grow()
	}
	w := r.at(r.tail)
	*w = sendWQE{wr: *wr, length: n}
	var access transport.Access
	if wr.Op == transport.OpRead {
		access = transport.AccessLocalWrite
	}
	for i := 0; i < wr.NumSGE; i++ {
		s := &wr.SGL[i]
		if s.Len == 0 {
			continue
		}
		if st := c.cfg.Memory.Check(s.LKey, s.Addr, int(s.Len), access); st != transport.StatusOK {
			w.bad = transport.StatusLocalProtection
			break
		}
	}
	r.tail++
	return nil
}

// grow doubles the ring, keeping every WQE at its position.
func (r *requester) grow() {
	nq := make([]sendWQE, 2*len(r.q))
	for p := r.head; p < r.tail; p++ {
		nq[p&uint64(len(nq)-1)] = *r.at(p)
	}
	r.q = nq
}

// hasWork reports whether build could send something if the pacer allowed.
func (r *requester) hasWork() bool {
	return r.rnrUntil == 0 && (r.rs.n > 0 || r.next < r.tail && r.nxt.Diff(r.una) < r.effWindow())
}

// effWindow is the packets the requester may have outstanding: Window,
// or with TxWindow the BDP of the line rate over the smallest measured
// round trip (at least AckEvery), and during a slow restart cwnd.
func (r *requester) effWindow() int {
	w := r.window
	if r.o.TxWindow && r.rtt.ok && r.conn != nil && r.conn.cfg.LineRate > 0 {
		bdp := int(r.conn.cfg.LineRate*r.rtt.min.Seconds()/8/float64(r.conn.mtu)) + 1
		w = min(w, max(bdp, r.o.AckEvery))
	}
	if r.cwnd > 0 {
		w = min(w, r.cwnd)
	}
	return w
}

// rto is the local ACK timer: AckTimeout, or with AdaptiveRetrans the
// measured srtt + 4 rttvar (at least AdaptiveMinTimeout), doubled per
// timeout without progress; AckTimeout caps both.
func (r *requester) rto() sim.Time {
	if !r.o.AdaptiveRetrans {
		return r.o.AckTimeout
	}
	t := r.rtt.rto(r.o.AdaptiveMinTimeout, r.o.AckTimeout)
	for i := 0; i < r.backoff && t < r.o.AckTimeout; i++ {
		t *= 2
	}
	return min(t, r.o.AckTimeout)
}

func (r *requester) deadline() sim.Time {
	d := r.ackDeadline
	if r.rnrUntil != 0 {
		d = min(d, r.rnrUntil)
	}
	return d
}

// build writes the request packet at nxt into b and returns its length, or
// 0 if nothing may be sent (queue empty, window full, RNR wait, READ
// limit, or a WQE with a local error in the way).
func (r *requester) build(c *Conn, now sim.Time, b []byte) int {
	if r.rnrUntil != 0 {
		return 0
	}
	if r.rs.n > 0 {
		if n := r.buildResend(c, now, b); n > 0 {
			return n
		}
	}
	if r.next == r.tail || r.nxt.Diff(r.una) >= r.effWindow() {
		return 0
	}
	w := r.at(r.next)
	if r.next == r.assigned {
		if w.bad != transport.StatusOK {
			r.checkBarrier(c, now)
			return 0
		}
		w.psn, w.npkts = r.postPSN, npkts(w.length, c.mtu)
		r.postPSN = r.postPSN.Add(w.npkts)
		r.assigned++
	}
	if w.bad != transport.StatusOK {
		r.checkBarrier(c, now)
		return 0
	}
	psn := r.nxt
	idx := psn.Diff(w.psn)
	var n int
	if w.wr.Op == transport.OpRead {
		if r.readsOut >= r.maxReads {
			return 0
		}
		n = r.buildRead(c, w, idx, b)
		if n == 0 {
			return 0
		}
		r.nxt = w.psn.Add(w.npkts)
		r.next++
		r.readsOut++
	} else {
		n = r.buildData(c, w, idx, r.nxt, false, b)
		if n == 0 {
			if w.bad != transport.StatusOK {
				r.checkBarrier(c, now)
			}
			return 0
		}
		r.nxt = r.nxt.Add(1)
		if idx == w.npkts-1 {
			r.next++
		}
	}
	c.stats.DataPackets++
	if psn.Before(r.hi) {
		c.stats.Retransmitted++
		r.rtt.retransmitted()
	} else {
		r.rtt.sent(psn, now)
	}
	if r.nxt.After(r.hi) {
		r.hi = r.nxt
	}
	r.armTimer(now)
	return n
}

// armTimer starts the ACK timer if it is not running.
func (r *requester) armTimer(now sim.Time) {
	if r.ackDeadline == sim.Never {
		r.ackDeadline = now + r.rto()
		if r.una == r.nxt || r.progAt == 0 {
			r.progAt = now
		}
	}
}

// buildResend writes the next PSN of the selective-repeat queue that is
// still unacknowledged (a WRITE or SEND packet; ackReq set, so the
// responder answers at once), or returns 0.
func (r *requester) buildResend(c *Conn, now sim.Time, b []byte) int {
	for {
		psn, ok := r.rs.pop()
		if !ok {
			return 0
		}
		if psn.Before(r.una) || !psn.Before(r.hi) {
			continue // acknowledged meanwhile, or never sent
		}
		p := r.locate(psn)
		if p >= r.assigned {
			continue
		}
		w := r.at(p)
		if w.wr.Op == transport.OpRead || w.bad != transport.StatusOK {
			continue
		}
		n := r.buildData(c, w, psn.Diff(w.psn), psn, true, b)
		if n == 0 {
			return 0
		}
		c.stats.DataPackets++
		c.stats.Retransmitted++
		c.stats.SelectiveResends++
		r.lastResent, r.lastResentAt = psn, now
		r.rtt.retransmitted()
		r.armTimer(now)
		if c.tr != nil {
			c.tr.Tracef(now, c.localID, "qp %#x: selective repeat: resend psn %d", c.qpn, psn)
		}
		return n
	}
}

// buildData writes packet idx of a WRITE or SEND with PSN psn; a resend
// asks for an ACK and leaves the coalescing count alone.
func (r *requester) buildData(c *Conn, w *sendWQE, idx int, psn ib.PSN, resend bool, b []byte) int {
	pos := ib.PositionOf(idx, w.npkts)
	last := pos == ib.PosLast || pos == ib.PosOnly
	off := idx * c.mtu
	plen := min(c.mtu, w.length-off)
	imm := last && (w.wr.Op == transport.OpWriteImm || w.wr.Op == transport.OpSendImm)
	var op ib.Opcode
	if w.wr.Op == transport.OpWrite || w.wr.Op == transport.OpWriteImm {
		op = ib.Write(pos, imm)
	} else {
		op = ib.Send(pos, imm)
	}
	hl := op.HeaderLen()
	pad := ib.PadFor(plen)
	total := hl + plen + pad + ib.ICRCSize
	if len(b) < total {
		return 0
	}
	ackReq := resend
	if !resend {
		r.sinceAckReq++
		ackReq = last || r.sinceAckReq >= r.o.AckEvery || psn.Add(1).Diff(r.una) >= r.effWindow()
		if ackReq {
			r.sinceAckReq = 0
		}
	}
	ib.BTH(b).Encode(&ib.BTHFields{Opcode: op, PadCount: pad, PKey: ib.DefaultPKey,
		DestQP: c.peerQPN, AckReq: ackReq, PSN: psn})
	h := ib.BTHSize
	if op.HasRETH() {
		ib.RETH(b[h:]).Encode(w.wr.RemoteAddr, w.wr.RKey, uint32(w.length))
		h += ib.RETHSize
	}
	if imm {
		ib.ImmDt(b[h:]).SetImm(w.wr.Imm)
		h += ib.ImmDtSize
	}
	if st := copySGL(c.cfg.Memory, w.wr.SGL[:w.wr.NumSGE], off, b[h:h+plen], false); st != transport.StatusOK {
		w.bad = st
		return 0
	}
	clear(b[h+plen : total])
	return total
}

// buildRead writes a READ request for the part of the READ from packet idx
// on (idx > 0 when a retry resumes after the responses that did arrive).
func (r *requester) buildRead(c *Conn, w *sendWQE, idx int, b []byte) int {
	const total = ib.BTHSize + ib.RETHSize + ib.ICRCSize
	if len(b) < total {
		return 0
	}
	off := idx * c.mtu
	ib.BTH(b).Encode(&ib.BTHFields{Opcode: ib.OpReadRequest, PKey: ib.DefaultPKey,
		DestQP: c.peerQPN, PSN: r.nxt})
	ib.RETH(b[ib.BTHSize:]).Encode(w.wr.RemoteAddr+uint64(off), w.wr.RKey, uint32(w.length-off))
	clear(b[ib.BTHSize+ib.RETHSize : total])
	return total
}

// receive handles ACKs, NAKs and READ responses.
func (r *requester) receive(c *Conn, now sim.Time, pk *ib.Packet) {
	psn := pk.BTH.PSN()
	if pk.BTH.Opcode().Class() == ib.ClassReadResponse {
		r.readResponse(c, now, pk)
		return
	}
	syn := pk.AETH.Syndrome()
	switch syn.Kind() {
	case ib.KindACK:
		c.stats.AcksReceived++
		r.ackThrough(c, now, psn.Add(1))
	case ib.KindRNR:
		r.rnrNAK(c, now, psn, syn)
	case ib.KindNAK:
		c.stats.NAKsReceived++
		switch syn.Value() {
		case ib.NAKSequence:
			r.sequenceNAK(c, now, psn)
		case ib.NAKRemoteAccess:
			r.remoteError(c, now, psn, syn, transport.StatusRemoteAccess)
		default:
			r.remoteError(c, now, psn, syn, transport.StatusRemoteInvalidRequest)
		}
	default:
		c.stats.Malformed++
	}
}

// ackThrough acknowledges every PSN before to: completes the WQEs it
// covers and moves una. An ACK that covers READ data that never came is
// the responder's implied NAK: una stops at the missing response and the
// READ is asked for again from there. It reports whether una moved.
func (r *requester) ackThrough(c *Conn, now sim.Time, to ib.PSN) bool {
	if !to.After(r.una) || to.After(r.hi) {
		return false
	}
	implied := false
	for r.head < r.assigned {
		w := r.at(r.head)
		if w.wr.Op == transport.OpRead && w.rcvd < w.npkts {
			exp := w.psn.Add(w.rcvd)
			if to.After(exp) {
				to, implied = exp, true
			}
			break
		}
		if to.Before(w.psn.Add(w.npkts)) {
			break
		}
		r.complete(c, transport.StatusOK)
	}
	if !to.After(r.una) {
		// Only possible for an implied NAK at una itself.
		if implied && !r.retrying && r.consumeRetry(c, now) {
			r.rewind(c, now, to, "ACK beyond missing READ response")
		}
		return false
	}
	acked := to.Diff(r.una)
	r.una = to
	r.rtt.acked(to, now)
	r.progress(c, now, acked)
	if r.recovering {
		if r.una.Before(r.recoverTo) && r.selective(r.una) {
			r.rs.push(r.una)
		} else {
			r.recovering = false
		}
	}
	if implied && r.consumeRetry(c, now) {
		r.rewind(c, now, to, "ACK beyond missing READ response")
	}
	r.checkBarrier(c, now)
	return true
}

// progress runs after una moved by acked PSNs: fresh retry budgets, no
// rewind guard, no timer backoff, a slow restart's window opened by what
// was acknowledged, the send point past anything acknowledged, and a
// restarted ACK timer.
func (r *requester) progress(c *Conn, now sim.Time, acked int) {
	r.retries, r.rnrRetries = r.o.RetryCount, r.rnrLimit
	r.retrying = false
	r.backoff, r.progAt = 0, now
	if r.cwnd > 0 {
		if r.cwnd += acked; r.cwnd >= r.window {
			r.cwnd = 0
		}
	}
	if r.nxt.Before(r.una) {
		r.nxt = r.una
		r.next = r.locate(r.una)
		r.recountReads()
	}
	if r.una != r.nxt {
		r.ackDeadline = now + r.rto()
	} else {
		r.ackDeadline = sim.Never
	}
}

// complete pops the head WQE and reports it.
func (r *requester) complete(c *Conn, st transport.Status) {
	w := r.at(r.head)
	comp := transport.Completion{ID: w.wr.ID, Op: w.wr.Op, Status: st}
	if st == transport.StatusOK {
		comp.Bytes = uint32(w.length)
	}
	if w.wr.Op == transport.OpRead && r.head < r.next && r.readsOut > 0 {
		r.readsOut--
	}
	r.head++
	if r.next < r.head {
		r.next = r.head
	}
	if r.assigned < r.head {
		r.assigned = r.head
	}
	c.done(comp)
}

// checkBarrier fails the QP when the oldest WQE carries a local error: all
// before it completed, so its error completes in order.
func (r *requester) checkBarrier(c *Conn, now sim.Time) {
	if r.head < r.tail {
		if st := r.at(r.head).bad; st != transport.StatusOK {
			c.fail(now, st, "local protection error in a posted request")
		}
	}
}

// consumeRetry spends one retry, or fails the QP when none are left.
func (r *requester) consumeRetry(c *Conn, now sim.Time) bool {
	if r.retries == 0 {
		c.fail(now, transport.StatusRetryExceeded, "transport retry count exceeded")
		return false
	}
	r.retries--
	return true
}

// locate returns the position of the WQE holding psn (assigned if psn is
// postPSN).
func (r *requester) locate(psn ib.PSN) uint64 {
	for p := r.head; p < r.assigned; p++ {
		w := r.at(p)
		if psn.Before(w.psn.Add(w.npkts)) {
			return p
		}
	}
	return r.assigned
}

func (r *requester) recountReads() {
	r.readsOut = 0
	for p := r.head; p < r.next; p++ {
		if w := r.at(p); w.wr.Op == transport.OpRead && w.rcvd < w.npkts {
			r.readsOut++
		}
	}
}

// rewind is go-back-N: send again from PSN to.
func (r *requester) rewind(c *Conn, now sim.Time, to ib.PSN, why string) {
	c.stats.Rewinds++
	if c.tr != nil {
		c.tr.Tracef(now, c.localID, "qp %#x: go-back-N (%s): rewind from psn %d to %d", c.qpn, why, r.nxt, to)
	}
	r.nxt = to
	r.next = r.locate(to)
	r.recountReads()
	r.retrying = true
	r.sinceAckReq = 0
	r.rtt.retransmitted()
}

// sequenceNAK handles a PSN sequence error NAK: the responder lost psn and
// drops everything after it, so send again from psn.
func (r *requester) sequenceNAK(c *Conn, now sim.Time, psn ib.PSN) {
	if c.tr != nil {
		c.tr.Tracef(now, c.localID, "qp %#x: NAK PSN sequence error received, expected psn %d", c.qpn, psn)
	}
	if psn.After(r.hi) {
		c.stats.Malformed++
		return
	}
	r.ackThrough(c, now, psn)
	if c.state != transport.StateEstablished || r.retrying || psn.Before(r.una) {
		return // stale, or part of a retry already under way
	}
	if r.una == r.nxt {
		return // nothing sent past it: about to send it anyway
	}
	if r.o.SelectiveRepeat && r.selective(r.una) {
		// The responder kept what followed: resend just the hole, unless
		// it went within the last round trip (a repeated NAK).
		if r.una == r.lastResent && r.lastResentAt != 0 && now-r.lastResentAt < r.rtt.rto(0, c.o.AckTimeout) {
			return
		}
		r.rs.push(r.una)
		return
	}
	// una is psn unless a READ before it still misses data; go back to the
	// oldest point either way, as rxe retries from its completer's PSN.
	if r.consumeRetry(c, now) {
		r.rewind(c, now, r.una, "NAK sequence error")
	}
}

// rnrNAK handles a receiver-not-ready NAK: wait the RNR timer, then send
// again from psn.
func (r *requester) rnrNAK(c *Conn, now sim.Time, psn ib.PSN, syn ib.Syndrome) {
	c.stats.RNRNAKsReceived++
	if psn.After(r.hi) {
		c.stats.Malformed++
		return
	}
	r.ackThrough(c, now, psn)
	if c.state != transport.StateEstablished || psn.Before(r.una) {
		return
	}
	if r.rnrLimit != 7 { // 7 means retry forever, as in IB
		if r.rnrRetries == 0 {
			c.fail(now, transport.StatusRNRRetryExceeded, "RNR retry count exceeded")
			return
		}
		r.rnrRetries--
	}
	d := ib.RNRTimer(syn.Value())
	if c.tr != nil {
		c.tr.Tracef(now, c.localID, "qp %#x: RNR NAK at psn %d, waiting %v", c.qpn, psn, d)
	}
	r.rnrUntil = now + d
	r.ackDeadline = sim.Never
	r.rewind(c, now, psn, "RNR NAK")
}

// remoteError handles a fatal NAK: the WQE holding psn fails with st and
// the QP goes to Error.
func (r *requester) remoteError(c *Conn, now sim.Time, psn ib.PSN, syn ib.Syndrome, st transport.Status) {
	if psn.After(r.hi) || psn.Before(r.una) {
		c.stats.Malformed++
		return
	}
	r.ackThrough(c, now, psn)
	c.fail(now, st, syn.String()+" received")
}

// readResponse places a READ response that arrives in order and asks again
// for the rest of the READ when one went missing.
func (r *requester) readResponse(c *Conn, now sim.Time, pk *ib.Packet) {
	q := pk.BTH.PSN()
	if !q.Before(r.hi) {
		c.stats.Malformed++
		return
	}
	if q.Before(r.una) {
		c.stats.DuplicateResponses++
		return
	}
	p := r.locate(q)
	if p >= r.assigned || r.at(p).wr.Op != transport.OpRead {
		c.stats.Malformed++
		return
	}
	w := r.at(p)
	exp := w.psn.Add(w.rcvd)
	if missing := r.firstMissing(p, exp); q != missing {
		// Responses come in order on one path: a later one means the
		// expected one was lost. Everything before the first READ still
		// missing data is done; ask again from its missing response.
		c.stats.OutOfSequence++
		r.ackThrough(c, now, missing)
		if c.state == transport.StateEstablished && !r.retrying && r.consumeRetry(c, now) {
			r.rewind(c, now, missing, "READ response missing")
		}
		return
	}
	off := w.rcvd * c.mtu
	if len(pk.Payload) != min(c.mtu, w.length-off) {
		c.stats.Malformed++
		return
	}
	r.ackThrough(c, now, q)
	if c.state != transport.StateEstablished || r.at(r.head) != w {
		return
	}
	if st := copySGL(c.cfg.Memory, w.wr.SGL[:w.wr.NumSGE], off, pk.Payload, true); st != transport.StatusOK {
		c.fail(now, st, "READ response refused by local memory")
		return
	}
	c.stats.ReadResponsesReceived++
	w.rcvd++
	r.una = q.Add(1)
	r.rtt.acked(r.una, now)
	r.progress(c, now, 1)
	if w.rcvd == w.npkts {
		r.complete(c, transport.StatusOK)
		r.checkBarrier(c, now)
	}
}

// firstMissing returns the PSN of the first READ response still missing
// among the WQEs up to position p, whose own next response is exp.
func (r *requester) firstMissing(p uint64, exp ib.PSN) ib.PSN {
	for i := r.head; i < p; i++ {
		if w := r.at(i); w.wr.Op == transport.OpRead && w.rcvd < w.npkts {
			return w.psn.Add(w.rcvd)
		}
	}
	return exp
}

// onTimer handles the local ACK timeout and the end of an RNR wait.
func (r *requester) onTimer(c *Conn, now sim.Time) {
	if r.rnrUntil != 0 && r.rnrUntil <= now {
		r.rnrUntil = 0
	}
	if r.ackDeadline > now {
		return
	}
	if r.una == r.nxt && r.rs.n == 0 {
		r.ackDeadline = sim.Never
		return
	}
	c.stats.Timeouts++
	if c.tr != nil {
		if r.o.AdaptiveRetrans {
			c.tr.Tracef(now, c.localID, "qp %#x: local ACK timeout, psn %d..%d unacknowledged (adaptive timer %v)", c.qpn, r.una, r.nxt.Add(-1), r.rto())
		} else {
			c.tr.Tracef(now, c.localID, "qp %#x: local ACK timeout, psn %d..%d unacknowledged", c.qpn, r.una, r.nxt.Add(-1))
		}
	}
	if r.o.AdaptiveRetrans {
		// NVIDIA's adaptive profile: the QP fails when no progress came
		// for retry_cnt x the ACK timeout, however many short timeouts
		// fired meanwhile.
		if now-r.progAt >= sim.Time(r.o.RetryCount)*r.o.AckTimeout {
			c.fail(now, transport.StatusRetryExceeded, "transport retry count exceeded (adaptive retransmission)")
			return
		}
		r.backoff++
	} else if !r.consumeRetry(c, now) {
		return
	}
	if r.o.SlowRestart {
		r.cwnd = 1
	}
	if r.o.SelectiveRepeat && r.selective(r.una) {
		r.rs.push(r.una)
		r.rtt.retransmitted()
		r.recovering, r.recoverTo = true, r.hi
	} else {
		r.rs.reset()
		r.rewind(c, now, r.una, "local ACK timeout")
	}
	r.ackDeadline = now + r.rto()
}

// selective reports whether psn may be resent alone: a WRITE or SEND
// packet already sent (a READ keeps go-back-N).
func (r *requester) selective(psn ib.PSN) bool {
	if !psn.Before(r.hi) {
		return false
	}
	p := r.locate(psn)
	return p < r.assigned && r.at(p).wr.Op != transport.OpRead
}

// flush completes every WQE: the oldest with st, the rest flushed.
func (r *requester) flush(c *Conn, st transport.Status) {
	r.readsOut = 0
	for r.head < r.tail {
		r.next = r.head // so complete does not count a READ twice
		r.complete(c, st)
		st = transport.StatusFlushed
	}
	r.next, r.assigned = r.tail, r.tail
	r.una, r.nxt = r.postPSN, r.postPSN
	r.ackDeadline, r.rnrUntil = sim.Never, 0
	r.rs.reset()
	r.recovering = false
}
