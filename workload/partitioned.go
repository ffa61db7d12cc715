package workload

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// A partitioned run (Cluster.Group set) runs each host's NIC, connections
// and completion handlers on its partition's goroutine. What the runner
// shares between hosts is split so that no two partitions touch it in the
// same window, and so that the result does not depend on the partitioning:
//
//   - Accumulators (messages, bytes, completion and post times, flow
//     times, errors, the data oracle's counts) live in one shard per
//     partition and are folded when the run ends: sums, and time lists
//     sorted (every figure drawn from them sorts them). The first error is
//     the one with the smallest (time, host).
//   - Decisions that read every host (a connection pair is up, the next
//     one of a pair can be dialed, every connection is up so the run
//     begins, every flow is done so it finishes, a post failed so the run
//     fails, a completed message's destination slot is checked, closed and
//     freed: for a WRITE it is the responder's memory) are recorded by the
//     partition that saw their cause and taken by a global event at the
//     next multiple of the grid step (sim.Group.SetGrid) after that cause,
//     alone, in (time, host, order) of the causes, with every partition
//     stopped at that instant: at the same virtual time and in the same
//     order for 1 or N partitions. A run that ends this way reports the
//     time its last flow finished; counters are read at the grid instant.
//
// A plain cluster with a Grid (a lab's sim cluster) decides the same way
// on its one loop (with an OnMessage hook too), so it gives the
// partitioned result; a plain cluster
// without one (live labs, tests) decides at once, as before. The first
// data-oracle failure's text is the lowest partition's first (counts are
// exact); a placement into a closed slot is counted in the requester's
// shard from the responder's partition, which only a transport bug makes
// happen.

// ErrNotPartitionSafe is returned when a partitioned cluster is given a
// workload whose shared state is not split yet.
var ErrNotPartitionSafe = errors.New("workload not partition-safe")

// PartitionSafe says whether spec can run on a partitioned cluster, and
// if not, why: only WRITE and READ streams (write_bw, read_bw,
// permutation, incast) split their state per host; SEND streams share a
// flow between its two ends, latency and collective engines share their
// rounds, and an OnMessage hook sees every host's completions in one order.
func PartitionSafe(spec Spec) error {
	if err := gridEngine(spec); err != nil {
		return err
	}
	if spec.OnMessage != nil {
		return fmt.Errorf("%w: an OnMessage hook sees every host's completions in one order", ErrNotPartitionSafe)
	}
	return nil
}

// gridEngine says whether spec's engine takes its global decisions on a
// grid (and so can run partitioned): the WRITE and READ streams.
func gridEngine(spec Spec) error {
	switch spec.Name {
	case WriteBW, ReadBW, Permutation, Incast:
		return nil
	}
	return fmt.Errorf("%w: %s shares its state between hosts (only write_bw, read_bw, permutation and incast run partitioned)",
		ErrNotPartitionSafe, spec.Name)
}

// recorder takes a flow's measurements: the runner itself on one loop, the
// flow's partition's shard when partitioned.
type recorder interface {
	recordPost(now sim.Time)
	message(now, posted sim.Time, bytes int)
	bad(wc *softnic.Completion, what string)
}

// shard is one partition's share of a partitioned run's accumulators.
type shard struct {
	r    *runner
	loop *sim.Loop
	poll []softnic.Completion

	messages, bytes   int64
	winMsgs, winBytes int64
	ivMsgs, ivBytes   int64
	refused           int
	errors            int
	firstErr          string
	firstAt           sim.Time
	firstHost         int
	msgTimes, doneAt  []sim.Time
	posts, flowTime   []sim.Time
	oracle            oracle

	// Flows finished here, and the latest finish time.
	done     int
	lastDone sim.Time
	// Decisions waiting for the next grid instant, and the earliest
	// cause's time (Never: none); destination slots to check there.
	pend   []pending
	checks []slotCheck
	n      uint64
	wakeAt sim.Time
}

// slotCheck is a completed message whose destination slot is checked,
// closed and freed at the next grid instant: for a WRITE the slot is in
// the responder's memory, which its own partition may be writing (other
// slots of the region) during the window of the completion.
type slotCheck struct {
	at   sim.Time
	host int
	n    uint64
	f    *flow
	inf  inflight
	ok   bool
}

// check defers a completed message's slot check to the grid instant.
func (sh *shard) check(f *flow, inf inflight, ok bool) {
	now := sh.loop.Now()
	sh.n++
	sh.checks = append(sh.checks, slotCheck{at: now, host: f.from, n: sh.n, f: f, inf: inf, ok: ok})
	sh.wake(now)
}

// run checks the slot, closes it and frees it for the flow's next post.
func (c *slotCheck) run() {
	f, d := c.f, c.inf.dst
	if c.ok {
		f.watch.complete(d, f.size, f.seed(c.inf.msg))
		f.last[d] = c.inf.msg
	} else {
		f.watch.open[d] = false // no defined content: the end check says
	}
	f.dstq.push(d)
}

