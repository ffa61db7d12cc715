package uverbs

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/sanitize"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/verbsabi"
	"github.com/mrlab/mrlab/softnic"
)

// client is one process's session on an endpoint. Fields below the
// goroutine-owned ones belong to the loop.
type client struct {
	ep      *Endpoint
	conn    *net.UnixConn
	out     chan outMsg // replies, drained by writeLoop; closed by close
	pid     int
	comm    string
	refused string // why HELLO will be refused ("" if it will not)
	// lookPending is set while a doorbell's look waits for the loop.
	lookPending atomic.Bool

	// Loop-goroutine state.
	id       uint32
	name     string
	hello    bool
	closed   bool
	db       *os.File // doorbell eventfd (the client writes, doorbellLoop reads)
	dbPage   []byte
	flagged  bool // need_wakeup is nonzero in dbPage
	nextH    uint32
	pds      map[uint32]*pd
	mrs      map[uint32]*mr // by lkey
	cqs      map[uint32]*cq
	qps      map[uint32]*qp
	bound    []*qp // QPs with a connection, polled
	lns      map[uint32]*listener
	watches  map[uint32]func() Timing
	mrBytes  uint64
	nicCQ    *softnic.CQ // every connection of this client completes here
	wcs      []softnic.Completion
	dirty    []*cq // CQs written since the last publish
	nposted  uint64
	complete uint64
	bells    uint64
	events   uint64
	limited  uint64 // requests refused at a QP or listener limit
}

// outMsg is one reply for writeLoop: the message, the descriptors to
// pass (which writeLoop closes after sending), and whether to hang up
// after it.
type outMsg struct {
	b      []byte
	fds    []int
	hangup bool
}

// readLoop decodes requests and runs each on the loop, one at a time (a
// client cannot queue more than one control message in the lab).
func (c *client) readLoop() {
	defer c.ep.rwg.Done()
	buf := make([]byte, verbsabi.MaxMessage+1)
	oob := make([]byte, verbsabi.OOBSpace()+credSpace)
	why := "closed the endpoint"
	for {
		n, oobn, flags, _, err := c.conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
				why = "socket error: " + err.Error()
			}
			break
		}
		fds, ferr := verbsabi.ParseRights(oob[:oobn])
		if ferr == nil {
			if refused := c.ep.checkSender(c, oob[:oobn]); refused != "" {
				// Every message is checked, not only the first: a process
				// that left the host, or a socket passed to a process in
				// another host, cannot drive this host's NIC.
				verbsabi.CloseFDs(fds)
				seq, op := uint32(0), verbsabi.OpHello
				if n >= verbsabi.HeaderSize {
					seq, op = verbsabi.Header(buf).Seq(), verbsabi.Header(buf).Op()
				}
				c.post(func(now sim.Time) { c.refuse(now, op, seq, refused) })
				why = ""
				break
			}
		}
		var req verbsabi.Request
		switch {
		case ferr != nil:
			err = fmt.Errorf("control message: %w", ferr)
		case flags&unix.MSG_TRUNC != 0:
			err = verbsabi.ErrTooLarge
		case flags&unix.MSG_CTRUNC != 0:
			err = fmt.Errorf("more than %d descriptors: %w", verbsabi.MaxFDs, verbsabi.ErrFDs)
		default:
			req, err = verbsabi.DecodeRequest(buf[:n], len(fds))
		}
		if err != nil {
			verbsabi.CloseFDs(fds)
			seq := uint32(0)
			if n >= verbsabi.HeaderSize {
				seq = verbsabi.Header(buf).Seq()
			}
			c.post(func(now sim.Time) { c.malformed(now, seq, err) })
			why = ""
			break
		}
		done := make(chan struct{})
		if c.post(func(now sim.Time) { defer close(done); c.handle(now, &req, fds) }) != nil {
			verbsabi.CloseFDs(fds)
			return
		}
		select {
		case <-done:
		case <-c.ep.set.loop.Done():
			return // the lab stopped; Set.Close cleans up
		}
	}
	if why != "" {
		c.post(func(now sim.Time) { c.close(now, why) })
	}
}

// post runs fn on the loop; once the loop has stopped, Set.Close cleans
// up instead.
func (c *client) post(fn func(now sim.Time)) error { return c.ep.set.loop.Post(fn) }

