package uverbs

import (
	"errors"
	"sync/atomic"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/verbsabi"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// The data path, all on the loop: work the client wrote into its rings
// goes to the NIC, completions the NIC produced go into the client's CQ
// rings. Nothing here allocates or makes a system call, except the
// eventfd write that wakes a client blocked on a CQ it armed.

func atomicStore(p *uint32, v uint32) { atomic.StoreUint32(p, v) }

// poll takes the work the client posted on its connected QPs. It reports
// whether there was any.
func (c *client) poll(now sim.Time) bool {
	found := false
	for i := 0; i < len(c.bound); i++ {
		q := c.bound[i]
		// The send ring first: a client that posts a receive and then a
		// send (a credit for the peer's next message) has published the
		// receive by the time its send is visible, so reading in this
		// order and posting receives first never sends the credit ahead
		// of the receive it announces.
		sp := q.sq.Producer()
		rp := q.rq.Producer()
		if !q.rq.full && rp != q.rq.head {
			c.drain(q, &q.rq, rp)
			found = true
		}
		if !q.sq.full && sp != q.sq.head {
			c.drain(q, &q.sq, sp)
			found = true
		}
	}
	if found {
		c.publish()
	}
	return found
}

// posted reports whether any connected QP has work waiting in a ring.
func (c *client) posted() bool {
	for _, q := range c.bound {
		if q.rq.waiting() || q.sq.waiting() {
			return true
		}
	}
	return false
}

// drain posts the entries of ring r (q.sq or q.rq) up to prod to the
// connection, until the transport's queue is full (the rest waits for a
// completion). An entry the transport refuses outright completes at once
// with the refusal's status.
func (c *client) drain(q *qp, r *workRing, prod uint32) {
	if q.broken || q.conn == nil {
		return
	}
	recv := r == &q.rq
	if prod-r.head > uint32(r.Entries()) {
		why := "its send ring's producer index is out of range"
		if recv {
			why = "its receive ring's producer index is out of range"
		}
		c.breakQP(q, why)
		return
	}
	head := r.head
	for head != prod {
		verbsabi.GetWQE(r.Entry(head), &q.w)
		st, full := q.post(recv)
		if full {
			r.full = true
			break
		}
		if st != verbsabi.StatusSuccess {
			cq, op := q.scq, q.w.Opcode
			if recv {
				cq, op = q.rcq, verbsabi.OpcodeRecv
			}
			c.push(cq, &verbsabi.CQE{ID: q.w.ID, QP: q.h, Opcode: op, Status: st})
		}
		head++
		c.nposted++
	}
	r.head = head
	r.SetConsumer(head)
}

// post hands the WQE in q.w to the connection as a receive (recv) or a
// send. It returns the completion status of one refused outright, and
// full when the transport's queue has no room for it.
func (q *qp) post(recv bool) (st uint8, full bool) {
	var err error
	if recv {
		if st = recvRequest(&q.w, &q.wr); st != verbsabi.StatusSuccess {
			return st, false
		}
		err = q.conn.PostRecv(&q.wr)
	} else {
		if st = sendRequest(&q.w, &q.wr); st != verbsabi.StatusSuccess {
			return st, false
		}
		err = q.conn.PostSend(&q.wr)
	}
	if errors.Is(err, transport.ErrQueueFull) {
		return st, true
	}
	return postStatus(err), false
}

// sendRequest turns a send WQE into a work request; a WQE no transport
// could take completes with StatusLocQPOp.
func sendRequest(w *verbsabi.WQE, wr *transport.WorkRequest) uint8 {
	var op transport.Op
	switch w.Opcode {
	case verbsabi.OpcodeWrite:
		op = transport.OpWrite
	case verbsabi.OpcodeWriteImm:
		op = transport.OpWriteImm
	case verbsabi.OpcodeSend:
		op = transport.OpSend
	case verbsabi.OpcodeSendImm:
		op = transport.OpSendImm
	case verbsabi.OpcodeRead:
		op = transport.OpRead
	default:
		return verbsabi.StatusLocQPOp
	}
	if w.NumSGE > verbsabi.MaxSGE {
		return verbsabi.StatusLocQPOp
	}
	*wr = transport.WorkRequest{ID: w.ID, Op: op, Stream: w.Stream, NumSGE: int(w.NumSGE), RemoteAddr: w.RemoteAddr, RKey: w.RKey, Imm: w.Imm}
	for i := 0; i < int(w.NumSGE); i++ {
		wr.SGL[i] = transport.SGE{Addr: w.SGL[i].Addr, Len: w.SGL[i].Len, LKey: w.SGL[i].LKey}
	}
	return verbsabi.StatusSuccess
}

// recvRequest turns a receive WQE into a work request.
func recvRequest(w *verbsabi.WQE, wr *transport.WorkRequest) uint8 {
	if w.Opcode != 0 || w.NumSGE > verbsabi.MaxSGE {
		return verbsabi.StatusLocQPOp
	}
	*wr = transport.WorkRequest{ID: w.ID, Op: transport.OpRecv, NumSGE: int(w.NumSGE)}
	for i := 0; i < int(w.NumSGE); i++ {
		wr.SGL[i] = transport.SGE{Addr: w.SGL[i].Addr, Len: w.SGL[i].Len, LKey: w.SGL[i].LKey}
	}
	return verbsabi.StatusSuccess
}

// postStatus is the completion status of a work request the transport
// refused outright.
func postStatus(err error) uint8 {
	switch {
	case err == nil:
		return verbsabi.StatusSuccess
	case errors.Is(err, transport.ErrClosed), errors.Is(err, transport.ErrNotConnected):
		return verbsabi.StatusFlushed
	case errors.Is(err, transport.ErrBadRequest):
		return verbsabi.StatusLocQPOp
	}
	return verbsabi.StatusGeneral
}

// drainNIC moves the completions of the client's connections into its
// CQ rings. It runs from the NIC's CQ notification.
func (c *client) drainNIC() {
	if c.closed {
		return
	}
	for {
		n := c.nicCQ.Poll(c.wcs)
		for i := 0; i < n; i++ {
			c.route(&c.wcs[i])
			c.wcs[i] = softnic.Completion{}
		}
		if n < len(c.wcs) {
			break
		}
	}
	// Completions free room in the transports' queues.
	for i := 0; i < len(c.bound); i++ {
		q := c.bound[i]
		sp, rp := q.sq.Producer(), q.rq.Producer()
		if q.rq.full {
			q.rq.full = false
			c.drain(q, &q.rq, rp)
		}
		if q.sq.full {
			q.sq.full = false
			c.drain(q, &q.sq, sp)
		}
	}
	c.publish()
}

func (c *client) route(wc *softnic.Completion) {
	q, _ := wc.Conn.Context().(*qp)
	if q == nil || q.dead {
		return
	}
	e := verbsabi.CQE{ID: wc.ID, QP: q.h, Opcode: opcodeOf(wc.Op), Status: statusOf(wc.Status), Bytes: wc.Bytes,
		Imm: wc.Imm, Stream: wc.Stream}
	if wc.HasImm {
		e.Flags |= verbsabi.CQEFlagImm
	}
	target := q.scq
	if wc.Op == transport.OpRecv || wc.Op == transport.OpRecvImm {
		target = q.rcq
	}
	c.push(target, &e)
}

func opcodeOf(op transport.Op) uint8 {
	switch op {
	case transport.OpWrite:
		return verbsabi.OpcodeWrite
	case transport.OpWriteImm:
		return verbsabi.OpcodeWriteImm
	case transport.OpSend:
		return verbsabi.OpcodeSend
	case transport.OpSendImm:
		return verbsabi.OpcodeSendImm
	case transport.OpRead:
		return verbsabi.OpcodeRead
	case transport.OpRecvImm:
		return verbsabi.OpcodeRecvImm
	}
	return verbsabi.OpcodeRecv
}

func statusOf(s transport.Status) uint8 {
	switch s {
	case transport.StatusOK:
		return verbsabi.StatusSuccess
	case transport.StatusLocalProtection:
		return verbsabi.StatusLocProt
	case transport.StatusRemoteAccess:
		return verbsabi.StatusRemAccess
	case transport.StatusRemoteInvalidRequest:
		return verbsabi.StatusRemInvalidReq
	case transport.StatusRNRRetryExceeded:
		return verbsabi.StatusRNRRetryExc
	case transport.StatusRetryExceeded:
		return verbsabi.StatusRetryExc
	case transport.StatusFlushed:
		return verbsabi.StatusFlushed
	case transport.StatusLocalLength:
		return verbsabi.StatusLocLen
	}
	return verbsabi.StatusGeneral
}

// push writes a completion into q's ring (published by publish). A full
// ring is an overrun, as on hardware: the CQ stops, and the QPs that
// complete on it fail, since completions they owe are lost.
func (c *client) push(q *cq, e *verbsabi.CQE) {
	if q.overrun || q.mem == nil {
		return
	}
	if q.prod-q.ring.Consumer() >= uint32(q.ring.Entries()) {
		q.overrun = true
		atomicStore(verbsabi.Word(q.mem, verbsabi.CQOverrunOff), 1)
		for _, x := range c.qps {
			if x.scq == q || x.rcq == q {
				c.breakQP(x, "its CQ overran")
			}
		}
		c.markDirty(q)
		return
	}
	verbsabi.PutCQE(q.ring.Entry(q.prod), e)
	q.prod++
	c.complete++
	c.markDirty(q)
}

func (c *client) markDirty(q *cq) {
	if !q.dirty {
		q.dirty = true
		c.dirty = append(c.dirty, q)
	}
}

// publish makes written completions visible and wakes a client waiting
// on an armed CQ.
func (c *client) publish() {
	for _, q := range c.dirty {
		q.dirty = false
		if q.mem == nil {
			continue
		}
		q.ring.SetProducer(q.prod)
		if q.ring.Flag() != 0 {
			q.ring.SetFlag(0)
			verbsabi.Signal(q.efd)
			c.events++
		}
	}
	c.dirty = c.dirty[:0]
}

// breakQP stops reading a QP's rings and fails its connection: the client
// broke the ABI's rules for it (or its CQ overran).
func (c *client) breakQP(q *qp, why string) {
	if q.broken {
		return
	}
	q.broken = true
	now := c.ep.set.now()
	q.setState(verbsabi.QPError)
	if q.conn != nil {
		q.conn.Close()
		c.unbind(q)
		c.ep.tracef(now, q.conn.ID(), "pid %d (%s) QP %d failed: %s", c.pid, c.name, q.h, why)
	}
}
