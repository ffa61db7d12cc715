package uverbs

import (
	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/verbsabi"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// cq is a completion queue: a ring the endpoint fills and the client
// drains, and an eventfd the endpoint signals when the client armed it.
type cq struct {
	h        uint32
	mem      []byte
	ring     verbsabi.Ring
	efd      int    // the endpoint's end of the event channel
	prod     uint32 // entries written; published by publish
	reserved int    // queue entries of the QPs completing here
	refs     int    // QPs using it
	dirty    bool
	overrun  bool
}

// qp is a queue pair: send and receive rings in one mapping, and the NIC
// connection it is bound to by CONNECT or ACCEPT.
type qp struct {
	h        uint32
	c        *client
	pd       *pd
	scq, rcq *cq
	kind     transport.Kind
	mem      []byte
	sq, rq   workRing
	conn     *softnic.Conn
	state    uint32
	pend     pending   // CONNECT or ACCEPT waiting to be answered
	ln       *listener // the listener an ACCEPT waits on
	broken   bool      // its rings are no longer read (a bad index, a CQ overrun)
	dead     bool
	w        verbsabi.WQE
	wr       transport.WorkRequest
	rnr      rnrPolicy // SET_RNR's settings, applied to each connection it gets
}

// rnrPolicy is a QP's rnr_retry and min_rnr_timer as SET_RNR set them;
// mask says which (a QP without SET_RNR keeps its transport's defaults).
type rnrPolicy struct {
	mask, retry, timer uint8
}

// apply gives conn the policy, if its transport takes one.
func (p rnrPolicy) apply(conn *softnic.Conn) {
	tc, ok := conn.Transport().(transport.RNRPolicy)
	if !ok {
		return
	}
	if p.mask&verbsabi.RNRSetRetry != 0 {
		tc.SetRNRRetry(int(p.retry))
	}
	if p.mask&verbsabi.RNRSetTimer != 0 {
		tc.SetMinRNRTimer(p.timer)
	}
}

// workRing is one of a QP's work rings (send or receive) as the loop
// takes entries from it.
type workRing struct {
	verbsabi.Ring
	head uint32 // entries taken; published as the consumer index
	full bool   // the transport's queue is full: retry on a completion
}

// waiting reports whether the ring holds entries the loop may take now.
func (r *workRing) waiting() bool { return !r.full && r.Producer() != r.head }

// pending is a request answered later.
type pending struct {
	seq  uint32
	op   verbsabi.Op
	port uint16
}

func nextPow2(n uint32) uint32 {
	p := uint32(1)
	for p < n {
		p <<= 1
	}
	return p
}

func (c *client) createCQ(now sim.Time, r *verbsabi.Request) {
	lim := &c.ep.cfg.Limits
	switch {
	case r.Entries < 1 || r.Entries > lim.MaxCQE:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeInvalid, "CQ of %d entries: want 1..%d", r.Entries, lim.MaxCQE)
		return
	case uint32(len(c.cqs)) >= lim.MaxCQs:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeLimit, "completion queue limit: %d per process", lim.MaxCQs)
		return
	}
	n := nextPow2(r.Entries)
	size := verbsabi.RingBytes(int(n), verbsabi.CQESize)
	fd, mem, err := verbsabi.CreateMapped("mrlab-verbs-cq", size)
	if err != nil {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeLimit, "creating a CQ ring of %d bytes: %v", size, err)
		return
	}
	ring, _ := verbsabi.NewRing(mem, int(n), verbsabi.CQESize)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	var dup int
	if err == nil {
		if dup, err = unix.FcntlInt(uintptr(efd), unix.F_DUPFD_CLOEXEC, 0); err != nil {
			unix.Close(efd)
		}
	}
	if err != nil {
		verbsabi.Unmap(mem)
		unix.Close(fd)
		c.fail(now, r.Op, r.Seq, verbsabi.CodeLimit, "creating a CQ event channel: %v", err)
		return
	}
	q := &cq{h: c.handleID(), mem: mem, ring: ring, efd: efd}
	c.cqs[q.h] = q
	c.reply(now, &verbsabi.Reply{Op: r.Op, Seq: r.Seq, Handle: q.h, Entries: n, Size: uint64(size)}, fd, dup)
}