// writeLoop sends replies until close closes out, then hangs up.
func (c *client) writeLoop() {
	defer c.ep.wwg.Done()
	defer c.conn.Close()
	broken := false
	for m := range c.out {
		if !broken {
			var oob []byte
			if len(m.fds) > 0 {
				oob = unix.UnixRights(m.fds...)
			}
			if _, _, err := c.conn.WriteMsgUnix(m.b, oob, nil); err != nil {
				broken = true
				c.conn.Close() // the reader sees it and closes the client
			}
		}
		verbsabi.CloseFDs(m.fds)
		if m.hangup {
			c.conn.Close()
			broken = true
		}
	}
}

// doorbellLoop turns doorbell rings into a look at the client's rings:
// at most one look waits for the loop at a time, so a client that rings
// in a loop costs the lab one look per loop iteration, not one per ring.
func (c *client) doorbellLoop(db *os.File) {
	defer c.ep.wwg.Done()
	var b [8]byte
	look := func(now sim.Time) { // one closure, not one per ring
		c.lookPending.Store(false)
		c.doorbell(now)
	}
	for {
		if _, err := db.Read(b[:]); err != nil {
			return
		}
		if !c.lookPending.CompareAndSwap(false, true) {
			continue
		}
		if c.post(look) != nil {
			return
		}
	}
}

func (c *client) doorbell(now sim.Time) {
	if c.closed {
		return
	}
	c.bells++
	c.poll(now)
}

// send queues a message for the writer. A client whose queue is full is
// not reading its replies: it is closed.
func (c *client) send(now sim.Time, m outMsg) {
	if c.closed {
		verbsabi.CloseFDs(m.fds)
		return
	}
	select {
	case c.out <- m:
	default:
		verbsabi.CloseFDs(m.fds)
		c.close(now, "not reading its replies")
	}
}

// reply sends a successful reply.
func (c *client) reply(now sim.Time, r *verbsabi.Reply, fds ...int) {
	c.send(now, outMsg{b: verbsabi.AppendReply(nil, r), fds: fds})
}

// fail sends an error reply.
func (c *client) fail(now sim.Time, op verbsabi.Op, seq uint32, code verbsabi.Code, format string, args ...any) {
	r := verbsabi.Reply{Op: op, Seq: seq, Code: code, Text: fmt.Sprintf(format, args...)}
	c.send(now, outMsg{b: verbsabi.AppendReply(nil, &r)})
}

// malformed answers an undecodable message and closes the client: the
// lab cannot trust the rest of its stream.
func (c *client) malformed(now sim.Time, seq uint32, err error) {
	if c.closed {
		return
	}
	r := verbsabi.Reply{Op: verbsabi.OpHello, Seq: seq, Code: verbsabi.CodeMalformed,
		Text: fmt.Sprintf("malformed message, closing: %v", err)}
	c.send(now, outMsg{b: verbsabi.AppendReply(nil, &r), hangup: true})
	c.ep.cfg.Logf("verbs endpoint %s: pid %d (%s): malformed message: %v", c.ep.cfg.Host, c.pid, c.comm, err)
	c.close(now, "sent a malformed message: "+err.Error())
}

// refuse answers a message from a sender the endpoint does not admit
// and closes the session (its connections, memory and queues go, as when
// the process exits).
func (c *client) refuse(now sim.Time, op verbsabi.Op, seq uint32, why string) {
	if c.closed {
		return
	}
	c.fail(now, op, seq, verbsabi.CodeNotPermitted, "%s", why)
	c.ep.cfg.Logf("verbs endpoint %s: closing pid %d (%s): %s", c.ep.cfg.Host, c.pid, c.comm, why)
	c.close(now, "refused: "+why)
}

