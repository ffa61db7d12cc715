package fabric

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// Direction selects one direction of a link, or both.
type Direction uint8

// Link directions. A link's A end sends AtoB, its B end BtoA.
const (
	AtoB Direction = iota
	BtoA
	Both
)

// String returns "AtoB", "BtoA" or "both".
func (d Direction) String() string {
	switch d {
	case AtoB:
		return "AtoB"
	case BtoA:
		return "BtoA"
	case Both:
		return "both"
	}
	return "direction(?)"
}

// DefaultQueueBytes is the drop-tail capacity of a link direction whose
// LinkParams.QueueBytes is 0: 1 MiB, about a shallow-buffer switch's share
// per port (256 packets of 4 KiB, 84 us at 100 Gbit/s).
const DefaultQueueBytes = 1 << 20

// Port is a node's end of a link: where the node sends. It owns the
// outgoing direction of the link — a FIFO drop-tail queue counted in bytes,
// a server that serializes one packet at a time at the link rate,
// propagation delay, ECN marking and netem-style impairments — and delivers
// to the node at the far end.
//
// The model, in the order a packet meets it:
//
//   - Send/enqueue: link down => DropLinkDown; with LossAtEnqueue (tc-netem)
//     the loss model => DropImpairment; if the server is busy and the
//     waiting bytes plus this packet exceed the capacity => DropQueueFull.
//     The queue counts packets waiting, not the one being serialized. ECN is
//     decided here, from the queue the packet finds (see ECNConfig).
//   - serialization: n bytes take exactly n*8/rate; the server keeps its
//     busy-until time in picoseconds with the sub-picosecond remainder, so
//     back-to-back packets never drift (1000 x 4096 B at 100 Gbit/s end at
//     exactly 327680 ns). The port reports idle in the nanosecond in which
//     the last bit leaves, so a pull-style sender that sends from OnIdle
//     keeps the line exactly busy.
//   - delivery: arrival = end of serialization + propagation delay + the
//     impairment's delay/jitter (reorder: that fraction of packets skips
//     the impairment delay). Events fire on whole nanoseconds, so the far
//     node gets the packet in the nanosecond after its exact arrival; a
//     switch forwards it with the exact picosecond time, so equal-rate
//     store-and-forward hops never see a phantom queue from rounding.
//     Duplicates are copies made here (they take no link time, like a
//     fault, and get their own delay draw).
//   - loss on the wire (LossAtWire, the default): the loss model is drawn
//     for each packet the queue admits (on the fast path at enqueue, with
//     PFC when its serialization ends); a lost packet is serialized and
//     propagated like any other and the receiving port discards it as an
//     FCS error (DropFCS), so loss costs wire time as on a real link. A
//     corrupted packet is the same FCS error. With LossAtEnqueue a
//     corrupted packet instead arrives with one random bit flipped after
//     the IPv4 header, so the IP header stays valid, switches forward it
//     and the receiver's integrity check must catch it (a packet no longer
//     than its IPv4 header gets the bit anywhere).
//   - link down: queued and serializing packets are dropped (DropLinkDown),
//     and so are packets still propagating when they reach the far end.
//
// A Port is not safe for concurrent use: it runs on its Network's loop.
type Port struct {
	// The fields are in the order the per-packet paths read them, hot
	// first, so a hop touches a few cache lines of the two ports it
	// crosses instead of most of their 16 (at 1,024 hosts a run is bound
	// by cache misses on ports and packets): first what a packet's
	// arrival reads (landHead, arrive), then what a packet's enqueue
	// reads (enqueueFast), then what set-up, failures, impairments and
	// counters read.

	// The packets propagating to the far end, in arrival order (a link
	// direction is a FIFO with a fixed delay), with the one timer that
	// fires at the head: one heap entry per busy direction, not one per
	// packet in flight. Impaired deliveries (delay, jitter, reordering,
	// duplicates, slots) are not in order and keep a timer each.
	flyTimer sim.Timer
	fly      []flight
	fHead    int
	fLen     int
	// ch is the channel to the far end's partition when the link is cut
	// (partitioned.go); nil otherwise.
	ch *sim.Channel
	// s is the loop of the node that sends here (its partition's).
	s sim.Scheduler
	// epoch counts link failures; a packet carries the epoch it was sent
	// in (in Hop) and is lost if the link failed since.
	epoch int
	// up mirrors link.up here, next to what every packet reads, so the
	// per-packet path does not chase the link.
	up  bool
	dir Direction
	// impairedCut: this cut link was impaired mid-run and the channel
	// told so (handOver). Beside up and dir it takes no word of its own:
	// Port stays within the allocator's 1,024-byte class (TestPortSize).
	impairedCut bool
	// Impairment flags (the state is ia, nil while the impairment is
	// zero: most ports of a big fabric are never impaired). The flags
	// let an unimpaired link skip it all.
	lossOn, delayOn, dupOn, corruptOn, slotOn bool
	deliverImpaired                           bool
	// overheadOn: the impairment's rate has netem's packet/cell overhead.
	overheadOn bool
	ecnOn      bool
	// pfc is the direction's PFC state; nil when PFC is off (pfc.go).
	pfc *pfcState
	// deliverTo is the far node (nil: an unattached host); toSwitch is it
	// when it is a switch.
	toSwitch  *switchNode
	deliverTo Node
	// to is this direction's far end (from its near one, below).
	to Endpoint
	// rxObs is the far node's observer (peer.obs), kept here so that an
	// arrival does not read the reverse direction's Port.
	rxObs Observer
	c     dirCounts

	// What an enqueue reads. obs is the observer of this direction's
	// events (nil: none): the network's, or its partition's recorder when
	// partitioned (Network.SetObserver sets it).
	obs Observer
	// org numbers the direction's events: its idle and observer timers
	// and its packets' arrivals (sim.Origin). It is here rather than in
	// an allocation of its own, which every packet would read.
	org     sim.Origin
	params  portParams
	rateBps uint64
	// The server: when the line is free.
	busyPs int64  // end of the current or last serialization, ps
	remNum uint64 // sub-ps remainder, in units of 1/rateBps ps
	// The one-event-per-hop model (every port without PFC; see
	// enqueueFast): the packets whose serialization is scheduled and not
	// yet known to be over, oldest first, in a ring popped lazily. The
	// head is being serialized, the rest wait (qBytes counts them).
	deps  []departure
	dHead int
	dLen  int
	nSeen int // ring entries (from the head) whose EvTransmit was observed
	// The depth statistics of the waiting packets.
	qBytes, qMax int
	qArea        float64 // integral of qBytes over ns since qLast's start
	qLast        sim.Time
	// ECN: RED's averaged queue and when the queue last went idle.
	redAvg    float64
	idleSince sim.Time
	idleTimer sim.Timer // fires when the line frees up, for onIdle
	onIdle    func(now sim.Time)
	// The node's view: what it handed the port (what it received through
	// it is the reverse direction's c.rxPkts and c.rxBytes).
	sentPkts, sentBytes uint64

	net      *Network
	link     *netLink
	idx      int // Point.Link
	name     string
	from     Endpoint
	fromNode int
	toNode   int
	// peer is the reverse direction: the far node's port on the same link.
	peer *Port
	rate float64 // effective: impairment rate override or params.Rate
	rng  *rand.Rand
	// pool is where the direction copies packets (duplicates).
	pool *packet.Pool

	// Impairment state (portimpair.go), nil while the impairment is zero.
	ia *impairState

	// The FIFO of waiting packets of the PFC model (a ring that grows,
	// never shrinks) and the packet being serialized.
	queue       []*packet.Buffer
	qHead, qLen int32 // int32: Port stays within 1,024 bytes
	inService   *packet.Buffer

	obsTimer           sim.Timer // fires at the next unobserved serialization start
	txDoneFn, arriveFn sim.Func

	// rxDrops are the drops the far end makes on arrival (FCS errors,
	// link down in flight, no route), apart from c.drops so that a cut
	// link's two partitions never write one counter.
	rxDrops DropCounts
	// The node's view: drops it made at this port.
	nodeDrops DropCounts
}

