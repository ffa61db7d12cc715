package workload

import (
	"fmt"
	"strings"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// Memory layout of point-to-point flows. Destination memory is a ring of
// slots, each followed by a guard gap that must stay zero; a slot is reused
// only after the message that last used it completed, so the final image is
// known exactly: every slot holds the last message completed into it.
const (
	guard = 64
	// slotBudget is the destination memory per flow the ring aims for, so
	// that slots are reused rarely (a late duplicate of an old message
	// would then have to survive long to corrupt anything).
	slotBudget = 1 << 20
	// memoryLimit bounds what one run registers.
	memoryLimit = 4 << 30
)

// streamEngine runs point-to-point flows: write_bw, send_bw, read_bw,
// permutation and incast.
type streamEngine struct {
	r      *runner
	spec   Spec
	op     transport.Op
	flows  []*flow
	active int
	t0     sim.Time
}

type inflight struct {
	msg    int64 // message number; for READ, the remote slot read
	dst    int   // destination slot
	posted sim.Time
}

// flow is one connection's stream of messages from host from to host to.
type flow struct {
	e         *streamEngine
	id        int
	from, to  int
	req       *connReq
	size      int
	stride    int
	slots     int
	src       *softnic.MR // WRITE/SEND: source slots on from
	dst       *softnic.MR // destination slots: on to (WRITE/SEND), on from (READ)
	remote    *softnic.MR // READ: source slots on to, filled once
	free      []int       // free source (request) slots
	dstq      ring        // free destination slots, oldest first
	inflight  []inflight  // by request slot
	last      []int64     // by destination slot: the message it holds, or -1
	watch     *slots      // the data oracle's view of dst
	rec       recorder    // where from's measurements go
	posted    int64
	completed int64
	target    int64 // messages to send, or -1 in duration mode
	stopped   bool
	done      bool
	tEnd      sim.Time

	// SEND receive side.
	recv      *recvSide
	recvDone  []int64 // receives completed, by stream
	recvPost  []int64 // receives posted, by stream
	recvTotal int64
}

// recvSide is the SEND receiver's handler.
type recvSide struct{ f *flow }

// ring is a FIFO of ints with fixed capacity.
type ring struct {
	b       []int
	head, n int
}

func newRing(capacity int) ring { return ring{b: make([]int, capacity)} }

func (q *ring) push(v int) {
	q.b[(q.head+q.n)%len(q.b)] = v
	q.n++
}

func (q *ring) pop() int {
	v := q.b[q.head]
	q.head = (q.head + 1) % len(q.b)
	q.n--
	return v
}

func newStream(spec Spec) *streamEngine {
	e := &streamEngine{spec: spec, op: transport.OpWrite}
	switch spec.Name {
	case SendBW:
		e.op = transport.OpSend
	case ReadBW:
		e.op = transport.OpRead
	}
	return e
}

// pairs returns the (sender, receiver) host pairs of the workload.
func (e *streamEngine) pairs(r *runner) ([][2]int, error) {
	cl, s := r.cl, e.spec
	idx := func(names []string) []int {
		var out []int
		for _, n := range names {
			out = append(out, cl.index(n))
		}
		return out
	}
	from, to := idx(s.From), idx(s.To)
	var pairs [][2]int
	switch s.Name {
	case Permutation:
		hosts := from
		if len(hosts) == 0 {
			for i := range cl.Hosts {
				hosts = append(hosts, i)
			}
		}
		if len(hosts) < 2 {
			return nil, fmt.Errorf("%w: permutation needs at least 2 hosts", ErrBadSpec)
		}
		// Sattolo's algorithm: a uniformly random single cycle, so nobody
		// sends to itself.
		perm := append([]int(nil), hosts...)
		rng := sim.NewRand(s.Seed, "workload/permutation")
		for i := len(perm) - 1; i > 0; i-- {
			j := rng.IntN(i)
			perm[i], perm[j] = perm[j], perm[i]
		}
		for i, h := range hosts {
			pairs = append(pairs, [2]int{h, perm[i]})
		}
	case Incast:
		if len(to) == 0 {
			to = []int{0}
		}
		if len(to) != 1 {
			return nil, fmt.Errorf("%w: incast has one receiver (got %d)", ErrBadSpec, len(to))
		}
		if len(from) == 0 {
			for i := range cl.Hosts {
				if i != to[0] {
					from = append(from, i)
				}
			}
		}
		for _, f := range from {
			if f != to[0] {
				pairs = append(pairs, [2]int{f, to[0]})
			}
		}
	default:
		if len(from) == 0 {
			from = []int{0}
		}
		if len(to) == 0 {
			to = []int{len(cl.Hosts) - 1}
		}
		for _, f := range from {
			for _, t := range to {
				if f != t {
					pairs = append(pairs, [2]int{f, t})
				}
			}
		}
	}
	if len(pairs) == 0 {
		return nil, fmt.Errorf("%w: %s has no sender-receiver pair of distinct hosts", ErrBadSpec, s.Name)
	}
	return pairs, nil
}

func (e *streamEngine) setup(r *runner) error {
	e.r = r
	pairs, err := e.pairs(r)
	if err != nil {
		return err
	}
	s := e.spec
	qd := s.QueueDepth
	need := qd + 1
	if e.op == transport.OpSend {
		need = qd*s.Streams + 1 // every posted receive holds a slot
	}
	slots := max(need, (slotBudget+s.Size-1)/s.Size)
	target := int64(s.Iterations)
	if s.Duration > 0 {
		target = -1
	} else if perConn := (target + int64(s.Conns) - 1) / int64(s.Conns); int64(slots) > perConn {
		// No connection carries more than its share of the pair's
		// messages: it needs no more slots than that.
		slots = int(perConn)
	}
	stride := s.Size + guard
	var total int64
	for range pairs {
		total += int64(slots)*int64(stride)*int64(s.Conns) + int64(qd*s.Size*s.Conns)
	}
	if s.Payload != softnic.PayloadSynthetic && total > memoryLimit {
		return fmt.Errorf("%w: %s would register %d MiB (limit %d MiB): lower size, queue depth or conns",
			ErrBadSpec, s.Name, total>>20, memoryLimit>>20)
	}
	for _, p := range pairs {
		for k := 0; k < s.Conns; k++ {
			// The pair's messages are striped over its connections:
			// connection k carries messages k, k+Conns, ...
			t, n := target, slots
			if t >= 0 {
				t = (target - int64(k) + int64(s.Conns) - 1) / int64(s.Conns)
				n = min(n, int(t))
			}
			f := &flow{e: e, id: len(e.flows), from: p[0], to: p[1], size: s.Size, stride: stride,
				slots: n, target: t}
			if err := f.setup(r); err != nil {
				return err
			}
			e.flows = append(e.flows, f)
		}
	}
	return nil
}

func (f *flow) setup(r *runner) error {
	s := f.e.spec
	qd := s.QueueDepth
	var err error
	rw := transport.AccessLocalWrite | transport.AccessRemoteWrite
	switch f.e.op {
	case transport.OpWrite, transport.OpSend:
		r.source[f.from] = true
		if f.src, err = r.register(f.from, qd*f.size, transport.AccessLocalWrite); err != nil {
			return err
		}
		if f.dst, err = r.register(f.to, f.slots*f.stride, rw); err != nil {
			return err
		}
	case transport.OpRead:
		r.source[f.to] = true
		if f.dst, err = r.register(f.from, f.slots*f.stride, transport.AccessLocalWrite); err != nil {
			return err
		}
		if f.remote, err = r.register(f.to, f.slots*f.stride, transport.AccessRemoteRead); err != nil {
			return err
		}
		for j := 0; j < f.slots; j++ {
			f.remote.Fill(j*f.stride, f.size, f.seed(int64(j)))
		}
	}
	f.free = make([]int, 0, qd)
	for i := qd - 1; i >= 0; i-- {
		f.free = append(f.free, i)
	}
	f.inflight = make([]inflight, qd)
	f.last = make([]int64, f.slots)
	for i := range f.last {
		f.last[i] = -1
	}
	f.rec = r.recorderOf(f.from)
	f.watch = r.oracleOf(f.from).watch(f.dst, f.slots, f.size, f.stride, func(d int) string {
		return fmt.Sprintf("flow %d (%s->%s) slot %d (last message completed there: %d)",
			f.id, r.cl.Hosts[f.from], r.cl.Hosts[f.to], d, f.last[d])
	})
	f.dstq = newRing(f.slots)
	for i := 0; i < f.slots; i++ {
		f.dstq.push(i)
	}
	var acc handler
	if f.e.op == transport.OpSend {
		f.recv = &recvSide{f: f}
		f.recvDone = make([]int64, s.Streams)
		f.recvPost = make([]int64, s.Streams)
		acc = f.recv
	}
	f.req = r.connect(f.from, f.to, f, acc)
	return nil
}

// seed names message msg's contents (for READ: remote slot msg's).
func (f *flow) seed(msg int64) uint64 { return msgSeed(f.e.spec.Seed, f.id, msg) }

// streamTarget is how many of the flow's messages go on stream st.
func (f *flow) streamTarget(st int) int64 {
	if f.target < 0 {
		return -1
	}
	n := int64(f.e.spec.Streams)
	return (f.target - int64(st) + n - 1) / n
}

func (e *streamEngine) start(now sim.Time) {
	e.t0 = now
	e.active = len(e.flows)
	e.r.flowsTotal = len(e.flows)
	if e.spec.Name.IsPerftest() {
		for _, f := range e.flows {
			var lmr, rmr *softnic.MR
			switch e.op {
			case transport.OpWrite:
				lmr, rmr = f.src, f.dst
			case transport.OpRead:
				lmr, rmr = f.dst, f.remote
			}
			e.r.res.QPs = append(e.r.res.QPs, qpInfo(f.req, lmr, rmr))
		}
	}
	if e.spec.Duration > 0 {
		e.r.cl.Loop.At(now+e.spec.Duration, func(now sim.Time) {
			for _, f := range e.flows {
				f.stopped = true
				f.checkDone(now)
			}
		})
	}
	// Receives first, so the first SENDs find them.
	for _, f := range e.flows {
		if f.recv != nil {
			for st := range f.recvPost {
				for k := 0; k < e.spec.QueueDepth; k++ {
					if !f.recv.post(st) {
						break
					}
				}
			}
		}
	}
	for _, f := range e.flows {
		for f.post(now) {
		}
	}
}

// post posts the flow's next message if the window and the target allow.
func (f *flow) post(now sim.Time) bool {
	if f.done || f.stopped || len(f.free) == 0 || (f.target >= 0 && f.posted >= f.target) {
		return false
	}
	if f.e.op != transport.OpSend && f.dstq.n == 0 {
		// Every destination slot is held: on one loop never (a slot
		// is freed with its request slot, and there is one more); when
		// partitioned, until the next grid instant checks and frees it.
		return false
	}
	s := f.e.spec
	slot := f.free[len(f.free)-1]
	f.free = f.free[:len(f.free)-1]
	msg := f.posted
	f.posted++
	f.rec.recordPost(now)
	wr := transport.WorkRequest{ID: uint64(slot), Op: f.e.op, Stream: uint16(msg % int64(s.Streams)), NumSGE: 1}
	inf := inflight{msg: msg, dst: -1, posted: now}
	switch f.e.op {
	case transport.OpWrite, transport.OpSend:
		f.src.Fill(slot*f.size, f.size, f.seed(msg))
		wr.SGL[0] = f.src.SGE(slot*f.size, f.size)
		if f.e.op == transport.OpWrite {
			inf.dst = f.dstq.pop()
			f.watch.expect(inf.dst)
			wr.RemoteAddr = f.dst.Addr() + uint64(inf.dst*f.stride)
			wr.RKey = f.dst.RKey()
		}
	case transport.OpRead:
		inf.dst = f.dstq.pop()
		f.watch.expect(inf.dst)
		inf.msg = msg % int64(f.slots)
		wr.SGL[0] = f.dst.SGE(inf.dst*f.stride, f.size)
		wr.RemoteAddr = f.remote.Addr() + uint64(int(inf.msg)*f.stride)
		wr.RKey = f.remote.RKey()
	}
	f.inflight[slot] = inf
	if err := f.req.dial.PostSend(&wr); err != nil {
		f.e.r.failFrom(f.from, fmt.Errorf("%s: posting %s on flow %d: %w", s.Name, f.e.op, f.id, err))
		return false
	}
	return true
}

// complete handles the requester's completions.
func (f *flow) complete(now sim.Time, wc *softnic.Completion) {
	slot := int(wc.ID)
	if slot >= len(f.inflight) {
		f.rec.bad(wc, "unexpected completion")
		return
	}
	inf := f.inflight[slot]
	f.free = append(f.free, slot)
	sh := f.e.r.shardOf(f.from)
	if inf.dst >= 0 && sh == nil {
		f.dstq.push(inf.dst)
	}
	f.completed++
	if inf.dst >= 0 && sh != nil {
		// Partitioned: the destination slot is checked, closed and
		// freed at the next grid instant, when its host's partition is
		// stopped too (partitioned.go).
		sh.check(f, inf, wc.Status == transport.StatusOK)
		if wc.Status != transport.StatusOK {
			f.rec.bad(wc, "failed")
			f.stopped = true
		} else {
			f.rec.message(now, inf.posted, f.size)
		}
	} else if wc.Status != transport.StatusOK {
		f.rec.bad(wc, "failed")
		f.stopped = true // an RC connection in error flushes the rest
		if inf.dst >= 0 {
			f.watch.open[inf.dst] = false // no defined content: the end check says
		}
	} else {
		if inf.dst >= 0 {
			// A WRITE's bytes are at the responder, a READ's here, when
			// the requester's completion is reported.
			f.watch.complete(inf.dst, f.size, f.seed(inf.msg))
			f.last[inf.dst] = inf.msg
		}
		f.rec.message(now, inf.posted, f.size)
	}
	for f.post(now) {
	}
	f.checkDone(now)
}

// checkDone finishes the flow when nothing is left in flight.
func (f *flow) checkDone(now sim.Time) {
	if f.done || len(f.free) != len(f.inflight) {
		return
	}
	if !f.stopped && f.completed < f.target {
		return
	}
	if f.target < 0 && !f.stopped {
		return
	}
	if f.recv != nil && f.recvTotal < f.completed && f.e.r.res.Errors == 0 {
		return // the receive completions are still on their way
	}
	f.done = true
	f.tEnd = now
	if sh := f.e.r.shardOf(f.from); sh != nil {
		sh.flowFinished(now, now-f.e.t0) // the run ends at the next grid instant
		return
	}
	f.e.r.flowDone(now - f.e.t0)
	f.e.active--
	if f.e.active == 0 {
		f.e.r.finish(now)
	}
}

// post posts one receive on stream st into the next free slot.
func (rs *recvSide) post(st int) bool {
	f := rs.f
	if t := f.streamTarget(st); t >= 0 && f.recvPost[st] >= t {
		return false
	}
	if f.dstq.n == 0 {
		return false
	}
	d := f.dstq.pop()
	f.watch.expect(d)
	wr := transport.WorkRequest{ID: uint64(d), Op: transport.OpRecv, Stream: uint16(st), NumSGE: 1}
	wr.SGL[0] = f.dst.SGE(d*f.stride, f.size)
	if err := f.req.acc.PostRecv(&wr); err != nil {
		f.e.r.fail(fmt.Errorf("%s: posting RECV on flow %d: %w", f.e.spec.Name, f.id, err))
		return false
	}
	f.recvPost[st]++
	return true
}

// complete handles the SEND receiver's completions: the k-th receive on a
// stream holds the k-th SEND on it, message k*streams+stream.
func (rs *recvSide) complete(now sim.Time, wc *softnic.Completion) {
	f := rs.f
	d := int(wc.ID)
	st := int(wc.Stream)
	if d >= f.slots || st >= len(f.recvDone) {
		f.e.r.bad(wc, "unexpected receive completion")
		return
	}
	f.dstq.push(d)
	f.recvTotal++
	msg := f.recvDone[st]*int64(f.e.spec.Streams) + int64(st)
	if wc.Status != transport.StatusOK {
		f.e.r.bad(wc, "failed")
		f.watch.open[d] = false
	} else if int(wc.Bytes) != f.size {
		f.e.r.bad(wc, fmt.Sprintf("short (%d of %d bytes)", wc.Bytes, f.size))
		f.watch.complete(d, int(wc.Bytes), f.seed(msg))
	} else {
		f.watch.complete(d, f.size, f.seed(msg))
		f.last[d] = msg
	}
	f.recvDone[st]++
	rs.post(st)
	f.checkDone(now)
}

func (e *streamEngine) verify() DataCheck {
	dc := DataCheck{OK: true}
	for _, f := range e.flows {
		mem := f.dst
		for d := 0; d < f.slots; d++ {
			m := f.last[d]
			dc.checkSlot(mem, d*f.stride, f.size, f.stride, m >= 0, f.seed(m), func() string {
				return fmt.Sprintf("flow %d (%s->%s) slot %d holding message %d",
					f.id, e.r.cl.Hosts[f.from], e.r.cl.Hosts[f.to], d, m)
			})
		}
	}
	return dc
}

func (e *streamEngine) outstanding() string {
	var b strings.Builder
	n := 0
	for _, f := range e.flows {
		if f.done {
			continue
		}
		if n < 4 {
			of := "" // a duration-bound flow has no target count
			if f.target >= 0 {
				of = fmt.Sprintf(" of %d", f.target)
			}
			fmt.Fprintf(&b, "; flow %d %s->%s: %d%s completed, %d in flight",
				f.id, e.r.cl.Hosts[f.from], e.r.cl.Hosts[f.to], f.completed, of, len(f.inflight)-len(f.free))
		}
		n++
	}
	return fmt.Sprintf("%d of %d flows unfinished%s", n, len(e.flows), b.String())
}
