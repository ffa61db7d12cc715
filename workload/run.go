package workload

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sort"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// cqDepth is each host's completion queue size. The runner drains its
// queues at every notification, so they hold only what one instant
// produced; an overrun would be counted and fail the run.
const cqDepth = 8192

// handler receives the completions of one connection end.
type handler interface {
	complete(now sim.Time, wc *softnic.Completion)
}

// engine is one workload kind.
type engine interface {
	// setup registers memory and asks for connections (r.connect).
	setup(r *runner) error
	// start posts the first work once every connection is up.
	start(now sim.Time)
	// verify compares destination memory with what was sent.
	verify() DataCheck
	// outstanding describes unfinished work, for timeout errors.
	outstanding() string
}

// runner is one run of a workload on a cluster.
type runner struct {
	cl      *Cluster
	spec    Spec
	eng     engine
	hosts   []int  // hosts taking part, in cluster order
	source  []bool // by host: sends application data
	regions []*softnic.MR
	pd      []*softnic.PD
	cq      []*softnic.CQ
	poll    []softnic.Completion
	onDone  func(*Result, error)

	queues  []*pairQueue
	pending map[[2]int]*pairQueue // (dialer, acceptor) -> queue
	waiting int
	// rails draws each host pair's first plane for its RoCEv2 QPs.
	rails *rand.Rand

	timer    sim.Timer
	t0, tEnd sim.Time
	started  bool
	finished bool

	res      Result
	oracle   oracle
	msgTimes []sim.Time
	flowTime []sim.Time
	posts    []sim.Time // every post of a measured message, in time order
	doneAt   []sim.Time // every completed message, in time order
	base     counters

	// Duration runs: what completed in the measured window, and in the
	// current reporting interval.
	winMsgs, winBytes int64
	iv                Interval
	ivTimer           sim.Timer

	// Partitioned runs (partitioned.go): the group, one shard per
	// partition, the grid-instant decision timer, flows to finish, the
	// time the last one did, and host indices by address.
	g          *sim.Group
	grid       sim.Time // a plain loop's grid step (Cluster.Grid)
	shards     []*shard
	act        sim.Timer
	flowsTotal int
	lastDone   sim.Time
	addrIdx    map[netip.Addr]int
}

// endpoint is a connection end's Context: its setup request and handler.
type endpoint struct {
	req *connReq
	h   handler
}

// connReq is one connection to open, dialed from host from to host to.
type connReq struct {
	from, to  int
	dialH     handler
	accH      handler
	dial, acc *softnic.Conn
	ready     bool
	// port is the plane a RoCEv2 QP is bound to.
	port int
}

// pairQueue holds the connections one host dials to another. They are
// dialed one after the other, so the acceptor can tell which request an
// incoming connection answers: the next one from that peer.
type pairQueue struct {
	reqs []*connReq
	next int // index of the request being dialed
	// rail is the plane of the pair's first RoCEv2 QP; the k-th goes on
	// rail+k (mod the dialer's ports).
	rail int
}

// Start sets up spec on the cluster and, once every connection is
// established, runs it; onDone runs on the loop when the workload has
// finished (or failed). Start must run on the loop's goroutine.
func Start(cl *Cluster, spec Spec, onDone func(*Result, error)) error {
	_, err := Launch(cl, spec, onDone)
	return err
}

// Running is a workload started with Launch.
type Running struct{ r *runner }

// ErrCancelled is the error a cancelled run ends with.
var ErrCancelled = errors.New("workload cancelled")

// Cancel ends the run now, as a failure wrapping ErrCancelled and why:
// its connections are closed and onDone gets what was measured so far. It
// does nothing once the run has ended. Call it on the loop's goroutine.
func (h *Running) Cancel(why error) {
	h.r.fail(fmt.Errorf("%s: %w: %w", h.r.spec.Name, ErrCancelled, why))
}