// portParams are a direction's LinkParams but for its impairment, which
// only an impaired port holds (impairState).
type portParams struct {
	Rate       float64
	Delay      sim.Time
	QueueBytes int
	ECN        ECNConfig
	PFC        PFCConfig
	LossAt     LossPoint
}

func paramsOf(l LinkParams) portParams {
	return portParams{Rate: l.Rate, Delay: l.Delay, QueueBytes: l.QueueBytes, ECN: l.ECN, PFC: l.PFC, LossAt: l.LossAt}
}

// departure is one packet on the fast path's line: when its serialization
// starts and ends (picoseconds), its length and the packet. The packet
// pointer is only followed while the serialization has not ended (the
// packet cannot have arrived yet).
type departure struct {
	startPs, endPs int64
	n              int
	b              *packet.Buffer
}

// flight is a packet propagating on a FIFO direction: its arrival in
// picoseconds, the event key its port gave it when it was sent (so it fires
// among equal times exactly where its own timer would have) and the packet.
type flight struct {
	atPs int64
	key  uint64
	b    *packet.Buffer
}

// corruptFlag in b.Hop marks a packet to be corrupted on arrival, lostFlag
// one the wire loses (LossAtWire); the rest of Hop, above hopFlagBits, is
// the link epoch it was sent in.
const (
	corruptFlag = 1
	lostFlag    = 2
	hopFlagBits = 2
)

