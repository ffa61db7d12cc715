package fabric

import (
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// The one-event-per-hop link model, used by every link direction without
// PFC. A FIFO line with a fixed rate is a "virtual busy-until" server: a
// packet accepted at time t starts serializing at max(t, busyUntil),
// ends n*8/rate later, and reaches the far end a propagation delay (and
// any impairment delay) after that — all known at enqueue. So the packet
// gets one event, its arrival, instead of one per stage; the departures
// scheduled but not yet over sit in a ring (Port.deps), from which the
// queue an arrival finds follows: entries whose serialization ended by
// then are popped, the head is being serialized, the rest wait. That is
// what drop-tail, ECN step K and RED look at, exactly as before, at
// picosecond resolution.
//
// What needs care:
//   - a NIC's pull-style OnIdle gets an event only when the line frees
//     up (idleTimer, armed only when OnIdle is set);
//   - link down drops what is still being serialized or waiting (the
//     ring's entries that have not ended: their arrival timers are
//     disarmed) and, by the epoch in b.Hop, what is propagating;
//   - a rate change (SetRate, an impairment's rate) applies to packets
//     enqueued after it: departures already scheduled keep their times;
//   - impairments are drawn at enqueue (duplicates, delay, whether to
//     corrupt and, on the wire, whether to lose; the loss or the flipped
//     bit happens at arrival);
//   - observers still see EvTransmit when serialization starts: obsTimer
//     walks the ring's start times, and only when an observer is set. It
//     only reports, so a run is the same with and without observers.

// enqueueFast offers b, which arrived at atPs, to a port without PFC.
func (p *Port) enqueueFast(now sim.Time, b *packet.Buffer, atPs int64) {
	p.retire(nsEnd(now))
	n := b.Len()
	idle := p.dLen == 0
	if p.ecnOn && p.params.ECN.Weight > 0 {
		p.updateREDAvg(now, n, idle)
	}
	if !idle && p.qBytes+n > p.params.QueueBytes {
		p.drop(now, b, DropQueueFull)
		return
	}
	if p.ecnOn {
		p.mark(now, b)
	}
	obs := p.obs
	if obs != nil {
		obs.Observe(now, EvEnqueue, Point{Link: p.idx}, b, DropNone)
	}
	start := atPs
	if start <= p.busyPs {
		// The line frees up no earlier than this packet came: continue
		// exactly where the last packet ends.
		start = p.busyPs
	} else {
		p.remNum = 0
	}
	end := start + p.txPs(n)
	p.busyPs = end
	p.c.txPkts++
	p.c.txBytes += uint64(n)
	if p.dLen == len(p.deps) {
		p.growDeps()
	}
	p.deps[(p.dHead+p.dLen)&(len(p.deps)-1)] = departure{startPs: start, endPs: end, n: n, b: b}
	p.dLen++
	if !idle {
		p.addQueue(now, n)
	}
	if obs != nil {
		if p.nSeen == p.dLen-1 && start <= nsEnd(now) {
			// Serializing already (the line was free): report it now,
			// as the staged model did.
			obs.Observe(now, EvTransmit, Point{Link: p.idx}, b, DropNone)
			p.nSeen++
		} else if !p.obsTimer.Armed() {
			// Armed before the arrival, so at equal times it fires first.
			p.armObs()
		}
	}
	atArr := end + int64(p.params.Delay)*1000
	flags := p.wireLoss(now, b)
	if p.deliverImpaired {
		p.impairDelivery(now, b, atArr, flags)
	} else {
		p.fifo(b, atArr, flags)
	}
	if p.onIdle != nil {
		// Idle in the nanosecond the last bit leaves (floor), as Idle says.
		p.s.Arm(&p.idleTimer, sim.Time(end/1000))
	}
}

func (p *Port) growDeps() {
	d := make([]departure, ringGrow(len(p.deps)))
	for i := 0; i < p.dLen; i++ {
		d[i] = p.deps[(p.dHead+i)&(len(p.deps)-1)]
	}
	p.deps, p.dHead = d, 0
}

// retire pops the departures whose serialization ended by atPs: the next
// packet starts serializing when one ends, so it leaves the waiting bytes
// then. It reads only the ring's own fields, never the packets (an ended
// serialization's packet may have arrived and been freed).
func (p *Port) retire(atPs int64) {
	if p.dLen == 1 && p.busyPs <= atPs && (p.nSeen > 0 || p.obs == nil) {
		// The usual case on a lightly loaded port: its one departure,
		// the line's last, is over. Its end is busyPs (the newest
		// departure always ends at busyPs), so the ring is not read: at
		// 1,024 hosts that read was a cache miss per hop. Its slot keeps
		// the stale entry (outside the live range, overwritten in turn).
		if p.nSeen > 0 {
			p.nSeen--
		}
		p.dHead = (p.dHead + 1) & (len(p.deps) - 1)
		p.dLen = 0
		p.idleSince = sim.Time(p.busyPs / 1000)
		return
	}
	for p.dLen > 0 {
		d := &p.deps[p.dHead]
		if d.endPs > atPs {
			return
		}
		if p.nSeen > 0 {
			p.nSeen--
		} else if o := p.obs; o != nil {
			// Not reported yet (an observer set meanwhile): the packet
			// has not arrived, it is still ours to show.
			o.Observe(p.s.Now(), EvTransmit, Point{Link: p.idx}, d.b, DropNone)
		}
		endPs := d.endPs
		*d = departure{}
		p.dHead = (p.dHead + 1) & (len(p.deps) - 1)
		p.dLen--
		if p.dLen > 0 {
			p.addQueue(sim.Time(endPs/1000), -p.deps[p.dHead].n)
		} else {
			p.idleSince = sim.Time(endPs / 1000)
		}
	}
}

// settle brings the fast path's queue figures up to the scheduler's now.
func (p *Port) settle() {
	if p.pfc == nil {
		p.retire(nsEnd(p.s.Now()))
	}
}

// nsEnd is the last picosecond of nanosecond now. A serialization that
// ends within the current nanosecond counts as over, as Idle reports it:
// the staged model's end-of-serialization event fired in that nanosecond
// too (floor), so a pull sender never sees its own last packet as queue.
func nsEnd(now sim.Time) int64 { return int64(now)*1000 + 999 }

// reschedule re-times the departures that have not started serializing
// at now after a rate change (the change applies from the next packet to
// start, as it does on a real line): each starts where the one before now
// ends, and its arrival moves with it (keeping its impairment delay).
// Duplicates already made keep their times.
func (p *Port) reschedule(now sim.Time) {
	nowPs := int64(now) * 1000
	prevOld, prevNew := int64(-1), int64(-1)
	moved := false
	for i := 0; i < p.dLen; i++ {
		d := &p.deps[(p.dHead+i)&(len(p.deps)-1)]
		if d.startPs <= nowPs {
			prevOld, prevNew = d.endPs, d.endPs
			continue
		}
		start := d.startPs
		if prevOld >= 0 && start <= prevOld {
			start = prevNew // it was waiting for the one before
		}
		end := start + p.txPs(d.n)
		b := d.b
		arr := int64(b.Stamp) + end - d.endPs
		b.Stamp = sim.Time(arr)
		if b.Timer.Armed() {
			p.s.Arm(&b.Timer, sim.Time((arr+999)/1000))
		} else {
			p.refly(b, arr)
		}
		prevOld = d.endPs
		d.startPs, d.endPs = start, end
		prevNew = end
		moved = true
	}
	if !moved {
		return
	}
	p.armFly()
	p.busyPs = prevNew
	if p.idleTimer.Armed() {
		p.s.Arm(&p.idleTimer, sim.Time(p.busyPs/1000))
	}
	if p.obsTimer.Armed() {
		p.armObs()
	}
}

// idleFired is idleTimer: the line has freed up (unless a later Send
// re-armed the timer, in which case it fires then).
func (p *Port) idleFired(now sim.Time) {
	if p.onIdle != nil && p.Idle() {
		p.onIdle(now)
	}
}

// observeStarts reports EvTransmit for every departure that has started
// serializing by now and was not reported, then arms obsTimer for the
// next one.
func (p *Port) observeStarts(now sim.Time) {
	o := p.obs
	if o == nil {
		return
	}
	limit := (int64(now) + 1) * 1000
	for p.nSeen < p.dLen {
		d := &p.deps[(p.dHead+p.nSeen)&(len(p.deps)-1)]
		if d.startPs >= limit {
			break
		}
		o.Observe(now, EvTransmit, Point{Link: p.idx}, d.b, DropNone)
		p.nSeen++
	}
	p.armObs()
}

// armObs arms obsTimer for the first unreported departure, if any.
func (p *Port) armObs() {
	if p.nSeen >= p.dLen {
		return
	}
	d := &p.deps[(p.dHead+p.nSeen)&(len(p.deps)-1)]
	p.s.Arm(&p.obsTimer, sim.Time(d.startPs/1000))
}

// goDownFast flushes a fast-path direction when its link fails: packets
// whose serialization has not ended are dropped (their arrival disarmed);
// those already propagating are lost on arrival by the epoch. It reports
// whether the line was busy (its sender is owed an idle callback).
func (p *Port) goDownFast(now sim.Time) bool {
	busy := !p.Idle()
	nowPs := int64(now) * 1000
	p.retire(nsEnd(now))
	if p.obs != nil {
		p.observeStarts(now)
	}
	p.epoch++
	// Cancel the arrivals newest first: those in the FIFO are its tail.
	for i := p.dLen - 1; i >= 0; i-- {
		b := p.deps[(p.dHead+i)&(len(p.deps)-1)].b
		if b.Timer.Armed() {
			p.s.Disarm(&b.Timer)
		} else {
			p.unflyTail(b)
		}
	}
	for p.dLen > 0 {
		d := p.deps[p.dHead]
		p.deps[p.dHead] = departure{}
		p.dHead = (p.dHead + 1) & (len(p.deps) - 1)
		p.dLen--
		if d.startPs > nsEnd(now) {
			// Never started: it was not transmitted after all.
			p.c.txPkts--
			p.c.txBytes -= uint64(d.n)
		}
		p.drop(now, d.b, DropLinkDown)
	}
	p.nSeen = 0
	p.addQueue(now, -p.qBytes)
	p.s.Disarm(&p.idleTimer)
	p.s.Disarm(&p.obsTimer)
	p.busyPs, p.remNum = nowPs, 0
	p.idleSince = now
	p.redAvg = 0
	return busy
}

// refly moves b, in flight on the FIFO and not yet serializing, to arrive
// at arrPs with a new key, as re-arming its own timer did. Only packets
// that have not started serializing move, and they move together, so the
// FIFO stays in arrival order.
func (p *Port) refly(b *packet.Buffer, arrPs int64) {
	for i := p.fLen - 1; i >= 0; i-- {
		f := &p.fly[(p.fHead+i)&(len(p.fly)-1)]
		if f.b == b {
			f.atPs, f.key = arrPs, p.org.NextKey()
			return
		}
	}
}
