package softnic

import (
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// Completion is a work completion as the application sees it: the
// transport's completion and the connection it belongs to.
type Completion struct {
	transport.Completion
	Conn *Conn
}

// CQ is a completion queue: a ring of at most depth entries the NIC fills
// and the application drains with Poll. A full queue loses completions and
// counts them (Stats.CQOverruns), as an overrun CQ would on hardware. The
// ring grows to its depth as completions pile up, so a deep queue that is
// drained promptly costs a few entries of memory, not depth.
//
// Waiting fits an event loop: OnCompletion registers a callback that the
// NIC runs from its own timer, after the transport work that produced the
// completions has returned, so the callback may post new work freely.
type CQ struct {
	nic       *NIC
	ring      []Completion
	depth     int
	head, n   int
	notify    func()
	notifyTmr sim.Timer
	overruns  uint64
	delivered uint64
}

// CreateCQ returns a completion queue holding up to depth completions.
func (n *NIC) CreateCQ(depth int) *CQ {
	if depth < 1 {
		depth = 1
	}
	cq := &CQ{nic: n, ring: make([]Completion, min(depth, 16)), depth: depth}
	cq.notifyTmr.Init(fireCQ, cq)
	cq.notifyTmr.Own(n.org)
	return cq
}

func fireCQ(_ sim.Time, arg any) {
	cq := arg.(*CQ)
	if cq.notify != nil && cq.n > 0 {
		cq.notify()
	}
}

// OnCompletion sets fn to run whenever completions are waiting: once per
// batch, at the virtual time they arrived, after the NIC's current work.
// fn should Poll until empty; if it leaves completions queued, it runs
// again only when another arrives. nil turns notification off.
func (cq *CQ) OnCompletion(fn func()) {
	cq.notify = fn
	if fn != nil && cq.n > 0 {
		cq.nic.sched.Arm(&cq.notifyTmr, cq.nic.sched.Now())
	}
}

// Poll moves up to len(dst) completions into dst, oldest first, and returns
// how many it moved.
func (cq *CQ) Poll(dst []Completion) int {
	k := 0
	for k < len(dst) && cq.n > 0 {
		dst[k] = cq.ring[cq.head]
		cq.ring[cq.head] = Completion{}
		cq.head++
		if cq.head == len(cq.ring) {
			cq.head = 0
		}
		cq.n--
		k++
	}
	return k
}

// Len returns how many completions are waiting.
func (cq *CQ) Len() int { return cq.n }

// Overruns returns how many completions this queue lost because it was full.
func (cq *CQ) Overruns() uint64 { return cq.overruns }

// Delivered returns how many completions this queue has accepted so far.
func (cq *CQ) Delivered() uint64 { return cq.delivered }

func (cq *CQ) push(c Completion) {
	if cq.n == len(cq.ring) {
		if cq.n == cq.depth {
			cq.overruns++
			cq.nic.stats.CQOverruns++
			return
		}
		cq.grow()
	}
	i := cq.head + cq.n
	if i >= len(cq.ring) {
		i -= len(cq.ring)
	}
	cq.ring[i] = c
	cq.n++
	cq.delivered++
	if cq.notify != nil && !cq.notifyTmr.Armed() {
		cq.nic.sched.Arm(&cq.notifyTmr, cq.nic.sched.Now())
	}
}

// grow doubles the ring, up to the queue's depth.
func (cq *CQ) grow() {
	r := make([]Completion, min(2*len(cq.ring), cq.depth))
	for i := 0; i < cq.n; i++ {
		r[i] = cq.ring[(cq.head+i)%len(cq.ring)]
	}
	cq.ring, cq.head = r, 0
}
