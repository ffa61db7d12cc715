package uverbs

import (
	"fmt"
	"net/netip"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/verbsabi"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// listener is a port a client accepts connections on. Connections that
// arrive before an ACCEPT wait in the backlog (already accepted by the
// NIC: WRITEs into the listener's PD land, SENDs wait for receives).
type listener struct {
	h       uint32
	c       *client
	pd      *pd
	port    uint16
	cap     int
	backlog []*softnic.Conn
	waiting []*qp // QPs whose ACCEPT waits for a connection, oldest first
}

// idleQP returns request r's QP if it exists and is neither connected nor
// connecting (CONNECT and ACCEPT need one); otherwise it fails r and
// returns nil.
func (c *client) idleQP(now sim.Time, r *verbsabi.Request) *qp {
	q := c.qps[r.QP]
	switch {
	case q == nil:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeNoObject, "no QP %d", r.QP)
		return nil
	case q.conn != nil || q.pend.seq != 0 || q.state != verbsabi.QPReset:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeBusy, "QP %d is already connected or connecting", r.QP)
		return nil
	}
	return q
}

func (c *client) connect(now sim.Time, r *verbsabi.Request) {
	e := c.ep
	q := c.idleQP(now, r)
	if q == nil {
		return
	}
	peer := netip.AddrFrom4(r.Addr)
	switch {
	case r.Port == 0:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeInvalid, "port 0 is the lab's own (mrlab's workloads): connect to a port of 1..65535")
		return
	case peer == netip.AddrFrom4(e.addr) || !peer.IsGlobalUnicast():
		c.fail(now, r.Op, r.Seq, verbsabi.CodeInvalid, "cannot connect host %s to %v: want another host's address", e.cfg.Host, peer)
		return
	}
	conn, err := e.cfg.NIC.Dial(peer, softnic.ConnOptions{Transport: q.kind, PD: q.pd.pd, SendCQ: c.nicCQ, RecvCQ: c.nicCQ,
		OnState: c.onState, Context: q, Service: r.Port})
	if err != nil {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeConnFailed, "connecting to %v: %v", netip.AddrPortFrom(peer, r.Port), err)
		return
	}
	q.pend = pending{seq: r.Seq, op: r.Op, port: r.Port}
	e.tracef(now, conn.ID(), "pid %d (%s) QP %d connecting to %v over %v", c.pid, c.name, q.h, netip.AddrPortFrom(peer, r.Port), conn.Kind())
	c.bind(now, q, conn)
}

// bind gives q its connection and hands it what the client already
// posted: receives first, so a message that arrives at once finds them.
func (c *client) bind(now sim.Time, q *qp, conn *softnic.Conn) {
	q.conn, q.kind = conn, conn.Kind()
	conn.SetContext(q)
	q.rnr.apply(conn)
	c.bound = append(c.bound, q)
	q.setState(stateOf(conn.State()))
	sp, rp := q.sq.Producer(), q.rq.Producer()
	c.drain(q, &q.rq, rp)
	c.drain(q, &q.sq, sp)
	c.publish()
	c.settle(now, q)
}

// unbind stops polling q's rings.
func (c *client) unbind(q *qp) {
	for i, x := range c.bound {
		if x == q {
			c.bound = append(c.bound[:i], c.bound[i+1:]...)
			break
		}
	}
}

// settle answers q's pending CONNECT or ACCEPT once its connection is
// established or has failed.
func (c *client) settle(now sim.Time, q *qp) {
	if q.pend.seq == 0 || q.conn == nil {
		return
	}
	p := q.pend
	switch q.state {
	case verbsabi.QPEstablished:
		q.pend = pending{}
		if q.ln != nil {
			q.ln = nil
		}
		c.reply(now, &verbsabi.Reply{Op: p.op, Seq: p.seq, ConnID: q.conn.ID(), Peer: q.conn.Peer().As4(), Port: p.port,
			Trans: transportOf(q.conn.Kind())})
		c.ep.tracef(now, q.conn.ID(), "pid %d (%s) QP %d established with %v", c.pid, c.name, q.h, q.conn.Peer())
	case verbsabi.QPClosed, verbsabi.QPError:
		q.pend = pending{}
		q.ln = nil
		what := fmt.Sprintf("connection to %v over %v failed: nothing accepted it (no listener on that port, or no path)",
			netip.AddrPortFrom(q.conn.Peer(), p.port), q.kind)
		if p.op == verbsabi.OpAccept {
			what = fmt.Sprintf("connection from %v failed before it was established", q.conn.Peer())
		}
		c.fail(now, p.op, p.seq, verbsabi.CodeConnFailed, "%s", what)
	}
}

