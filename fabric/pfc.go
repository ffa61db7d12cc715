package fabric

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// PFC: priority flow control (IEEE 802.1Qbb) with one lossless priority
// that every packet belongs to, so "RoCEv2 on a lossless fabric" can be
// compared with MetaRoCE on a lossy one. It is off unless enabled
// (BuildOptions.PFC or Network.EnablePFC), and off it costs one nil check
// per packet at enqueue, arrival, end of serialization and Idle.
//
// The model: a switch counts, per ingress port, the bytes of packets that
// arrived through that port and still sit in one of its egress queues
// (waiting or being serialized). When the count exceeds XOff, the
// upstream sender's link direction — the one the packets arrived on —
// pauses: it finishes the packet it is serializing and starts no other.
// When the count falls to XOn or below, it resumes. A paused NIC port
// reports not idle, so a pull-style NIC stops sending; a paused switch
// port's queue grows, its own ingress counts grow, and the pause spreads
// hop by hop back to the senders, head-of-line blocking and all, as in a
// real PFC fabric.
//
// Simplifications, stated: pause and resume take effect at once (a real
// PAUSE frame needs a link delay and the receiver reserves headroom for
// what is in flight meanwhile); there is no pause-quanta timer (a pause
// lasts until the resume); and with PFC on no queue drops a packet for
// being full — the link directions are lossless, their depth bounded only
// by the pauses (QueueMaxBytes shows how deep they got). Random loss and
// other impairments still apply if configured: a lossless fabric is one
// without them.

// PFCConfig configures PFC on every link direction of a network.
type PFCConfig struct {
	// XOff is the ingress byte count above which a switch pauses the
	// upstream sender (0 means DefaultPFCXOff).
	XOff int
	// XOn is the count at or below which it resumes it (0 means XOff
	// minus two 4 KiB packets, at least 0). XOn must be below XOff.
	XOn int
}

// DefaultPFCXOff is the default pause threshold: 64 KiB per ingress port,
// about five microseconds of a 100 Gbit/s link.
const DefaultPFCXOff = 64 << 10

// pfcState is one link direction's PFC state: as a sender (paused) and as
// an ingress into the switch at its far end (inBytes).
type pfcState struct {
	cfg *PFCConfig
	// inBytes counts the bytes that arrived through this direction and sit
	// in the far switch's egress queues.
	inBytes int
	paused  bool
	// Counters: pauses received, and time spent paused.
	pauses      uint64
	pausedSince sim.Time
	pausedTime  sim.Time
	maxIn       int
}

func (c PFCConfig) resolved() (PFCConfig, error) {
	if c.XOff == 0 {
		c.XOff = DefaultPFCXOff
	}
	if c.XOn == 0 {
		c.XOn = max(c.XOff-2*4096, 0)
	}
	if c.XOff < 0 || c.XOn < 0 || c.XOn >= c.XOff {
		return c, fmt.Errorf("pfc: want 0 <= XOn < XOff (got XOff %d, XOn %d)", c.XOff, c.XOn)
	}
	return c, nil
}

// EnablePFC turns PFC on for every link direction. Call it before any
// packet is sent (right after Build); a network carrying packets refuses.
func (n *Network) EnablePFC(c PFCConfig) error {
	c, err := c.resolved()
	if err != nil {
		return err
	}
	for _, p := range n.ports {
		p.settle()
		if p.inService != nil || p.qLen > 0 || p.dLen > 0 {
			return fmt.Errorf("pfc: %s is carrying packets: enable PFC before traffic starts", p.name)
		}
	}
	cfg := &c
	for _, p := range n.ports {
		p.pfc = &pfcState{cfg: cfg}
	}
	return nil
}

// PFCEnabled reports whether PFC is on.
func (n *Network) PFCEnabled() bool { return len(n.ports) > 0 && n.ports[0].pfc != nil }

// PFCCounters are one link direction's PFC figures.
type PFCCounters struct {
	Link string
	Dir  Direction
	// Pauses counts how often the direction's sender was paused;
	// PausedTime is how long it was paused in all (to now).
	Pauses     uint64
	PausedTime sim.Time
	// MaxIngressBytes is the largest count of bytes that arrived through
	// this direction and waited in the far switch at once.
	MaxIngressBytes int
}

// PFCCounters returns every paused link direction's PFC counters, sorted
// by link name and direction (nil when PFC is off).
func (n *Network) PFCCounters() []PFCCounters {
	var out []PFCCounters
	now := n.s.Now()
	for _, p := range n.ports {
		st := p.pfc
		if st == nil || (st.pauses == 0 && st.maxIn == 0) {
			continue
		}
		t := st.pausedTime
		if st.paused {
			t += now - st.pausedSince
		}
		out = append(out, PFCCounters{Link: p.link.name, Dir: p.dir, Pauses: st.pauses, PausedTime: t, MaxIngressBytes: st.maxIn})
	}
	slices.SortFunc(out, func(a, b PFCCounters) int {
		return cmp.Or(naturalCompare(a.Link, b.Link), cmp.Compare(a.Dir, b.Dir))
	})
	return out
}

// pfcIngress marks b as having arrived through p (called for packets a
// switch is about to forward); b.Hop carries it while b waits in the
// switch.
func (p *Port) pfcIngress(b *packet.Buffer) { b.Hop = p.idx + 1 }

// pfcAdmit counts b, just accepted into p's queue or server, against the
// ingress it arrived through, pausing that ingress's sender above XOff.
// Packets a host sent (Hop 0) count against nothing.
func (p *Port) pfcAdmit(now sim.Time, b *packet.Buffer) {
	if b.Hop <= 0 || b.Hop > len(p.net.ports) {
		return
	}
	in := p.net.ports[b.Hop-1].pfc
	in.inBytes += b.Len()
	in.maxIn = max(in.maxIn, in.inBytes)
	if !in.paused && in.inBytes > in.cfg.XOff {
		in.paused = true
		in.pauses++
		in.pausedSince = now
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
	if in.paused && in.inBytes <= in.cfg.XOn {
		up.pfcResume(now)
	}
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

// pfcHeld reports whether p is paused (its queue must wait).
func (p *Port) pfcHeld() bool { return p.pfc != nil && p.pfc.paused }