// handle runs one request. Received descriptors are closed afterwards
// whatever happened (REG_MR maps its memfd first).
func (c *client) handle(now sim.Time, r *verbsabi.Request, fds []int) {
	defer verbsabi.CloseFDs(fds)
	if c.closed {
		return
	}
	if !c.hello {
		if r.Op != verbsabi.OpHello {
			c.fail(now, r.Op, r.Seq, verbsabi.CodeNotPermitted, "the first message must be HELLO")
			c.close(now, "did not start with HELLO")
			return
		}
		c.doHello(now, r)
		return
	}
	switch r.Op {
	case verbsabi.OpHello:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeInvalid, "HELLO twice")
	case verbsabi.OpAllocPD:
		c.allocPD(now, r)
	case verbsabi.OpDeallocPD:
		c.deallocPD(now, r)
	case verbsabi.OpRegMR, verbsabi.OpRegMRAt:
		c.regMR(now, r, fds[0])
	case verbsabi.OpDeregMR:
		c.deregMR(now, r)
	case verbsabi.OpCreateCQ:
		c.createCQ(now, r)
	case verbsabi.OpDestroyCQ:
		c.destroyCQ(now, r)
	case verbsabi.OpCreateQP:
		c.createQP(now, r)
	case verbsabi.OpDestroyQP:
		c.destroyQP(now, r)
	case verbsabi.OpConnect:
		c.connect(now, r)
	case verbsabi.OpListen:
		c.listen(now, r)
	case verbsabi.OpAccept:
		c.accept(now, r)
	case verbsabi.OpStopListen:
		c.stopListen(now, r)
	case verbsabi.OpCancel:
		c.cancel(now, r)
	case verbsabi.OpWatch:
		c.watch(now, r)
	case verbsabi.OpUnwatch:
		c.unwatch(now, r)
	case verbsabi.OpQueryQP:
		c.queryQP(now, r)
	case verbsabi.OpSetRNR:
		c.setRNR(now, r)
	}
}

func (c *client) doHello(now sim.Time, r *verbsabi.Request) {
	e := c.ep
	if c.refused != "" {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeNotPermitted, "%s", c.refused)
		c.close(now, "refused")
		return
	}
	if r.Version != verbsabi.Version {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeVersion, "client speaks verbs ABI version %d; this lab speaks %d", r.Version, verbsabi.Version)
		c.close(now, "ABI version mismatch")
		return
	}
	pfd, page, err := verbsabi.CreateMapped("mrlab-verbs-doorbell", verbsabi.DoorbellPageSize)
	if err != nil {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeLimit, "creating the doorbell page: %v", err)
		c.close(now, "no doorbell page")
		return
	}
	db, err := verbsabi.NewEventfd("mrlab-verbs-doorbell")
	var dbfd int
	if err == nil {
		dbfd, err = verbsabi.DupFD(db)
		if err != nil {
			db.Close()
		}
	}
	if err != nil {
		verbsabi.Unmap(page)
		unix.Close(pfd)
		c.fail(now, r.Op, r.Seq, verbsabi.CodeLimit, "creating the doorbell: %v", err)
		c.close(now, "no doorbell")
		return
	}
	*verbsabi.Word(page, 0) = verbsabi.DoorbellMagic
	*verbsabi.Word(page, 4) = verbsabi.Version
	if e.portsUp == 0 {
		e.portsUp = e.cfg.NIC.PortsUp() | verbsabi.PortsValid
	}
	*verbsabi.Word(page, verbsabi.PortsUpOff) = e.portsUp
	e.nextID++
	// The name is the program's choice: sanitized here, where it enters
	// the lab, for every log, trace line and status that shows it.
	c.id, c.name, c.hello, c.db, c.dbPage = e.nextID, sanitize.Terminal(r.Name), true, db, page
	if c.name == "" {
		c.name = c.comm
	}
	c.pds, c.mrs, c.cqs, c.qps, c.lns = map[uint32]*pd{}, map[uint32]*mr{}, map[uint32]*cq{}, map[uint32]*qp{}, map[uint32]*listener{}
	c.watches = map[uint32]func() Timing{}
	c.nicCQ = e.cfg.NIC.CreateCQ(int(4 * e.cfg.Limits.MaxWR))
	c.nicCQ.OnCompletion(c.drainNIC)
	c.wcs = make([]softnic.Completion, 64)
	e.clients[c.id] = c
	e.set.addPolled(c)
	c.ep.wwg.Add(1)
	go c.doorbellLoop(db)
	rep := verbsabi.Reply{Op: r.Op, Seq: r.Seq, Version: verbsabi.Version, ClientID: c.id, HostAddr: e.addr,
		PathMTU: uint32(e.cfg.NIC.PathMTU()), Ports: uint32(e.cfg.NIC.Ports()), LineRate: uint64(e.cfg.NIC.Rate()),
		Host: e.cfg.Host, Limits: e.cfg.Limits, Transports: e.trans}
	c.reply(now, &rep, pfd, dbfd)
	e.tracef(now, 0, "pid %d (%s) opened the endpoint (client %d)", c.pid, c.name, c.id)
}

