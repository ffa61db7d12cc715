package rocev2

import (
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

// The loss recovery of current NICs (Options.SelectiveRepeat,
// AdaptiveRetrans, SlowRestart, TxWindow): the responder's reorder window,
// the requester's resend queue and its round-trip estimator, each a small
// type the requester and responder compose, with table tests of their own.

// reorderWindow is the responder's selective-repeat buffer: request
// packets (WRITE and SEND) that arrived past a gap, kept by PSN until the
// gap fills, at most size PSNs past the expected one. Slots are allocated
// the first time they are used and reused after; a QP that never sees a
// gap allocates nothing.
type reorderWindow struct {
	size  int
	slots [][]byte
	psn   []ib.PSN
	have  []bool
	n     int
}

func (w *reorderWindow) init(size int) { w.size = size }

// put keeps raw, the request packet p that arrived while epsn is
// expected. It reports false, keeping nothing, when p is not past epsn,
// is size or more PSNs past it, or is already kept.
func (w *reorderWindow) put(epsn, p ib.PSN, raw []byte) bool {
	d := p.Diff(epsn)
	if d <= 0 || d > w.size {
		return false
	}
	if w.slots == nil {
		n := 1
		for n < w.size+1 {
			n <<= 1
		}
		w.slots, w.psn, w.have = make([][]byte, n), make([]ib.PSN, n), make([]bool, n)
	}
	i := int(uint32(p)) & (len(w.slots) - 1)
	if w.have[i] {
		return false // the same PSN (a duplicate); a ring of > size slots holds no other
	}
	w.slots[i] = append(w.slots[i][:0], raw...)
	w.psn[i], w.have[i] = p, true
	w.n++
	return true
}

// take removes and returns the packet kept for p, if any. The bytes stay
// valid until the next put.
func (w *reorderWindow) take(p ib.PSN) ([]byte, bool) {
	if w.n == 0 {
		return nil, false
	}
	i := int(uint32(p)) & (len(w.slots) - 1)
	if !w.have[i] || w.psn[i] != p {
		return nil, false
	}
	w.have[i] = false
	w.n--
	return w.slots[i], true
}

// reset forgets every kept packet (the QP failed or closed).
func (w *reorderWindow) reset() {
	clear(w.have)
	w.n = 0
}

// resendQueue is the requester's selective-repeat queue: PSNs a NAK or a
// timeout asked for, oldest first, each at most once. It is bounded; a
// PSN that does not fit is left to the next timeout.
type resendQueue struct {
	q    [64]ib.PSN
	h, n int
}

// push queues p unless it is queued already or the queue is full.
func (q *resendQueue) push(p ib.PSN) bool {
	if q.n == len(q.q) || q.contains(p) {
		return false
	}
	q.q[(q.h+q.n)%len(q.q)] = p
	q.n++
	return true
}

func (q *resendQueue) contains(p ib.PSN) bool {
	for i := 0; i < q.n; i++ {
		if q.q[(q.h+i)%len(q.q)] == p {
			return true
		}
	}
	return false
}

// pop returns the oldest queued PSN.
func (q *resendQueue) pop() (ib.PSN, bool) {
	if q.n == 0 {
		return 0, false
	}
	p := q.q[q.h]
	q.h = (q.h + 1) % len(q.q)
	q.n--
	return p, true
}

func (q *resendQueue) reset() { q.h, q.n = 0, 0 }

// rttEstimator measures a QP's round trip from one sampled PSN at a time:
// the time from its first transmission to the ACK that covers it. A sample
// is dropped when anything is retransmitted meanwhile (Karn's rule: the
// ACK may be for the copy, or held behind a hole). It keeps RFC 6298's
// smoothed RTT and variation, and the smallest sample.
type rttEstimator struct {
	sampling     bool
	psn          ib.PSN
	at           sim.Time
	srtt, rttvar sim.Time
	min          sim.Time
	ok           bool
}

// sent notes the first transmission of psn at now; it becomes the sample
// if none is running.
func (e *rttEstimator) sent(psn ib.PSN, now sim.Time) {
	if !e.sampling {
		e.sampling, e.psn, e.at = true, psn, now
	}
}

// acked notes that every PSN before to is acknowledged at now.
func (e *rttEstimator) acked(to ib.PSN, now sim.Time) {
	if !e.sampling || !to.After(e.psn) {
		return
	}
	e.sampling = false
	r := now - e.at
	if !e.ok {
		e.srtt, e.rttvar, e.min, e.ok = r, r/2, r, true
		return
	}
	d := e.srtt - r
	if d < 0 {
		d = -d
	}
	e.rttvar = (3*e.rttvar + d) / 4
	e.srtt = (7*e.srtt + r) / 8
	e.min = min(e.min, r)
}

// retransmitted cancels the running sample (Karn's rule).
func (e *rttEstimator) retransmitted() { e.sampling = false }

// rto is srtt + 4 rttvar, clamped to [lo, hi]; hi before any sample.
func (e *rttEstimator) rto(lo, hi sim.Time) sim.Time {
	if !e.ok {
		return hi
	}
	return min(max(e.srtt+4*e.rttvar, lo), hi)
}