// dirCounts are a link direction's counters.
type dirCounts struct {
	txPkts, txBytes, rxPkts, rxBytes uint64
	drops                            DropCounts
	marks, dups, corrupts            uint64
}

func (p *Port) init(imp Impairment) {
	p.txDoneFn = func(now sim.Time, arg any) { p.txDone(now, arg.(*packet.Buffer)) }
	p.arriveFn = func(now sim.Time, arg any) { p.arrive(now, arg.(*packet.Buffer)) }
	// The queue, departure and flight rings start empty and grow on first
	// use (ringGrow): most of a big fabric's ports carry few packets at
	// once, and preallocating 64 entries each cost 1 GiB at 8 planes x
	// k=32. They never shrink, so steady state allocates nothing.
	p.flyTimer.Init(func(now sim.Time, _ any) { p.landHead(now) }, nil)
	p.flyTimer.Own(&p.org)
	p.idleTimer.Init(func(now sim.Time, _ any) { p.idleFired(now) }, nil)
	p.obsTimer.Init(func(now sim.Time, _ any) { p.observeStarts(now) }, nil)
	p.idleTimer.Own(&p.org)
	p.obsTimer.Own(&p.org)
	p.setImpairment(imp)
	p.setECN(p.params.ECN)
}

// Name returns "link:AtoB" or "link:BtoA".
func (p *Port) Name() string { return p.name }

// Link returns the name of the port's link.
func (p *Port) Link() string { return p.link.name }

// Direction returns the direction this port sends in.
func (p *Port) Direction() Direction { return p.dir }

// Local returns this end of the link (node and port number).
func (p *Port) Local() Endpoint { return p.from }

// Remote returns the far end of the link.
func (p *Port) Remote() Endpoint { return p.to }

// Up reports whether the link is up (administratively, and both of its
// nodes are up).
func (p *Port) Up() bool { return p.up }

// Rate returns the rate the port serializes at, in bit/s (the impairment's
// rate when it degrades the link).
func (p *Port) Rate() float64 { return p.rate }

// Delay returns the link's propagation delay.
func (p *Port) Delay() sim.Time { return p.params.Delay }

// Idle reports whether the outgoing direction is neither serializing nor
// holding queued packets.
//
// Without PFC the port counts as idle from the nanosecond in which the
// last scheduled bit leaves, as it always has: a sender that sends then
// continues exactly where the line frees up.
func (p *Port) Idle() bool {
	if p.pfc == nil {
		return p.busyPs < (int64(p.s.Now())+1)*1000
	}
	return p.inService == nil && !p.pfcHeld()
}