func (c *client) destroyCQ(now sim.Time, r *verbsabi.Request) {
	q := c.cqs[r.CQ]
	switch {
	case q == nil:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeNoObject, "no CQ %d", r.CQ)
	case q.refs > 0:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeBusy, "CQ %d is used by %d QPs", r.CQ, q.refs)
	default:
		c.dropCQ(q)
		c.reply(now, &verbsabi.Reply{Op: r.Op, Seq: r.Seq})
	}
}

func (c *client) dropCQ(q *cq) {
	verbsabi.Unmap(q.mem)
	q.mem = nil
	unix.Close(q.efd)
	delete(c.cqs, q.h)
}

func (c *client) createQP(now sim.Time, r *verbsabi.Request) {
	e := c.ep
	lim := &e.cfg.Limits
	p, scq, rcq := c.pds[r.PD], c.cqs[r.SendCQ], c.cqs[r.RecvCQ]
	var kind transport.Kind
	switch r.Trans {
	case verbsabi.TransportMetaRoCE:
		kind = transport.MetaRoCE
	case verbsabi.TransportRoCEv2:
		kind = transport.RoCEv2
	}
	switch {
	case p == nil:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeNoObject, "no protection domain %d", r.PD)
		return
	case scq == nil || rcq == nil:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeNoObject, "no CQ %d", map[bool]uint32{true: r.SendCQ, false: r.RecvCQ}[scq == nil])
		return
	case kind == 0 && r.Trans != 0:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeInvalid, "transport %d: want %d (metaroce), %d (rocev2) or 0 (the lab's default)", r.Trans,
			verbsabi.TransportMetaRoCE, verbsabi.TransportRoCEv2)
		return
	case kind != 0 && e.trans&(1<<r.Trans) == 0:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeNoTransport, "host %s's NIC does not speak %v", e.cfg.Host, kind)
		return
	case r.MaxSend < 1 || r.MaxSend > lim.MaxWR || r.MaxRecv < 1 || r.MaxRecv > lim.MaxWR:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeInvalid, "queues of %d send and %d receive entries: want 1..%d each", r.MaxSend, r.MaxRecv, lim.MaxWR)
		return
	case uint32(len(c.qps)) >= lim.MaxQPs:
		c.limited++
		c.fail(now, r.Op, r.Seq, verbsabi.CodeLimit, "queue pair limit: %d per process", lim.MaxQPs)
		return
	case e.qps >= e.cfg.MaxHostQPs:
		c.limited++
		c.fail(now, r.Op, r.Seq, verbsabi.CodeLimit, "queue pair limit of host %s: %d open across its programs", e.cfg.Host, e.cfg.MaxHostQPs)
		return
	}
	ns, nr := int(nextPow2(r.MaxSend)), int(nextPow2(r.MaxRecv))
	// A CQ must have room for every completion its QPs can have
	// outstanding, so that a client that polls never overruns it.
	needS, needR := scq.reserved+ns, rcq.reserved+nr
	if scq == rcq {
		needS += nr
		needR = needS
	}
	for _, x := range []struct {
		q    *cq
		need int
	}{{scq, needS}, {rcq, needR}} {
		if x.need > x.q.ring.Entries() {
			c.fail(now, r.Op, r.Seq, verbsabi.CodeInvalid,
				"CQ %d has %d entries; with this QP its QPs can have %d completions outstanding: create a CQ of at least %d entries",
				x.q.h, x.q.ring.Entries(), x.need, x.need)
			return
		}
	}
	sqBytes, rqBytes := verbsabi.RingBytes(ns, verbsabi.WQESize), verbsabi.RingBytes(nr, verbsabi.WQESize)
	fd, mem, err := verbsabi.CreateMapped("mrlab-verbs-qp", sqBytes+rqBytes)
	if err != nil {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeLimit, "creating QP rings of %d bytes: %v", sqBytes+rqBytes, err)
		return
	}
	q := &qp{h: c.handleID(), c: c, pd: p, scq: scq, rcq: rcq, kind: kind, mem: mem}
	q.sq.Ring, _ = verbsabi.NewRing(mem[:sqBytes], ns, verbsabi.WQESize)
	q.rq.Ring, _ = verbsabi.NewRing(mem[sqBytes:], nr, verbsabi.WQESize)
	scq.reserved += ns
	rcq.reserved += nr
	scq.refs++
	rcq.refs++
	p.refs++
	c.qps[q.h] = q
	e.qps++
	c.reply(now, &verbsabi.Reply{Op: r.Op, Seq: r.Seq, Handle: q.h, SQEntries: uint32(ns), RQEntries: uint32(nr),
		SQOffset: 0, RQOffset: uint64(sqBytes), Size: uint64(sqBytes + rqBytes)}, fd)
}

