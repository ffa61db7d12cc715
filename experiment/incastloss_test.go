package experiment

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"testing"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// TestClaimIncast63SettlesAtLoss: issue 27's target for the 63-to-1
// incast at 1% random loss on every link (incast/lossy-1pct): every
// sender within ±10% of its fair share over windows of 20 packets per
// sender (47.75 RTTs) from at most 10 base RTTs on. It misses
// (knownMisses), and the test says by how much and why, from the run's
// own packets (seeds 1-3):
//
//   - Each data packet crosses four lossy links; 3.3% are lost. A
//     sender's fair share is 0.42 packets per RTT, so a window holds 20.1
//     of its packets and ±10% is ±2 packets; the bottleneck link's own
//     1% loss (wire time spent, nothing delivered) caps the mean at 0.99
//     of fair. A sender with two losses not yet made up at a window's end
//     is at 0.99 x 20.1 - 2 = 17.9 packets, under the 18.1 allowed.
//   - The floor, from the loss pattern alone: an ideal sender that
//     delivers 0.99 of its share except each lost packet, made up in full
//     1.5 RTTs after its first send (the least possible: the loss shows
//     when its ACK is missed, one RTT after the send, and the repair
//     crosses half an RTT), leaves 0/1/0 senders outside ±10% (worst
//     0.89); made up after 2 RTTs, 1/2/1. So the target holds only if
//     every loss is repaired within about 1.5 RTTs.
//   - Today a lost chunk reaches the receiver 5.3-5.5 RTTs after its
//     first send (median; the next packet goes 2.4 RTTs later and its
//     ACK shows the hole), its resend takes a slot of the sender's share
//     (each loss a deficit never made up), and the receiver's link control
//     cuts every sender after marks: 40/49/44 of 63 senders outside ±10%,
//     worst windows 0.80/0.75/0.75, 0.954-0.963 of the link delivered.
//     Pacing repairs beside the share (commit 49a7f3b, reverted) cut the
//     repair time to 4.3 RTTs and lifted the worst window to 0.80-0.85,
//     but overloaded the receiver's link by its own losses' repairs and
//     failed TestTargetIncast at 1% (0.990 -> 0.705).
func TestClaimIncast63SettlesAtLoss(t *testing.T) {
	ck := newClaim(t)
	p := incastParams{duration: sim.Millisecond, size: 64 << 10, qd: 16}
	c := incastCase{lab: "incast/lossy-1pct", leaves: 4, perLeaf: 16, n: 63, side: metaroceLossy, loss: 1}
	for _, seed := range claimSeeds {
		a, err := anatomize(p, c, seed)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("seed %d: %s", seed, a)
		if a.settle < 0 || a.settle > 10 {
			ck.Errorf("seed %d: every sender within 10%% of fair share over %.2f-RTT windows from %s on, want <= 10 RTTs (%s)",
				seed, a.windowRTTs, settleText(a.settle), a)
		}
	}
}

// lossAnatomy is what one incast run at loss shows of its senders.
type lossAnatomy struct {
	settle, windowRTTs float64 // the wide settle test, as the experiment's
	worst              float64 // the worst sender's worst judged window, of fair
	outside            int     // senders with a judged window outside ±10%
	repairMedian       float64 // RTTs from a lost chunk's first send to its arrival
	repairP90          float64
	delivered          float64 // the judged interval's deliveries, of the link
	// ideal* is the floor: an ideal sender's senders outside ±10% and
	// worst window, each loss made up idealRepair[j] after its first send.
	idealOutside [2]int
	idealWorst   [2]float64
	senders      int
}

func (a lossAnatomy) String() string {
	return fmt.Sprintf("%d of %d senders outside ±10%%, worst window %.3f of fair; delivered %.3f of the link; "+
		"a lost chunk arrives %.1f RTTs after its first send (median; 90th percentile %.1f); "+
		"floor: an ideal sender, every loss made up 1.5 (2) RTTs after its first send, leaves %d (%d) outside, worst %.3f (%.3f)",
		a.outside, a.senders, a.worst, a.delivered, a.repairMedian, a.repairP90,
		a.idealOutside[0], a.idealOutside[1], a.idealWorst[0], a.idealWorst[1])
}

// idealRepair are the ideal sender's repair times in RTTs: 1.5 is the
// least any sender can do (a loss shows one RTT after the send at the
// earliest, when its ACK is missed; the repair then crosses half an RTT
// to the receiver's link).
var idealRepair = [2]float64{1.5, 2}

// lossObserver records, besides the bottleneck's arrivals, every
// sender's data packets to the receiver: first sends (by DSN, on the
// sender's uplink), losses anywhere, and arrivals at the bottleneck.
type lossObserver struct {
	arr    *arrivals
	recv   netip.Addr
	idx    map[netip.Addr]int
	uplink map[int]int
	first  []map[uint32]sim.Time
	arrive []map[uint32]sim.Time
	lost   []map[uint32]bool
	// lostHere counts the packets lost on the bottleneck link itself.
	lostHere, total int
}

// dsnOf is a full-size MetaRoCE data packet's DSN (IPv4 and UDP headers,
// then the DSN at offset 28 of the MetaRoCE packet).
func dsnOf(b *packet.Buffer) (uint32, bool) {
	d := b.Data()
	if b.Len() < 1000 || len(d) < 28+32 {
		return 0, false
	}
	return binary.BigEndian.Uint32(d[28+28:]), true
}