func transportOf(k transport.Kind) uint8 {
	if k == transport.RoCEv2 {
		return verbsabi.TransportRoCEv2
	}
	return verbsabi.TransportMetaRoCE
}

// onState follows the client's connections: a QP's state goes to its
// ring; a backlog connection that fails leaves the backlog.
func (c *client) onState(conn *softnic.Conn, s transport.State) {
	now := c.ep.set.now()
	switch x := conn.Context().(type) {
	case *qp:
		if x.dead {
			return
		}
		// A QP the lab broke (its CQ overran, a bad ring index) stays in
		// ERROR as an RC QP does after a fatal error: closing its
		// connection must not make it read CLOSED, a clean close.
		if !x.broken {
			x.setState(stateOf(s))
		}
		c.settle(now, x)
		if s == transport.StateClosed || s == transport.StateError {
			c.ep.tracef(now, conn.ID(), "pid %d (%s) QP %d %v", c.pid, c.name, x.h, s)
		}
	case *listener:
		if s == transport.StateClosed || s == transport.StateError {
			x.drop(conn)
		}
	}
}

func (c *client) listen(now sim.Time, r *verbsabi.Request) {
	e := c.ep
	lim := &e.cfg.Limits
	p := c.pds[r.PD]
	switch {
	case p == nil:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeNoObject, "no protection domain %d", r.PD)
		return
	case r.Port == 0:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeInvalid, "port 0 is the lab's own (mrlab's workloads): listen on a port of 1..65535")
		return
	case e.ports[r.Port] != nil:
		o := e.ports[r.Port].c
		c.fail(now, r.Op, r.Seq, verbsabi.CodeBusy, "port %d on host %s is in use by pid %d (%s)", r.Port, e.cfg.Host, o.pid, o.name)
		return
	case uint32(len(c.lns)) >= lim.MaxListeners:
		c.limited++
		c.fail(now, r.Op, r.Seq, verbsabi.CodeLimit, "listener limit: %d per process", lim.MaxListeners)
		return
	case uint32(r.Backlog) > lim.MaxBacklog:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeInvalid, "backlog %d: at most %d", r.Backlog, lim.MaxBacklog)
		return
	}
	l := &listener{h: c.handleID(), c: c, pd: p, port: r.Port, cap: int(r.Backlog)}
	if l.cap == 0 {
		l.cap = int(min(16, lim.MaxBacklog))
	}
	if err := e.cfg.NIC.Listen(&softnic.ListenOptions{
		ConnOptions: softnic.ConnOptions{PD: p.pd, SendCQ: c.nicCQ, RecvCQ: c.nicCQ, OnState: c.onState, Service: r.Port},
		OnConn:      l.arrived,
	}); err != nil {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeInvalid, "listening on port %d: %v", r.Port, err)
		return
	}
	p.refs++
	c.lns[l.h] = l
	e.ports[r.Port] = l
	c.reply(now, &verbsabi.Reply{Op: r.Op, Seq: r.Seq, Handle: l.h})
	e.tracef(now, 0, "pid %d (%s) listening on port %d", c.pid, c.name, r.Port)
}

