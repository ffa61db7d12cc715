package fabric

import (
	"fmt"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// PFC: priority flow control (IEEE 802.1Qbb) with one lossless priority
// that every packet belongs to, so "RoCEv2 on a lossless fabric" can be
// compared with MetaRoCE on a lossy one. It is a per-link setting
// (LinkParams.PFC); a link without it stays lossy.
//
// The model, per link direction whose PFC is on:
//
//   - ingress accounting: the switch at the far end counts the bytes of
//     packets that arrived through this direction and still sit in one of
//     its egress queues (waiting or being serialized);
//   - XOFF: when the count rises above XOff the switch sends a PAUSE frame
//     back to the sender; XON: when it falls to XOn or below, a resume
//     (a PAUSE with zero quanta);
//   - the frame takes effect at the sender after the frame's own time on
//     the wire — it waits for the packet the reverse direction is
//     serializing (a MAC control frame cannot preempt one), then 64 bytes
//     at the link rate and the propagation delay. Meanwhile the sender
//     keeps sending: that is the headroom a real switch reserves (2 x the
//     link's bandwidth-delay product plus two MTUs), and MaxIngressBytes
//     shows how much of it was used;
//   - a paused sender finishes the packet it is serializing and starts no
//     other; a paused NIC port reports not idle, so a pull-style NIC stops
//     sending; a paused switch port's queue grows, its own ingress counts
//     grow, and the pause spreads hop by hop back to the senders, with the
//     head-of-line blocking that makes PFC what it is: a paused port holds
//     every flow queued behind it, congested destination or not;
//   - lossless: a packet that arrived through a PFC direction (or that a
//     host sent on a PFC link) is never dropped for a full queue — its
//     queue is bounded by the pauses, not by QueueBytes. Packets from
//     lossy ingresses still see drop-tail. Random loss and other
//     impairments still apply if configured: a lossless fabric is one
//     without them.
//
// Simplifications, stated: one priority class; no pause-quanta timer (a
// pause lasts until the resume, as with XON/XOFF refresh); hosts never
// pause the switch (a NIC drains what it receives at once); no PFC
// watchdog or deadlock detection. A network with PFC on any link runs
// every link on the staged model (one event per serialization and per
// arrival), which is slower than the one-event-per-hop model the fabric
// uses otherwise.

// PFCConfig is a link's PFC setting. The zero value is off.
type PFCConfig struct {
	// XOff is the ingress byte count above which the far switch pauses
	// this direction's sender; 0 turns PFC off.
	XOff int
	// XOn is the count at or below which it resumes it; 0 <= XOn < XOff.
	XOn int
}

// DefaultPFC returns a lab's PFC when a file says only "pfc: on": pause above
// 64 KiB waiting from one ingress (about five microseconds of a 100 Gbit/s
// link), resume at 56 KiB.
func DefaultPFC() PFCConfig { return PFCConfig{XOff: 64 << 10, XOn: 56 << 10} }

// Enabled reports whether the setting turns PFC on.
func (c PFCConfig) Enabled() bool { return c.XOff > 0 }

// Validate checks the thresholds.
func (c PFCConfig) Validate() error {
	switch {
	case c.XOff < 0 || c.XOn < 0:
		return fmt.Errorf("pfc: negative threshold (xoff %d, xon %d)", c.XOff, c.XOn)
	case c.XOff == 0 && c.XOn != 0:
		return fmt.Errorf("pfc: xon %d without xoff (xoff 0 means PFC off)", c.XOn)
	case c.XOff > 0 && c.XOn >= c.XOff:
		return fmt.Errorf("pfc: xon %d must be below xoff %d", c.XOn, c.XOff)
	}
	return nil
}

// pauseFrameBytes is a PAUSE frame's size on the wire (a minimum Ethernet
// frame).
const pauseFrameBytes = 64

// pfcState is one link direction's PFC state: as an ingress into the far
// switch (inBytes, xoff) and as a sender (paused, and the frames on their
// way to it). Every port of a network with PFC on any link has one; cfg is
// that direction's link setting (off: it counts, never pauses, and its
// packets are not lossless).
type pfcState struct {
	cfg PFCConfig
	// inBytes counts the bytes that arrived through this direction and sit
	// in the far switch's egress queues; xoff is whether the far switch
	// has asked the sender to pause (the last frame it sent).
	inBytes int
	xoff    bool
	// paused is the sender's view: a PAUSE arrived and no resume since.
	paused bool
	// flips are the arrival times of frames on their way to the sender,
	// oldest first (a ring that grows); each toggles paused. timer fires
	// at the oldest.
	flips       []sim.Time
	fHead, fLen int
	lastFlip    sim.Time
	timer       sim.Timer
	// Counters: pauses that took effect, time spent paused, the largest
	// ingress count.
	pauses      uint64
	pausedSince sim.Time
	pausedTime  sim.Time
	maxIn       int
}

// initPFC gives every port PFC state when any link has PFC on.
func (n *Network) initPFC() {
	on := false
	for _, p := range n.ports {
		on = on || p.params.PFC.Enabled()
	}
	if !on {
		return
	}
	for _, p := range n.ports {
		p := p
		st := &pfcState{cfg: p.params.PFC, flips: make([]sim.Time, 4)}
		st.timer.Init(func(now sim.Time, _ any) { p.pfcFlip(now) }, nil)
		st.timer.Own(&p.org)
		p.pfc = st
	}
}

// PFCEnabled reports whether any link has PFC on.
func (n *Network) PFCEnabled() bool { return len(n.ports) > 0 && n.ports[0].pfc != nil }

// pfcIngress marks b as having arrived through p (called for packets a
// switch is about to forward); b.Hop carries it while b waits in the
// switch.
func (p *Port) pfcIngress(b *packet.Buffer) { b.Hop = p.idx + 1 }

// pfcLossless reports whether b, offered to p, may not be dropped for a
// full queue: it came through a PFC ingress, or a host sent it on a PFC
// link.
func (p *Port) pfcLossless(b *packet.Buffer) bool {
	if b.Hop <= 0 || b.Hop > len(p.net.ports) {
		return p.pfc.cfg.Enabled()
	}
	return p.net.ports[b.Hop-1].pfc.cfg.Enabled()
}

// pfcAdmit counts b, just accepted into p's queue or server, against the
// ingress it arrived through, pausing that ingress's sender above XOff.
// Packets a host sent (Hop 0) count against nothing.
func (p *Port) pfcAdmit(now sim.Time, b *packet.Buffer) {
	if b.Hop <= 0 || b.Hop > len(p.net.ports) {
		return
	}
	up := p.net.ports[b.Hop-1]
	in := up.pfc
	in.inBytes += b.Len()
	in.maxIn = max(in.maxIn, in.inBytes)
	if in.cfg.Enabled() && !in.xoff && in.inBytes > in.cfg.XOff {
		in.xoff = true
		up.pfcSendFrame(now)
	}
}

// pfcRelease uncounts b, leaving p (serialized, or flushed), and resumes
// its ingress's sender at or below XOn.
func (p *Port) pfcRelease(now sim.Time, b *packet.Buffer) {
	if b.Hop <= 0 || b.Hop > len(p.net.ports) {
		return
	}
	up := p.net.ports[b.Hop-1]
	b.Hop = 0
	in := up.pfc
	in.inBytes -= b.Len()
	if in.xoff && in.inBytes <= in.cfg.XOn {
		in.xoff = false
		up.pfcSendFrame(now)
	}
}

// pfcSendFrame sends a PAUSE or resume frame from p's far end to p's
// sender: it follows the packet the reverse direction is serializing, then
// takes its own 64 bytes and the propagation delay. Frames stay in order.
func (p *Port) pfcSendFrame(now sim.Time) {
	if !p.link.up {
		return // nothing crosses a down link; goDown reset the sender
	}
	st := p.pfc
	startPs := int64(now) * 1000
	if rev := p.peer; rev.inService != nil && rev.busyPs > startPs {
		startPs = rev.busyPs
	}
	atPs := startPs + int64(pauseFrameBytes*8*1e12/p.rate) + int64(p.params.Delay)*1000
	at := max(sim.Time((atPs+999)/1000), st.lastFlip, now)
	st.lastFlip = at
	if at == now && st.fLen == 0 {
		p.pfcToggle(now)
		return
	}
	if st.fLen == len(st.flips) {
		f := make([]sim.Time, 2*len(st.flips))
		for i := 0; i < st.fLen; i++ {
			f[i] = st.flips[(st.fHead+i)%len(st.flips)]
		}
		st.flips, st.fHead = f, 0
	}
	st.flips[(st.fHead+st.fLen)%len(st.flips)] = at
	st.fLen++
	if st.fLen == 1 {
		p.s.Arm(&st.timer, at)
	}
}

// pfcFlip is the frame timer: the oldest frame on its way reaches the
// sender.
func (p *Port) pfcFlip(now sim.Time) {
	st := p.pfc
	if st.fLen == 0 {
		return
	}
	st.fHead = (st.fHead + 1) % len(st.flips)
	st.fLen--
	if st.fLen > 0 {
		p.s.Arm(&st.timer, st.flips[st.fHead])
	}
	p.pfcToggle(now)
}

// pfcToggle applies a frame at the sender.
func (p *Port) pfcToggle(now sim.Time) {
	st := p.pfc
	if !st.paused {
		st.paused = true
		st.pauses++
		st.pausedSince = now
		return
	}
	p.pfcResume(now)
}

// pfcResume lets a paused direction send again: the next queued packet
// starts, or the sender hears the port is idle.
func (p *Port) pfcResume(now sim.Time) {
	st := p.pfc
	st.paused = false
	st.pausedTime += now - st.pausedSince
	if p.inService != nil {
		return
	}
	if p.qLen > 0 {
		nb := p.pop()
		p.addQueue(now, -nb.Len())
		start := int64(now) * 1000
		if start <= p.busyPs {
			start = p.busyPs
		} else {
			p.remNum = 0
		}
		p.startTx(now, nb, start)
		return
	}
	if p.onIdle != nil {
		p.onIdle(now)
	}
}

// pfcReset clears a direction's pause state when its link fails: frames on
// the way are lost, the sender is no longer paused, and the far switch
// forgets it asked for a pause (it will ask again if its count is still
// above XOff when the next packet comes).
func (p *Port) pfcReset(now sim.Time) {
	st := p.pfc
	st.fHead, st.fLen = 0, 0
	p.s.Disarm(&st.timer)
	st.xoff = false
	if st.paused {
		st.paused = false
		st.pausedTime += now - st.pausedSince
	}
}

// pfcHeld reports whether p is paused (its queue must wait).
func (p *Port) pfcHeld() bool { return p.pfc != nil && p.pfc.paused }

// pfcCounters fills lc's PFC figures.
func (p *Port) pfcCounters(now sim.Time, lc *LinkCounters) {
	st := p.pfc
	if st == nil {
		return
	}
	t := st.pausedTime
	if st.paused {
		t += now - st.pausedSince
	}
	lc.PFCPauses, lc.PFCPausedTime, lc.PFCMaxIngressBytes = st.pauses, t, st.maxIn
}
