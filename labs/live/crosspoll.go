package live

import (
	"fmt"
	"time"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// crossPoller serves a partition's inbound crossings on its pacer, between
// events, as the pacer serves the verbs rings (it is the pacer's Poller,
// and hands on to the one it replaces): every packet drained is armed on
// the partition's loop at its stamp, so the pacer runs its arrival when
// the wall clock reaches it, or at once, counted late, if it came after.
// Before the pacer sleeps it says it sleeps, so a push wakes it (the
// crossings write the pacer's own eventfd: crossing.SetWake).
//
// Each pacer's lab time is wall time since its own Run began, so a stamp
// in the sender's time is moved into the receiver's by the difference of
// their starts, read once both have started.
type crossPoller struct {
	p    *Pacer
	ins  []*crossing
	from []*Pacer
	// off[i] is this pacer's time minus from[i]'s for one instant
	// (known[i] once read).
	off   []sim.Time
	known []bool
	fns   []func(at sim.Time, key uint64, b *packet.Buffer)
	next  Poller // the verbs rings' poller, if any
}

// newCrossPoller makes p serve its inbound crossings; it takes p's poller
// over (call it after SetPoller, before Run).
func newCrossPoller(p *Pacer) *crossPoller {
	cp := &crossPoller{p: p, next: p.poller}
	p.SetPoller(cp)
	return cp
}

// add serves in, whose packets from's loop pushes stamped in its own time,
// on the pacer: arrive runs on the loop at each packet's stamp (or at
// once if that has passed), with the packet, which it owns. Call it
// before Run.
func (cp *crossPoller) add(in *crossing, from *Pacer, arrive func(now sim.Time, b *packet.Buffer)) error {
	if cp.p.w == nil {
		return fmt.Errorf("crossing %s: the pacer has no waiter", in.name)
	}
	in.SetWake(&cp.p.sleeping, cp.p.w.efd)
	loop := cp.p.loop
	fire := func(now sim.Time, arg any) { arrive(now, arg.(*packet.Buffer)) }
	i := len(cp.ins)
	cp.ins, cp.from = append(cp.ins, in), append(cp.from, from)
	cp.off, cp.known = append(cp.off, 0), append(cp.known, false)
	p := cp.p
	cp.fns = append(cp.fns, func(at sim.Time, key uint64, b *packet.Buffer) {
		at += cp.off[i]
		if now := loop.Now(); at < now {
			// The loop has run past the stamp: it arms the arrival at
			// its clock, where the pacer would see it barely late, so
			// the lateness against the wall clock is counted here.
			p.noteLateArrival(time.Duration(p.elapsed() - at))
		}
		b.Timer.Init(fire, b)
		loop.ArmKey(&b.Timer, at, key)
	})
	return nil
}

// Poll drains every inbound crossing onto the loop, lateness measured
// against the wall clock.
func (cp *crossPoller) Poll(now sim.Time) bool {
	got := false
	if len(cp.ins) > 0 {
		wall, thr := cp.p.elapsed(), sim.Time(cp.p.cfg.LagThreshold)
		for i, in := range cp.ins {
			if !cp.known[i] {
				select {
				case <-cp.from[i].started: // its start is set
					cp.off[i], cp.known[i] = sim.Time(cp.from[i].start.Sub(cp.p.start)), true
				default:
					continue // nothing pushed yet
				}
			}
			// Lateness is measured in the sender's time: the stamp
			// against the wall clock the sender reads.
			if in.Drain(wall-cp.off[i], thr, cp.fns[i]) > 0 {
				got = true
			}
		}
	}
	if cp.next != nil && cp.next.Poll(now) {
		got = true
	}
	return got
}

// Sleeping marks the pacer asleep before it looks at its crossings once
// more: a push from then on wakes it (the pacer's sleep marks it again
// and finds the eventfd written). True means a packet is waiting.
func (cp *crossPoller) Sleeping(now, until sim.Time) bool {
	if len(cp.ins) > 0 && crossSpin > 0 {
		for end := cp.p.elapsed() + crossSpin; cp.p.elapsed() < end; {
			for _, in := range cp.ins {
				if in.Pending() > 0 {
					return true
				}
			}
		}
	}
	if len(cp.ins) > 0 {
		cp.p.sleeping.Store(true)
		for _, in := range cp.ins {
			if in.Pending() > 0 {
				cp.p.sleeping.Store(false)
				return true
			}
		}
	}
	return cp.next != nil && cp.next.Sleeping(now, until)
}

// noteLateArrival counts, as the lateness of an event, a packet that
// reached this pacer's partition lag after its stamp, when the loop's
// clock had passed the stamp (runUntil measures the rest itself). Its
// arrival event then runs and counts too, with the lateness it has
// against the loop's clock. Loop goroutine only.
func (p *Pacer) noteLateArrival(lag time.Duration) { p.noteLag(lag, p.cfg.LagThreshold) }

// crossSpin is how long a pacer with crossings watches them before it
// sleeps when it has no event due sooner. Zero (the default) sleeps at
// once and is woken by the push. BenchmarkPacedPartitions measures both:
// watching 250 us cut the CPU per hop 7-9x on this 2-core box (fewer
// wake-ups), and still left two partitions 8-10x slower than one.
var crossSpin = sim.Time(0)

// Stats reads the inbound crossings' counters (any goroutine).
func (cp *crossPoller) Stats() []CrossingStats {
	out := make([]CrossingStats, len(cp.ins))
	for i, in := range cp.ins {
		out[i] = in.Stats()
	}
	return out
}