// setPortsUp writes the doorbell page's ports_up word and wakes the
// client's threads sleeping on it.
func (c *client) setPortsUp(m uint32) {
	w := verbsabi.Word(c.dbPage, verbsabi.PortsUpOff)
	atomicStore(w, m)
	verbsabi.WakeWord(w)
}

// setNeedWakeup writes the doorbell page's need_wakeup word: 0 while the
// loop polls, else the number of the loop's current sleep.
func (c *client) setNeedWakeup(v uint32) {
	atomicStore(verbsabi.Word(c.dbPage, verbsabi.NeedWakeupOff), v)
	c.flagged = v != 0
}

// handle allocates the next object handle (never 0).
func (c *client) handleID() uint32 {
	c.nextH++
	if c.nextH == 0 {
		c.nextH++
	}
	return c.nextH
}

// close ends the session: connections close (their peers see flushes or
// errors), listeners stop, memory is deregistered and unmapped, queues
// are freed. It runs on the loop, or after the loop stopped.
func (c *client) close(now sim.Time, why string) {
	if c.closed {
		return
	}
	c.closed = true
	e := c.ep
	e.forget(c)
	if c.hello {
		var nqp, nmr int
		mrBytes := c.mrBytes
		for _, l := range c.lns {
			c.dropListener(now, l)
		}
		for _, q := range c.qps {
			c.dropQP(now, q)
			nqp++
		}
		for _, m := range c.mrs {
			c.dropMR(m)
			nmr++
		}
		for _, q := range c.cqs {
			c.dropCQ(q)
		}
		for _, stop := range c.watches {
			stop()
		}
		c.nicCQ.OnCompletion(nil)
		e.set.removePolled(c)
		delete(e.clients, c.id)
		verbsabi.Unmap(c.dbPage)
		c.dbPage = nil
		c.db.Close()
		if why != "" {
			e.tracef(now, 0, "pid %d (%s) closed (%s): %d QPs, %d MRs (%d bytes) released", c.pid, c.name, why, nqp, nmr, mrBytes)
		}
	}
	close(c.out)
}

// watch starts a lateness watch for the client.
func (c *client) watch(now sim.Time, r *verbsabi.Request) {
	switch {
	case c.ep.cfg.Watch == nil:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeInvalid, "this lab does not report its timing")
		return
	case len(c.watches) >= MaxWatches:
		c.fail(now, r.Op, r.Seq, verbsabi.CodeLimit, "watch limit: %d open per process", MaxWatches)
		return
	}
	h := c.handleID()
	c.watches[h] = c.ep.cfg.Watch()
	c.reply(now, &verbsabi.Reply{Op: r.Op, Seq: r.Seq, Handle: h})
}

func (c *client) unwatch(now sim.Time, r *verbsabi.Request) {
	stop := c.watches[r.Watch]
	if stop == nil {
		c.fail(now, r.Op, r.Seq, verbsabi.CodeNoObject, "no watch %d", r.Watch)
		return
	}
	delete(c.watches, r.Watch)
	t := stop()
	c.reply(now, &verbsabi.Reply{Op: r.Op, Seq: r.Seq, LabNs: uint64(t.LabTime), WallNs: uint64(t.WallTime),
		MaxLateNs: uint64(t.MaxLateness), Events: t.Events, EventsLate: t.EventsLate, Lagging: t.Lagging, LoopStarved: t.LoopStarved,
		LimitPPM: uint32(t.Limit * 1e6)})
}

// status reports the client. Loop goroutine.
func (c *client) status() ClientStatus {
	s := ClientStatus{PID: c.pid, Name: c.name, QPs: len(c.qps), Connected: len(c.bound), CQs: len(c.cqs), MRs: len(c.mrs),
		MRBytes: c.mrBytes, Posted: c.nposted, Completed: c.complete, Doorbells: c.bells, Events: c.events,
		Limited: c.limited}
	for _, l := range c.lns {
		s.Listening = append(s.Listening, int(l.port))
	}
	return s
}