// Launch is Start returning a handle that can cancel the run (a live
// lab's perf run whose client went away).
func Launch(cl *Cluster, spec Spec, onDone func(*Result, error)) (*Running, error) {
	if err := cl.check(); err != nil {
		return nil, err
	}
	spec, err := spec.withDefaults(cl, cl.Hosts)
	if err != nil {
		return nil, err
	}
	r := &runner{cl: cl, spec: spec, onDone: onDone, pending: map[[2]int]*pairQueue{},
		rails: sim.NewRand(spec.Seed, "workload/rails"), addrIdx: make(map[netip.Addr]int, len(cl.NICs))}
	// Hosts by address for accepted: a linear search per accepted
	// connection was a third of a k=64 fat tree's CPU (65,536 hosts).
	for i, n := range cl.NICs {
		r.addrIdx[n.Addr()] = i
	}
	r.eng, err = newEngine(spec)
	if err != nil {
		return nil, err
	}
	n := len(cl.NICs)
	r.pd = make([]*softnic.PD, n)
	r.cq = make([]*softnic.CQ, n)
	r.source = make([]bool, n)
	r.poll = make([]softnic.Completion, 64)
	if err := r.gridded(); err != nil {
		return nil, err
	}
	if err := r.eng.setup(r); err != nil {
		return nil, err
	}
	if testAfterSetup != nil {
		testAfterSetup(r)
	}
	for i, nic := range cl.NICs {
		if r.pd[i] == nil {
			continue
		}
		if err := nic.Listen(&softnic.ListenOptions{
			ConnOptions: softnic.ConnOptions{PD: r.pd[i], SendCQ: r.cq[i], RecvCQ: r.cq[i], OnState: r.onState},
			OnConn:      r.accepted,
		}); err != nil {
			return nil, fmt.Errorf("starting %s: %w", spec.Name, err)
		}
	}
	now := cl.Loop.Now()
	r.timer.Init(func(now sim.Time, _ any) { r.timeout(now) }, nil)
	cl.Loop.Arm(&r.timer, now+spec.Timeout)
	r.res = Result{
		Workload: spec.Name, Transport: spec.Transport.String(), Lab: cl.Name, Seed: spec.Seed,
		Size: spec.Size, Iterations: spec.Iterations, QueueDepth: spec.QueueDepth,
		Conns: spec.Conns, Streams: spec.Streams, CQMod: spec.CQMod, Duration: spec.Duration,
		MTU: cl.NICs[0].PathMTU(), Payload: spec.Payload.String(),
	}
	r.ivTimer.Init(func(now sim.Time, _ any) { r.interval(now) }, nil)
	for _, q := range r.queues {
		if err := r.dial(q.reqs[0]); err != nil {
			return nil, err
		}
	}
	if r.waiting == 0 {
		return nil, fmt.Errorf("%w: %s needs at least one connection", ErrBadSpec, spec.Name)
	}
	return &Running{r}, nil
}

// Run runs spec on the cluster's loop until it finishes and returns its
// result. A failed data check is an error wrapping ErrDataDiff, and a
// timeout one wrapping ErrTimeout; both come with the result measured.
func Run(cl *Cluster, spec Spec) (*Result, error) {
	var (
		res  *Result
		rerr error
		fin  bool
	)
	if err := Start(cl, spec, func(r *Result, err error) {
		res, rerr, fin = r, err, true
		if cl.Group != nil {
			cl.Group.Stop()
		}
	}); err != nil {
		return nil, err
	}
	if g := cl.Group; g != nil {
		if err := g.Run(sim.Never); err != nil {
			return res, fmt.Errorf("%s: partitioned run: %w", spec.Name, err)
		}
		if !fin {
			return res, fmt.Errorf("%s at %v: %w", spec.Name, g.Now(), ErrStalled)
		}
		return res, rerr
	}
	for !fin {
		if !cl.Loop.Step() {
			return res, fmt.Errorf("%s at %v: %w", spec.Name, cl.Loop.Now(), ErrStalled)
		}
	}
	return res, rerr
}

// host makes host i take part: a protection domain and a completion queue.
func (r *runner) host(i int) {
	if r.pd[i] != nil {
		return
	}
	nic := r.cl.NICs[i]
	r.pd[i] = nic.AllocPD()
	r.cq[i] = nic.CreateCQ(cqDepth)
	cq := r.cq[i]
	cq.OnCompletion(func() { r.drain(i, cq) })
	r.hosts = append(r.hosts, i)
	sort.Ints(r.hosts)
}

// register registers n zeroed bytes on host i: a synthetic region if the
// run's payload is synthetic.
func (r *runner) register(i, n int, access transport.Access) (*softnic.MR, error) {
	r.host(i)
	var mr *softnic.MR
	var err error
	if r.spec.Payload == softnic.PayloadSynthetic {
		mr, err = r.pd[i].RegisterSynthetic(n, access)
	} else {
		mr, err = r.pd[i].Register(make([]byte, n), access)
	}
	if err != nil {
		return nil, fmt.Errorf("setting up %s on %s: %w", r.spec.Name, r.cl.Hosts[i], err)
	}
	r.regions = append(r.regions, mr)
	return mr, nil
}

// testBeforeVerify, if set (by tests), runs just before the data check;
// testAfterSetup once the engine has registered its memory (to plant
// faults in it).
var testBeforeVerify, testAfterSetup func(r *runner)