// QueueBytes returns the bytes waiting in the outgoing queue (not counting
// the packet being serialized).
func (p *Port) QueueBytes() int {
	p.settle()
	return p.qBytes
}

// SetOnIdle sets fn to be called each time the outgoing direction becomes
// idle (the last queued packet finished serializing), when its link goes
// down (busy or not: the queue is flushed) and when a downed link comes
// back up, so NICs can transmit pull-style (send one packet, wait for fn)
// and see their port's state change at once. fn may call Send. nil
// removes it.
func (p *Port) SetOnIdle(fn func(now sim.Time)) { p.onIdle = fn }

// Send takes ownership of b (an IPv4 packet) and enqueues it on the outgoing
// direction. Drops are counted and b is freed. b's Timer must not be armed;
// the fabric uses b.Timer, b.Hop and b.Stamp while it holds the packet (a
// receiver finds the exact arrival time in picoseconds in b.Stamp).
func (p *Port) Send(now sim.Time, b *packet.Buffer) {
	p.sentPkts++
	p.sentBytes += uint64(b.Len())
	if p.pfc != nil {
		b.Hop = 0 // a host's packet counts against no switch ingress
	}
	// The packet enters the fabric: validate its headers once, here. A
	// malformed one goes on untagged and the first switch drops it.
	b.Flow = packet.FlowTag{}
	p.net.tag(b)
	p.enqueue(now, b, int64(now)*1000)
}

// enqueue offers b to the outgoing direction. atPs is when the packet
// really arrived, in picoseconds: a forwarded packet's exact arrival
// (events fire on whole nanoseconds, the wire does not), or now for a
// packet a NIC sends.
func (p *Port) enqueue(now sim.Time, b *packet.Buffer, atPs int64) {
	if !p.up {
		p.drop(now, b, DropLinkDown)
		return
	}
	if p.lossOn && p.params.LossAt == LossAtEnqueue && p.ia.loss.lose(p.rng) && !(p.ia.imp.ECN && p.markLost(now, b)) {
		p.drop(now, b, DropImpairment)
		return
	}
	if p.pfc == nil {
		p.enqueueFast(now, b, atPs)
		return
	}
	// PFC: the staged model, one event per serialization and one per
	// arrival, so a pause can hold the queue.
	//
	// A serialization that ended before this packet arrived, whose timer
	// has not fired yet in this nanosecond, is over: finish it first so
	// the packet sees the queue the wire would show.
	for p.inService != nil && p.busyPs <= atPs {
		ib := p.inService
		p.s.Disarm(&ib.Timer)
		p.finishTx(now, ib, false)
	}
	n := b.Len()
	idle := p.inService == nil
	if p.ecnOn && p.params.ECN.Weight > 0 {
		p.updateREDAvg(now, n, idle)
	}
	if !idle && p.qBytes+n > p.params.QueueBytes && !p.pfcLossless(b) {
		p.drop(now, b, DropQueueFull)
		return
	}
	if p.ecnOn {
		p.mark(now, b)
	}
	if o := p.obs; o != nil {
		o.Observe(now, EvEnqueue, Point{Link: p.idx}, b, DropNone)
	}
	p.pfcAdmit(now, b)
	if idle && !p.pfcHeld() {
		start := atPs
		if start <= p.busyPs {
			// The line freed up no later than this packet came:
			// continue exactly where the last packet ended.
			start = p.busyPs
		} else {
			p.remNum = 0
		}
		p.startTx(now, b, start)
		return
	}
	if int(p.qLen) == len(p.queue) {
		p.growQueue()
	}
	p.queue[(int(p.qHead)+int(p.qLen))&(len(p.queue)-1)] = b
	p.qLen++
	p.addQueue(now, n)
}

// ringGrow is the next size of a port's ring that holds n entries and is
// full: twice as many, and at least 4 for the first. Ring sizes are
// powers of two, so an index wraps with a mask (i & (len-1)), not a
// division, which cost tens of cycles several times per hop.
func ringGrow(n int) int { return max(4, 2*n) }