// arrived takes a connection the NIC accepted for l's port: the oldest
// waiting ACCEPT gets it, else the backlog, else it is closed (the
// dialer's CONNECT fails).
func (l *listener) arrived(conn *softnic.Conn) {
	c := l.c
	now := c.ep.set.now()
	if len(l.waiting) > 0 {
		q := l.waiting[0]
		l.waiting = l.waiting[1:]
		c.ep.tracef(now, conn.ID(), "pid %d (%s) QP %d accepted a connection from %v on port %d", c.pid, c.name, q.h, conn.Peer(), l.port)
		c.bind(now, q, conn)
		return
	}
	if len(l.backlog) < l.cap {
		conn.SetContext(l)
		l.backlog = append(l.backlog, conn)
		return
	}
	conn.Close()
	c.ep.tracef(now, conn.ID(), "pid %d (%s) refused a connection from %v on port %d: backlog of %d full", c.pid, c.name, conn.Peer(), l.port, l.cap)
}

// drop removes a failed connection from the backlog.
func (l *listener) drop(conn *softnic.Conn) {
	for i, x := range l.backlog {
		if x == conn {
			l.backlog = append(l.backlog[:i], l.backlog[i+1:]...)
			return
		}
	}
}

// unwait removes q from the ACCEPTs waiting.
func (l *listener) unwait(q *qp) {
	for i, x := range l.waiting {
		if x == q {
			l.waiting = append(l.waiting[:i], l.waiting[i+1:]...)
			break
		}
	}
	q.ln = nil
}

func (c *client) accept(now sim.Time, r *verbsabi.Request) {
	l := c.lns[r.Listener]
	if l == nil {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeNoObject, "no listener %d", r.Listener)
		return
	}
	q := c.idleQP(now, r)
	if q == nil {
		return
	}
	if q.pd != l.pd {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeInvalid, "QP %d is in protection domain %d, the listener's is %d", q.h, q.pd.h, l.pd.h)
		return
	}
	q.pend = pending{seq: r.Seq, op: r.Op, port: l.port}
	for len(l.backlog) > 0 {
		conn := l.backlog[0]
		l.backlog = l.backlog[1:]
		if s := conn.State(); s == transport.StateClosed || s == transport.StateError {
			continue
		}
		c.ep.tracef(now, conn.ID(), "pid %d (%s) QP %d accepted a connection from %v on port %d", c.pid, c.name, q.h, conn.Peer(), l.port)
		c.bind(now, q, conn)
		return
	}
	q.ln = l
	l.waiting = append(l.waiting, q)
}

func (c *client) stopListen(now sim.Time, r *verbsabi.Request) {
	l := c.lns[r.Listener]
	if l == nil {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeNoObject, "no listener %d", r.Listener)
		return
	}
	c.dropListener(now, l)
	c.reply(now, &verbsabi.Reply{Op: r.Op, Seq: r.Seq})
}

// dropListener stops accepting on l's port: backlog connections close,
// waiting ACCEPTs are canceled.
func (c *client) dropListener(now sim.Time, l *listener) {
	e := c.ep
	e.cfg.NIC.StopListening(l.port)
	delete(e.ports, l.port)
	for _, conn := range l.backlog {
		conn.SetContext(nil)
		conn.Close()
	}
	l.backlog = nil
	for _, q := range l.waiting {
		q.ln = nil
		if q.pend.seq != 0 {
			c.fail(now, q.pend.op, q.pend.seq, verbsabi.CodeCanceled, "listener on port %d closed", l.port)
			q.pend = pending{}
		}
	}
	l.waiting = nil
	l.pd.refs--
	delete(c.lns, l.h)
}

// cancel ends a pending CONNECT or ACCEPT. An ACCEPT still waiting leaves
// its QP as it was; a connection already under way is closed and its QP
// left in the error state.
func (c *client) cancel(now sim.Time, r *verbsabi.Request) {
	for _, q := range c.qps {
		if q.pend.seq != r.Target || q.pend.seq == 0 {
			continue
		}
		p := q.pend
		q.pend = pending{}
		if q.ln != nil {
			q.ln.unwait(q)
		}
		if q.conn != nil {
			q.conn.SetContext(nil)
			q.conn.Close()
			c.unbind(q)
			q.setState(verbsabi.QPError)
		}
		c.fail(now, p.op, p.seq, verbsabi.CodeCanceled, "%v canceled", p.op)
		break
	}
	c.reply(now, &verbsabi.Reply{Op: r.Op, Seq: r.Seq})
}