func (o *lossObserver) Observe(now sim.Time, ev fabric.Event, pt fabric.Point, b *packet.Buffer, r fabric.DropReason) {
	o.arr.Observe(now, ev, pt, b, r)
	if b == nil || b.Len() < header.IPv4MinSize {
		return
	}
	ip := header.IPv4(b.Data())
	i, ok := o.idx[ip.Src()]
	if !ok || ip.Dst() != o.recv {
		return
	}
	dsn, ok := dsnOf(b)
	if !ok {
		return
	}
	switch ev {
	case fabric.EvTransmit:
		if s, ok := o.uplink[pt.Link]; ok && s == i {
			o.total++
			if _, seen := o.first[i][dsn]; !seen {
				o.first[i][dsn] = now
			}
		}
	case fabric.EvDrop:
		o.lost[i][dsn] = true
		if pt.Link == o.arr.point {
			o.lostHere++
		}
	case fabric.EvDeliver:
		if pt.Link == o.arr.point {
			o.arrive[i][dsn] = now
		}
	}
}

// newLossObserver watches senders' data to h0 on net, as its observer.
func newLossObserver(net *fabric.Network, from []string) (*lossObserver, *fabric.Port, error) {
	bott, err := net.LinkPort("h0-p0", fabric.BtoA)
	if err != nil {
		return nil, nil, err
	}
	byName := map[string]netip.Addr{}
	for a, n := range hostAddrs(net) {
		byName[n] = a
	}
	k := len(from)
	o := &lossObserver{recv: byName["h0"], idx: map[netip.Addr]int{}, uplink: map[int]int{},
		first: make([]map[uint32]sim.Time, k), arrive: make([]map[uint32]sim.Time, k), lost: make([]map[uint32]bool, k)}
	var senders []netip.Addr
	for i, h := range from {
		senders = append(senders, byName[h])
		o.idx[byName[h]] = i
		up, err := net.LinkPort(h+"-p0", fabric.AtoB)
		if err != nil {
			return nil, nil, err
		}
		o.uplink[up.Index()] = i
		o.first[i], o.arrive[i], o.lost[i] = map[uint32]sim.Time{}, map[uint32]sim.Time{}, map[uint32]bool{}
	}
	o.arr = newArrivals(bott, senders)
	net.SetObserver(o)
	return o, bott, nil
}

// anatomize runs one incast point and takes it apart.
func anatomize(p incastParams, c incastCase, seed uint64) (lossAnatomy, error) {
	pt := p.point(c, seed)
	var o *lossObserver
	var bott *fabric.Port
	run, err := pt.run(probe{observe: func(net *fabric.Network) error {
		var err error
		o, bott, err = newLossObserver(net, pt.Spec.From)
		return err
	}})
	if err != nil {
		return lossAnatomy{}, err
	}
	if run.err != nil {
		return lossAnatomy{}, fmt.Errorf("seed %d: %w", seed, run.err)
	}
	rate, rtt := bott.Rate(), labBaseRTT(run.lab)
	step := rtt / 4
	end := min(p.duration, run.end-run.t0)
	m := wideQuarters(step, rate, c.n)
	perRTT := rate / 8 * float64(rtt) / 1e9 / float64(c.n) // fair bytes per RTT
	fairW := float64(m) * perRTT / 4
	a := lossAnatomy{settle: -1, windowRTTs: float64(m) / 4, worst: 1, idealWorst: [2]float64{1, 1}, senders: c.n}
	if s := o.arr.settle(run.t0, end, sim.Time(m)*step, step, rate, fairW, 0.1); s >= 0 {
		a.settle = float64(s) / float64(rtt)
	}
	k := int(end/step) + 1
	grid := make([]float64, k)
	for i := range grid {
		grid[i] = float64(run.t0 + sim.Time(i)*step)
	}
	from := 10 * 4 // judged windows start 10 RTTs in
	u := 1 - float64(o.lostHere)/float64(max(o.total, 1))
	var delays []float64
	var got float64
	for i := range o.arr.at {
		got += float64(o.arr.bytesBetween(i, run.t0+10*rtt, run.t0+end))
		f := o.arr.fluid(i, grid, rate)
		var lostAt []float64
		for d := range o.lost[i] {
			lostAt = append(lostAt, float64(o.first[i][d]))
			if at, ok := o.arrive[i][d]; ok {
				delays = append(delays, float64(at-o.first[i][d])/float64(rtt))
			}
		}
		worst := 1.0
		for w := from; w+m < k; w++ {
			worst = farther(worst, (f[w+m]-f[w])/fairW)
		}
		if math.Abs(worst-1) > 0.1 {
			a.outside++
		}
		a.worst = farther(a.worst, worst)
		for j, d := range idealRepair {
			ideal := func(t float64) float64 {
				v := u * perRTT * (t - float64(run.t0)) / float64(rtt)
				for _, l := range lostAt {
					if l <= t && t < l+d*float64(rtt) {
						v -= incastPkt
					}
				}
				return v
			}
			w := 1.0
			for g := from; g+m < k; g++ {
				w = farther(w, (ideal(grid[g+m])-ideal(grid[g]))/fairW)
			}
			if math.Abs(w-1) > 0.1 {
				a.idealOutside[j]++
			}
			a.idealWorst[j] = farther(a.idealWorst[j], w)
		}
	}
	a.delivered = got * 8 / (rate * float64(end-10*rtt) / 1e9)
	if len(delays) > 0 {
		slices.Sort(delays)
		a.repairMedian, a.repairP90 = delays[len(delays)/2], delays[len(delays)*9/10]
	}
	return a, nil
}

// farther returns whichever of x and y is farther from 1.
func farther(x, y float64) float64 {
	if math.Abs(y-1) > math.Abs(x-1) {
		return y
	}
	return x
}