func (c *client) destroyQP(now sim.Time, r *verbsabi.Request) {
	q := c.qps[r.QP]
	if q == nil {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeNoObject, "no QP %d", r.QP)
		return
	}
	c.dropQP(now, q)
	c.reply(now, &verbsabi.Reply{Op: r.Op, Seq: r.Seq})
}

// dropQP closes the QP's connection (its queued work is flushed, the peer
// told) and frees its rings. Completions still to come for it are
// discarded.
func (c *client) dropQP(now sim.Time, q *qp) {
	if q.pend.seq != 0 {
		c.fail(now, q.pend.op, q.pend.seq, verbsabi.CodeCanceled, "QP %d destroyed", q.h)
		q.pend = pending{}
	}
	if q.ln != nil {
		q.ln.unwait(q)
	}
	if q.conn != nil {
		q.conn.SetContext(nil)
		q.conn.Close()
		c.ep.tracef(now, q.conn.ID(), "pid %d (%s) closed QP %d", c.pid, c.name, q.h)
		c.unbind(q)
	}
	q.dead = true
	verbsabi.Unmap(q.mem)
	q.mem = nil
	q.scq.reserved -= q.sq.Entries()
	q.rcq.reserved -= q.rq.Entries()
	q.scq.refs--
	q.rcq.refs--
	q.pd.refs--
	delete(c.qps, q.h)
	c.ep.qps--
}

// setState records the QP's state in its send ring.
func (q *qp) setState(s uint32) {
	q.state = s
	if q.mem != nil {
		q.sq.SetFlag(s)
	}
}

func stateOf(s transport.State) uint32 {
	switch s {
	case transport.StateConnecting:
		return verbsabi.QPConnecting
	case transport.StateEstablished:
		return verbsabi.QPEstablished
	case transport.StateClosed:
		return verbsabi.QPClosed
	}
	return verbsabi.QPError
}

// queryQP reports a QP's state and its connection's counters (zero before
// it is connected).
func (c *client) queryQP(now sim.Time, r *verbsabi.Request) {
	q := c.qps[r.QP]
	if q == nil {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeNoObject, "no QP %d", r.QP)
		return
	}
	rep := verbsabi.Reply{Op: r.Op, Seq: r.Seq, QPState: q.state}
	if q.conn != nil {
		cs, ts := q.conn.Stats(), q.conn.TransportStats()
		rep.ConnID, rep.Trans = q.conn.ID(), transportOf(q.conn.Kind())
		rep.TxPackets, rep.RxPackets, rep.CEReceived = cs.TxPackets, cs.RxPackets, cs.CEReceived
		rep.Retransmits, rep.Timeouts, rep.ECNEchoes = ts.Retransmits, ts.Timeouts, ts.ECNEchoes
	}
	c.reply(now, &rep)
}

// setRNR records a QP's RNR policy (SET_RNR) and applies it to its
// connection, now if it has one, else when it gets one (bind).
func (c *client) setRNR(now sim.Time, r *verbsabi.Request) {
	q := c.qps[r.QP]
	if q == nil {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeNoObject, "no QP %d", r.QP)
		return
	}
	if r.RNRMask&verbsabi.RNRSetRetry != 0 {
		q.rnr.retry = r.RNRRetry
	}
	if r.RNRMask&verbsabi.RNRSetTimer != 0 {
		q.rnr.timer = r.RNRTimer
	}
	q.rnr.mask |= r.RNRMask
	if q.conn != nil {
		q.rnr.apply(q.conn)
	}
	c.reply(now, &verbsabi.Reply{Op: r.Op, Seq: r.Seq})
}