// pending is one recorded cause of a global decision.
type pending struct {
	at   sim.Time
	host int
	n    uint64
	c    *softnic.Conn
	s    transport.State
	err  error
}

func (sh *shard) recordPost(now sim.Time) { sh.posts = append(sh.posts, now) }

func (sh *shard) message(now, posted sim.Time, bytes int) {
	r := sh.r
	sh.messages++
	sh.bytes += int64(bytes)
	sh.msgTimes = append(sh.msgTimes, now-posted)
	if r.spec.OnMessage != nil {
		r.spec.OnMessage(now, bytes) // one plain loop only (PartitionSafe)
	}
	sh.doneAt = append(sh.doneAt, now)
	if d := r.spec.Duration; d > 0 {
		if m := r.spec.Margin; now >= r.t0+m && now <= r.t0+d-m {
			sh.winMsgs++
			sh.winBytes += int64(bytes)
		}
		sh.ivMsgs++
		sh.ivBytes += int64(bytes)
	}
}

func (sh *shard) bad(wc *softnic.Completion, what string) {
	sh.errors++
	now, host := sh.loop.Now(), sh.r.hostOf(wc.Conn.NIC().Addr())
	if sh.firstErr == "" || now < sh.firstAt || (now == sh.firstAt && host < sh.firstHost) {
		c := wc.Conn
		sh.firstErr = fmt.Sprintf("%s %s on %s->%v (wr %d): %v", what, wc.Op, c.NIC().Name(), c.Peer(), wc.ID, wc.Status)
		sh.firstAt, sh.firstHost = now, host
	}
}

// record keeps a cause for the next grid instant.
func (sh *shard) record(host int, c *softnic.Conn, s transport.State, err error) {
	now := sh.loop.Now()
	sh.n++
	sh.pend = append(sh.pend, pending{at: now, host: host, n: sh.n, c: c, s: s, err: err})
	sh.wake(now)
}

// flowFinished counts a finished flow of this shard's partition.
func (sh *shard) flowFinished(now, took sim.Time) {
	sh.flowTime = append(sh.flowTime, took)
	sh.done++
	sh.lastDone = max(sh.lastDone, now)
	sh.wake(now)
}

// gridded prepares a run whose global decisions wait for grid instants:
// every run on a partitioned cluster (its workload must be
// PartitionSafe), and a partition-safe workload on a plain cluster with a
// Grid (a lab's sim cluster), which then decides exactly as a partitioned
// run of the same lab does.
func (r *runner) gridded() error {
	cl := r.cl
	g := cl.Group
	if g == nil && (cl.Grid <= 0 || gridEngine(r.spec) != nil) {
		return nil // decisions at once
	}
	r.addrIdx = make(map[netip.Addr]int, len(cl.NICs))
	for i, n := range cl.NICs {
		r.addrIdx[n.Addr()] = i
	}
	r.act.Init(func(now sim.Time, _ any) { r.decide(now) }, nil)
	if g == nil {
		r.grid = cl.Grid
		r.shards = []*shard{{r: r, loop: cl.Loop, poll: make([]softnic.Completion, 64), wakeAt: sim.Never}}
		return nil
	}
	if len(cl.HostPart) != len(cl.NICs) {
		return fmt.Errorf("%w: partitioned cluster with %d host partitions for %d hosts", ErrBadSpec, len(cl.HostPart), len(cl.NICs))
	}
	if err := PartitionSafe(r.spec); err != nil {
		return err
	}
	r.g = g
	for p := range g.Parts() {
		r.shards = append(r.shards, &shard{r: r, loop: g.Part(p), poll: make([]softnic.Completion, 64), wakeAt: sim.Never})
	}
	g.OnBarrier(func(w sim.Time) sim.Time {
		if r.finished {
			return sim.Never
		}
		at := sim.Never
		for _, sh := range r.shards {
			at = min(at, sh.wakeAt)
		}
		if at != sim.Never {
			if due := g.GridAfter(at); due < r.act.When() {
				cl.Loop.Arm(&r.act, due)
			}
		}
		return sim.Never
	})
	return nil
}

func (r *runner) hostOf(a netip.Addr) int {
	if i, ok := r.addrIdx[a]; ok {
		return i
	}
	return -1
}

// shardOf returns host i's shard (nil when decisions are immediate).
func (r *runner) shardOf(i int) *shard {
	switch {
	case r.shards == nil:
		return nil
	case r.g == nil:
		return r.shards[0]
	}
	return r.shards[r.cl.HostPart[i]]
}