func (p *Port) growQueue() {
	q := make([]*packet.Buffer, ringGrow(len(p.queue)))
	for i := 0; i < int(p.qLen); i++ {
		q[i] = p.queue[(int(p.qHead)+i)&(len(p.queue)-1)]
	}
	p.queue, p.qHead = q, 0
}

func (p *Port) pop() *packet.Buffer {
	b := p.queue[p.qHead]
	p.queue[p.qHead] = nil
	p.qHead = int32((int(p.qHead) + 1) & (len(p.queue) - 1))
	p.qLen--
	return b
}

// addQueue changes the queued bytes by delta, integrating bytes x time for
// the time-averaged depth.
func (p *Port) addQueue(now sim.Time, delta int) {
	if now > p.qLast {
		p.qArea += float64(p.qBytes) * float64(now-p.qLast)
		p.qLast = now
	}
	p.qBytes += delta
	if p.qBytes > p.qMax {
		p.qMax = p.qBytes
	}
}

// txPs returns the serialization time of n bytes in picoseconds, carrying
// the sub-picosecond remainder into the next packet.
func (p *Port) txPs(n int) int64 {
	if p.overheadOn {
		n = p.ia.imp.wireLen(n)
	}
	num := uint64(n)*8*1e12 + p.remNum
	p.remNum = num % p.rateBps
	return int64(num / p.rateBps)
}

func (p *Port) startTx(now sim.Time, b *packet.Buffer, startPs int64) {
	p.inService = b
	p.busyPs = startPs + p.txPs(b.Len())
	p.c.txPkts++
	p.c.txBytes += uint64(b.Len())
	if o := p.obs; o != nil {
		o.Observe(now, EvTransmit, Point{Link: p.idx}, b, DropNone)
	}
	b.Timer.Init(p.txDoneFn, b)
	b.Timer.Own(&p.org)
	// Report done in the nanosecond the last bit leaves (floor), so a
	// pull-style sender continues at exactly busyPs.
	p.s.Arm(&b.Timer, sim.Time(p.busyPs/1000))
}

func (p *Port) txDone(now sim.Time, b *packet.Buffer) { p.finishTx(now, b, true) }

// finishTx sends b on its way to the far end and starts the next queued
// packet. If the queue is empty and notify is set, the sender hears that
// the port is idle (not when a Send is finishing an old serialization on
// its way in: the port is about to be busy again).
func (p *Port) finishTx(now sim.Time, b *packet.Buffer, notify bool) {
	p.inService = nil
	if p.pfc != nil {
		p.pfcRelease(now, b)
	}
	atPs := p.busyPs + int64(p.params.Delay)*1000
	flags := p.wireLoss(now, b)
	if p.deliverImpaired {
		p.impairDelivery(now, b, atPs, flags)
	} else {
		p.fifo(b, atPs, flags)
	}
	if p.qLen > 0 {
		if p.pfcHeld() {
			return // paused: the queue waits for the resume
		}
		nb := p.pop()
		p.addQueue(now, -nb.Len())
		p.startTx(now, nb, p.busyPs)
		return
	}
	p.idleSince = now
	if notify && p.onIdle != nil && !p.pfcHeld() {
		p.onIdle(now)
	}
}

// wireLoss draws the loss model for a packet the line takes, when loss
// happens on the wire (LossAtWire): lostFlag if the wire will lose it
// (netem's "ecn" marks an ECN-capable packet instead), else 0.
func (p *Port) wireLoss(now sim.Time, b *packet.Buffer) int {
	if p.lossOn && p.params.LossAt == LossAtWire && p.ia.loss.lose(p.rng) && !(p.ia.imp.ECN && p.markLost(now, b)) {
		return lostFlag
	}
	return 0
}