// connect asks for a connection from host from to host to. dialH and accH
// receive the two ends' completions.
func (r *runner) connect(from, to int, dialH, accH handler) *connReq {
	r.host(from)
	r.host(to)
	req := &connReq{from: from, to: to, dialH: dialH, accH: accH}
	k := [2]int{from, to}
	q := r.pending[k]
	ports := r.cl.NICs[from].Ports()
	if q == nil {
		q = &pairQueue{rail: r.rails.IntN(ports)}
		r.pending[k] = q
		r.queues = append(r.queues, q)
	}
	req.port = (q.rail + len(q.reqs)) % ports
	q.reqs = append(q.reqs, req)
	r.waiting++
	return req
}

func (r *runner) dial(req *connReq) error {
	c, err := r.cl.NICs[req.from].Dial(r.cl.NICs[req.to].Addr(), softnic.ConnOptions{
		Transport: r.spec.Transport, PD: r.pd[req.from], SendCQ: r.cq[req.from], RecvCQ: r.cq[req.from],
		OnState: r.onState, Context: &endpoint{req: req, h: req.dialH},
		// A RoCEv2 QP lives on one plane: the pair's QPs take consecutive
		// planes (multi-rail). MetaRoCE spans every plane.
		PinPort: r.spec.Transport == transport.RoCEv2, Port: req.port,
	})
	if err != nil {
		return fmt.Errorf("setting up %s: %w", r.spec.Name, err)
	}
	req.dial = c
	return nil
}

// accepted pairs an incoming connection with the request its peer is
// dialing. A connection the run did not ask for (another host's program
// sending a connection request to the NIC's port, in a live lab) is
// refused and counted; it does not disturb the run.
func (r *runner) accepted(c *softnic.Conn) {
	from, to := r.hostOf(c.Peer()), r.hostOf(c.NIC().Addr())
	q := r.pending[[2]int{from, to}]
	if r.finished || q == nil || q.next >= len(q.reqs) || q.reqs[q.next].acc != nil {
		if sh := r.shardOf(to); sh != nil {
			sh.refused++
		} else {
			r.res.Refused++
		}
		c.Refuse()
		return
	}
	req := q.reqs[q.next]
	req.acc = c
	c.SetContext(&endpoint{req: req, h: req.accH})
	r.onState(c, c.State())
}

func (r *runner) onState(c *softnic.Conn, s transport.State) {
	if r.shards != nil {
		// Both ends' states decide: at the next grid instant.
		if i := r.hostOf(c.NIC().Addr()); i >= 0 {
			r.shardOf(i).record(i, c, s, nil)
		}
		return
	}
	r.onStateNow(c, s)
}

// onStateNow acts on a connection's new state: a pair up, the next of
// its pair dialed, every pair up (the run begins).
func (r *runner) onStateNow(c *softnic.Conn, s transport.State) {
	ep, _ := c.Context().(*endpoint)
	if ep == nil {
		return
	}
	req := ep.req
	switch s {
	case transport.StateError, transport.StateClosed:
		r.fail(fmt.Errorf("%s: connection %s->%s went %v", r.spec.Name,
			r.cl.Hosts[req.from], r.cl.Hosts[req.to], s))
		return
	}
	if req.ready || req.dial == nil || req.acc == nil ||
		req.dial.State() != transport.StateEstablished || req.acc.State() != transport.StateEstablished {
		return
	}
	req.ready = true
	r.waiting--
	q := r.pending[[2]int{req.from, req.to}]
	q.next++
	if q.next < len(q.reqs) {
		if err := r.dial(q.reqs[q.next]); err != nil {
			r.fail(err)
			return
		}
	}
	if r.waiting == 0 && !r.started {
		r.begin(r.cl.Loop.Now())
	}
}

// begin starts the measured part of the run.
func (r *runner) begin(now sim.Time) {
	r.started = true
	r.t0 = now
	r.base = r.snapshot()
	if r.spec.Duration > 0 && r.spec.Interval > 0 && r.spec.OnInterval != nil {
		r.iv = Interval{Start: now, Size: r.spec.Size}
		r.cl.Loop.Arm(&r.ivTimer, now+r.spec.Interval)
	}
	r.eng.start(now)
	if r.spec.OnBegin != nil && !r.finished {
		head := r.res
		head.Hosts = len(r.hosts)
		r.spec.OnBegin(&head)
	}
}

// interval reports one interval of a duration run and starts the next.
func (r *runner) interval(now sim.Time) {
	r.foldInterval()
	r.iv.End = now
	iv := r.iv
	r.iv = Interval{Start: now, Size: r.spec.Size}
	if next := now + r.spec.Interval; !r.finished && next <= r.t0+r.spec.Duration {
		r.cl.Loop.Arm(&r.ivTimer, next)
	}
	r.spec.OnInterval(iv)
}

