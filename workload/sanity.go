package workload

import (
	"fmt"

	"github.com/mrlab/mrlab/transport"
)

// SanityFraction is the share of the no-loss bound (Sanity.BoundGbps) a
// bandwidth run's goodput must reach to read as sane. The bound is an
// upper bound (it ignores fabric oversubscription, headers and
// congestion), so healthy runs on the shipped labs reach far more than
// this: 0.1% loss costs RoCEv2's go-back-N about half, an oversubscribed
// bed half again. A run below a twentieth of it has lost more than an
// order of magnitude to something: a congestion-control or
// retransmission bug, a lab far lossier than intended.
const SanityFraction = 0.05

// Sanity compares a bandwidth run's goodput with what the lab's capacity
// and the workload allow with no loss on the path:
//
//   - capacity: every flow is limited by the slower of its two NICs
//     (all ports), every sending NIC and every receiving NIC by its own
//     rate, shared by its flows;
//   - window: a flow has at most queue-depth messages outstanding, and
//     none completes faster than the fastest message of the run did, so a
//     flow moves at most depth x size per fastest message time.
//
// Latency, collective and UDP runs are not judged (Judged false).
type Sanity struct {
	Judged    bool    `json:"judged"`
	BoundGbps float64 `json:"bound_gbps,omitempty"`
	Fraction  float64 `json:"fraction,omitempty"`
	OK        bool    `json:"ok"`
	Why       string  `json:"why,omitempty"`
}

// bounder is an engine whose runs Sanity judges.
type bounder interface {
	// bound returns the capacity bound and the window bound in bit/s.
	bound(r *runner, fastest float64) (capacity, window float64)
}

// sanity judges res (summarised) against the engine's bounds.
func (r *runner) sanity(res *Result) Sanity {
	b, ok := r.eng.(bounder)
	if !ok || res.MessageTime.N == 0 || res.GoodputGbps <= 0 && res.Messages == 0 {
		return Sanity{OK: true, Why: "not judged: no bandwidth bound for this workload"}
	}
	capacity, window := b.bound(r, res.MessageTime.Min.Seconds())
	bound := capacity
	if window > 0 && window < bound {
		bound = window
	}
	s := Sanity{Judged: true, BoundGbps: bound / 1e9, OK: true}
	if bound > 0 {
		s.Fraction = res.GoodputGbps / s.BoundGbps
	}
	if s.Fraction < SanityFraction {
		s.OK = false
		s.Why = fmt.Sprintf("goodput %.3g Gb/s is %.2g%% of the %.3g Gb/s the lab's capacity and the workload allow with no loss (under %.0f%%)",
			res.GoodputGbps, 100*s.Fraction, s.BoundGbps, 100*SanityFraction)
	}
	return s
}

// bound implements bounder for point-to-point flows.
func (e *streamEngine) bound(r *runner, fastest float64) (capacity, window float64) {
	rate := func(h int) float64 { return r.cl.NICs[h].Rate() * float64(r.cl.NICs[h].Ports()) }
	out, in := map[int]bool{}, map[int]bool{}
	var perFlow float64
	for _, f := range e.flows {
		src, dst := f.from, f.to
		if e.op == transport.OpRead {
			src, dst = dst, src
		}
		out[src], in[dst] = true, true
		perFlow += min(rate(src), rate(dst))
		if fastest > 0 {
			window += float64(e.spec.QueueDepth) * float64(f.size) * 8 / fastest
		}
	}
	var sendCap, recvCap float64
	for h := range out {
		sendCap += rate(h)
	}
	for h := range in {
		recvCap += rate(h)
	}
	return min(perFlow, sendCap, recvCap), window
}