// schedule delivers b to the far end at atPs (picoseconds): the event fires
// in the nanosecond after, and b.Stamp keeps the exact time for the next
// hop's serializer. flags are corruptFlag and lostFlag.
func (p *Port) schedule(b *packet.Buffer, atPs int64, flags int) {
	b.Hop = p.epoch<<hopFlagBits | flags
	b.Stamp = sim.Time(atPs)
	b.Timer.Init(p.arriveFn, b)
	b.Timer.Own(&p.org)
	p.s.Arm(&b.Timer, sim.Time((atPs+999)/1000))
}

// arrive runs on the far node's loop (its partition's, when the link is
// cut), so what it reports goes to the far node's observer: the reverse
// direction's (p.rxObs).
func (p *Port) arrive(now sim.Time, b *packet.Buffer) {
	if b.Hop>>hopFlagBits != p.epoch || !p.up {
		// Sent before the link went down: lost on the wire.
		p.dropRx(now, b, DropLinkDown)
		return
	}
	if f := b.Hop & (corruptFlag | lostFlag); f != 0 {
		b.Hop = 0
		if f&lostFlag != 0 {
			p.dropRx(now, b, DropFCS)
			return
		}
		p.c.corrupts++
		if p.params.LossAt == LossAtWire {
			// The flipped bit fails the frame's CRC: the receiving MAC
			// discards it. The packet is reported corrupt, then dropped.
			if o := p.rxObs; o != nil {
				o.Observe(now, EvCorrupt, Point{Link: p.idx}, b, DropNone)
			}
			p.dropRx(now, b, DropFCS)
			return
		}
		// The bit may land in a header-only packet's elided payload:
		// the packet gets its bytes back first (the same draws either way).
		b = b.Expand()
		flipBit(b.Data(), p.rng)
		b.Flow = packet.FlowTag{} // the bit may be in the UDP ports
		if o := p.rxObs; o != nil {
			o.Observe(now, EvCorrupt, Point{Link: p.idx}, b, DropNone)
		}
	}
	if p.deliverTo == nil {
		p.dropRx(now, b, DropNoRoute)
		return
	}
	n := uint64(b.Len())
	p.c.rxPkts++
	p.c.rxBytes += n
	if o := p.rxObs; o != nil {
		o.Observe(now, EvDeliver, Point{Link: p.idx}, b, DropNone)
	}
	if p.toSwitch != nil {
		if p.pfc != nil {
			p.pfcIngress(b)
		}
		p.toSwitch.forward(now, p.to.Port, b, int64(b.Stamp))
		return
	}
	p.deliverTo.Receive(now, p.to.Port, b)
}

// dropRx is drop on the arrival side.
func (p *Port) dropRx(now sim.Time, b *packet.Buffer, r DropReason) {
	p.rxDrops[r]++
	if o := p.rxObs; o != nil {
		o.Observe(now, EvDrop, Point{Link: p.idx}, b, r)
	}
	b.Free()
}

// drops returns every drop the direction counted, on either side.
func (p *Port) drops() DropCounts {
	d := p.c.drops
	d.add(&p.rxDrops)
	return d
}

func (p *Port) drop(now sim.Time, b *packet.Buffer, r DropReason) {
	p.c.drops[r]++
	if o := p.obs; o != nil {
		o.Observe(now, EvDrop, Point{Link: p.idx}, b, r)
	}
	b.Free()
}

// goDown flushes the direction when its link fails. It reports whether the
// direction was busy (its sender is owed an idle callback).
func (p *Port) goDown(now sim.Time) bool {
	if p.pfc == nil {
		return p.goDownFast(now)
	}
	busy := p.inService != nil
	p.pfcReset(now)
	p.epoch++
	if b := p.inService; b != nil {
		p.inService = nil
		p.s.Disarm(&b.Timer)
		if p.pfc != nil {
			p.pfcRelease(now, b)
		}
		p.drop(now, b, DropLinkDown)
	}
	for p.qLen > 0 {
		b := p.pop()
		p.addQueue(now, -b.Len())
		if p.pfc != nil {
			p.pfcRelease(now, b)
		}
		p.drop(now, b, DropLinkDown)
	}
	p.busyPs, p.remNum = int64(now)*1000, 0
	p.idleSince = now
	p.redAvg = 0
	return busy
}