// drain polls host i's completion queue and hands each completion to its
// end.
func (r *runner) drain(i int, cq *softnic.CQ) {
	now := r.loopOf(i).Now()
	poll := r.poll
	if sh := r.shardOf(i); sh != nil {
		poll = sh.poll
	}
	for {
		k := cq.Poll(poll)
		if k == 0 {
			return
		}
		for i := 0; i < k; i++ {
			wc := &poll[i]
			if r.finished {
				continue
			}
			ep, _ := wc.Conn.Context().(*endpoint)
			if ep == nil || ep.h == nil {
				continue
			}
			ep.h.complete(now, wc)
		}
	}
}

// close closes the run's connections (after the result is measured: the
// teardown's packets are not part of it). A live lab keeps running, and a
// later run must not find these still open.
func (r *runner) close() {
	for _, q := range r.queues {
		for _, req := range q.reqs {
			for _, c := range []*softnic.Conn{req.dial, req.acc} {
				if c != nil && c.State() != transport.StateClosed && c.State() != transport.StateError {
					c.Close()
				}
			}
		}
	}
	for _, mr := range r.regions {
		_ = mr.Deregister() // a live lab runs many workloads: free their memory
	}
	for _, i := range r.hosts {
		r.cq[i].OnCompletion(nil)
	}
	for _, i := range r.hosts {
		r.cl.NICs[i].StopListening(0)
	}
}

// bad counts a failed completion.
func (r *runner) bad(wc *softnic.Completion, what string) {
	r.res.Errors++
	if r.res.FirstError == "" {
		c := wc.Conn
		r.res.FirstError = fmt.Sprintf("%s %s on %s->%v (wr %d): %v", what, wc.Op, c.NIC().Name(), c.Peer(), wc.ID, wc.Status)
	}
}

// recordPost records the post of a measured message (for the BW peak).
func (r *runner) recordPost(now sim.Time) { r.posts = append(r.posts, now) }

// message records one completed message.
func (r *runner) message(now, posted sim.Time, bytes int) {
	r.res.Messages++
	r.res.Bytes += int64(bytes)
	r.msgTimes = append(r.msgTimes, now-posted)
	if r.spec.OnMessage != nil {
		r.spec.OnMessage(now, bytes)
	}
	r.doneAt = append(r.doneAt, now)
	if d := r.spec.Duration; d > 0 {
		if m := r.spec.Margin; now >= r.t0+m && now <= r.t0+d-m {
			r.winMsgs++
			r.winBytes += int64(bytes)
		}
		r.iv.Messages++
		r.iv.Bytes += int64(bytes)
	}
}

// flowDone records one finished flow.
func (r *runner) flowDone(d sim.Time) { r.flowTime = append(r.flowTime, d) }

func (r *runner) timeout(now sim.Time) {
	r.fail(fmt.Errorf("%s after %v (%s): %w", r.spec.Name, r.spec.Timeout, r.eng.outstanding(), ErrTimeout))
}

// fail ends the run with an error. If the measured part had started, the
// callback also gets what was measured up to now (no data check: messages
// still in flight leave destination memory in no defined state).
func (r *runner) fail(err error) {
	if r.finished {
		return
	}
	r.finished = true
	r.cl.Loop.Disarm(&r.timer)
	r.cl.Loop.Disarm(&r.ivTimer)
	if !r.started {
		r.close()
		r.onDone(nil, err)
		return
	}
	r.tEnd = r.cl.Loop.Now()
	r.fold()
	res := &r.res
	res.Hosts = len(r.hosts)
	r.summarise(res)
	res.Check = DataCheck{FirstBad: "not checked: the run failed"}
	r.oracle.report(&res.Check) // what was checked at completions still counts
	r.close()
	r.onDone(res, err)
}

// finish ends the run: verify, summarise, report.
func (r *runner) finish(now sim.Time) {
	if r.finished {
		return
	}
	r.finished = true
	r.tEnd = now
	if r.shards != nil {
		r.tEnd = r.lastDone // decided at the grid instant after it
	}
	r.fold()
	r.cl.Loop.Disarm(&r.timer)
	r.cl.Loop.Disarm(&r.ivTimer)
	res := &r.res
	res.Hosts = len(r.hosts)
	if testBeforeVerify != nil {
		testBeforeVerify(r)
	}
	res.Check = r.eng.verify()
	r.oracle.report(&res.Check)
	r.summarise(res)
	r.close()
	var err error
	if c := &res.Check; !c.OK {
		err = fmt.Errorf("%s: %w: %d of %d messages failed at completion, %d of %d regions differ at the end (first: %s)",
			r.spec.Name, ErrDataDiff, c.Failures, c.Messages, c.BadRegions, c.Regions, c.FirstBad)
	}
	r.onDone(res, err)
}