// wake arms the decision timer for the grid instant after at, on a plain
// loop (a partitioned run's barrier hook does it there).
func (sh *shard) wake(at sim.Time) {
	sh.wakeAt = min(sh.wakeAt, at)
	r := sh.r
	if r.g != nil {
		return
	}
	if due := (at/r.grid + 1) * r.grid; due < r.act.When() {
		r.cl.Loop.Arm(&r.act, due)
	}
}

// loopOf returns the loop host i's NIC runs on.
func (r *runner) loopOf(i int) *sim.Loop {
	if r.g == nil {
		return r.cl.Loop
	}
	return r.g.Part(r.cl.HostPart[i])
}

// recorderOf returns where host i's flows record their measurements.
func (r *runner) recorderOf(i int) recorder {
	if sh := r.shardOf(i); sh != nil {
		return sh
	}
	return r
}

// oracleOf returns the oracle host i's flows count their checks in.
func (r *runner) oracleOf(i int) *oracle {
	if sh := r.shardOf(i); sh != nil {
		return &sh.oracle
	}
	return &r.oracle
}

// failFrom fails the run from host i's handlers: at once on one loop, at
// the next grid instant when partitioned.
func (r *runner) failFrom(i int, err error) {
	if sh := r.shardOf(i); sh != nil {
		sh.record(i, nil, 0, err)
		return
	}
	r.fail(err)
}

// decide takes, alone at a grid instant, the decisions recorded since the
// last one, in (time, host, order) of their causes.
func (r *runner) decide(now sim.Time) {
	var all []pending
	var checks []slotCheck
	done, last := 0, sim.Time(0)
	for _, sh := range r.shards {
		all = append(all, sh.pend...)
		clear(sh.pend)
		sh.pend = sh.pend[:0]
		checks = append(checks, sh.checks...)
		clear(sh.checks)
		sh.checks = sh.checks[:0]
		sh.wakeAt = sim.Never
		done += sh.done
		last = max(last, sh.lastDone)
	}
	slices.SortFunc(all, func(a, b pending) int {
		return cmpKey(a.at, a.host, a.n, b.at, b.host, b.n)
	})
	slices.SortFunc(checks, func(a, b slotCheck) int {
		return cmpKey(a.at, a.host, a.n, b.at, b.host, b.n)
	})
	for i := range checks {
		checks[i].run()
	}
	if !r.finished {
		// A freed slot may let its flow post again.
		for i := range checks {
			f := checks[i].f
			for f.post(now) {
			}
		}
	}
	for _, p := range all {
		if r.finished {
			return
		}
		if p.err != nil {
			r.fail(p.err)
			continue
		}
		r.onStateNow(p.c, p.s)
	}
	if !r.finished && r.started && r.flowsTotal > 0 && done == r.flowsTotal {
		r.lastDone = last
		r.finish(now)
	}
}

// cmpKey orders causes by (time, host, order recorded): the order one
// loop takes them in (a host's NIC events keep their order, and NICs'
// origins follow host order).
func cmpKey(at sim.Time, host int, n uint64, bt sim.Time, bhost int, bn uint64) int {
	switch {
	case at != bt:
		return cmp.Compare(at, bt)
	case host != bhost:
		return cmp.Compare(host, bhost)
	}
	return cmp.Compare(n, bn)
}

// fold adds the shards' accumulators to the run's (once, when it ends).
func (r *runner) fold() {
	if r.shards == nil {
		return
	}
	res := &r.res
	firstAt, firstHost := sim.Never, 0
	for _, sh := range r.shards {
		res.Messages += sh.messages
		res.Bytes += sh.bytes
		res.Refused += sh.refused
		res.Errors += sh.errors
		if sh.firstErr != "" && (sh.firstAt < firstAt || (sh.firstAt == firstAt && sh.firstHost < firstHost)) {
			res.FirstError, firstAt, firstHost = sh.firstErr, sh.firstAt, sh.firstHost
		}
		r.winMsgs += sh.winMsgs
		r.winBytes += sh.winBytes
		r.msgTimes = append(r.msgTimes, sh.msgTimes...)
		r.doneAt = append(r.doneAt, sh.doneAt...)
		r.posts = append(r.posts, sh.posts...)
		r.flowTime = append(r.flowTime, sh.flowTime...)
		o := &sh.oracle
		r.oracle.checks += o.checks
		r.oracle.bytes += o.bytes
		r.oracle.failures += o.failures
		if r.oracle.first == "" {
			r.oracle.first = o.first // the lowest partition's first: see docs/engine.md
		}
	}
	slices.Sort(r.doneAt)
	slices.Sort(r.posts)
}

// foldInterval adds the shards' interval counts (at a global event).
func (r *runner) foldInterval() {
	for _, sh := range r.shards {
		r.iv.Messages += sh.ivMsgs
		r.iv.Bytes += sh.ivBytes
		sh.ivMsgs, sh.ivBytes = 0, 0
	}
}