// setRate sets the link's own rate; an impairment rate overrides it. It
// takes effect from the next packet to start serializing (on the fast
// path, the waiting packets' departures are re-timed; see reschedule).
func (p *Port) setRate(r float64) {
	p.params.Rate = r
	eff := r
	if p.ia != nil && p.ia.imp.Rate != 0 {
		eff = p.ia.imp.Rate
	}
	bps := uint64(math.Round(eff))
	changed := bps != p.rateBps
	if changed {
		// The remainder is in units of the old rate.
		p.rateBps, p.remNum = bps, 0
	}
	p.rate = eff
	if changed && p.dLen > 0 {
		p.reschedule(p.s.Now())
	}
}

func (p *Port) setECN(c ECNConfig) {
	p.params.ECN = c
	p.ecnOn = c.Mode != ECNOff
	p.redAvg = 0
}

// ParseDirection reads "AtoB", "BtoA" or "both" (any case; also "a>b",
// "b>a"); "" means both.
func ParseDirection(s string) (Direction, error) {
	switch strings.ToLower(s) {
	case "atob", "a>b":
		return AtoB, nil
	case "btoa", "b>a":
		return BtoA, nil
	case "both", "":
		return Both, nil
	}
	return 0, fmt.Errorf("direction %q: want AtoB, BtoA or both", s)
}

// fifo sends b to the far end at atPs like schedule, through the
// direction's FIFO of packets in flight: arrivals on an unimpaired
// direction come in the order they were sent, so only the head is armed.
// Each packet still takes its port's next key now, so events fire in the
// order per-packet timers gave.
func (p *Port) fifo(b *packet.Buffer, atPs int64, flags int) {
	b.Hop = p.epoch<<hopFlagBits | flags
	b.Stamp = sim.Time(atPs)
	if p.fLen == len(p.fly) {
		p.growFly()
	}
	f := flight{atPs: atPs, key: p.org.NextKey(), b: b}
	p.fly[(p.fHead+p.fLen)&(len(p.fly)-1)] = f
	p.fLen++
	if p.fLen == 1 && p.ch == nil {
		p.s.ArmKey(&p.flyTimer, sim.Time((atPs+999)/1000), f.key)
	}
}

func (p *Port) growFly() {
	f := make([]flight, ringGrow(len(p.fly)))
	for i := 0; i < p.fLen; i++ {
		f[i] = p.fly[(p.fHead+i)&(len(p.fly)-1)]
	}
	p.fly, p.fHead = f, 0
}

// landHead is flyTimer: the head packet arrives; the next one's arrival
// is armed first (it may be in this same nanosecond, with a later key).
func (p *Port) landHead(now sim.Time) {
	b := p.fly[p.fHead].b
	p.fly[p.fHead] = flight{}
	p.fHead = (p.fHead + 1) & (len(p.fly) - 1)
	p.fLen--
	p.armFly()
	p.arrive(now, b)
}

// armFly arms flyTimer for the head of the FIFO, or disarms it.
func (p *Port) armFly() {
	if p.ch != nil {
		return // a cut link's packets leave at barriers (handOver)
	}
	if p.fLen == 0 {
		p.s.Disarm(&p.flyTimer)
		return
	}
	h := &p.fly[p.fHead]
	p.s.ArmKey(&p.flyTimer, sim.Time((h.atPs+999)/1000), h.key)
}

// unflyTail takes b, which must be the newest packet in flight, out
// of the FIFO (a link failure drops packets not yet serialized; a rate
// change re-times them). It reports whether b was in the FIFO.
func (p *Port) unflyTail(b *packet.Buffer) bool {
	if p.fLen == 0 {
		return false
	}
	i := (p.fHead + p.fLen - 1) & (len(p.fly) - 1)
	if p.fly[i].b != b {
		return false
	}
	p.fly[i] = flight{}
	p.fLen--
	if p.fLen == 0 {
		p.s.Disarm(&p.flyTimer)
	}
	return true
}
