package metaroce_test

// The targets of the regime work, each at a scale that runs in seconds:
// small fabrics built with fabric's builders, the workload runner, and
// the figure asserted with a margin. The full matrix (every link rate,
// path length and loss model, several seeds) is the regimes experiment.

import (
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
	"github.com/mrlab/mrlab/transport/rocev2"
	"github.com/mrlab/mrlab/workload"
)

// bed is a small fabric: every link at rate, 1us propagation, 512 KiB
// drop-tail queues, ECN step marking at 64 KiB (the lab defaults), the
// loss model on every link direction.
type bed struct {
	topo   string // b2b, leaf (one switch), leafspine, fattree (k=4)
	rate   float64
	planes int
	leaves int
	hpl    int // hosts per leaf (leaf, leafspine)
	spines int
	over   float64 // leafspine oversubscription (0: non-blocking)
	delay  sim.Time
	loss   fabric.LossModel
	gray   string // a link at 10% random loss both ways
	down   string // a link down from the start
}

const ecnK = 64 << 10

// hops is how many links a packet between the bed's farthest hosts
// crosses.
func (b bed) hops() int {
	switch b.topo {
	case "b2b":
		return 1
	case "leaf":
		return 2
	case "fattree":
		return 6
	}
	return 4
}

func (b bed) topology(t *testing.T) *fabric.Topology {
	t.Helper()
	lp := fabric.LinkParams{Rate: b.rate, Delay: b.delay, QueueBytes: 512 << 10,
		ECN: fabric.ECNConfig{Mode: fabric.ECNStep, K: ecnK}}
	if lp.Delay == 0 {
		lp.Delay = sim.Microsecond
	}
	lp.Impair.Loss = b.loss
	planes := max(b.planes, 1)
	var topo *fabric.Topology
	var err error
	switch b.topo {
	case "b2b":
		topo, err = fabric.BackToBack(fabric.BackToBackParams{Planes: planes, Link: lp})
	case "leaf":
		topo, err = fabric.LeafSpine(fabric.LeafSpineParams{Planes: planes, Leaves: 1, Spines: 1, HostsPerLeaf: b.hpl,
			HostLink: lp, FabricLink: lp, Oversubscription: 1})
	case "leafspine":
		topo, err = fabric.LeafSpine(fabric.LeafSpineParams{Planes: planes, Leaves: max(b.leaves, 2), Spines: max(b.spines, 1),
			HostsPerLeaf: b.hpl, HostLink: lp, FabricLink: lp, Oversubscription: max(b.over, 1)})
	case "fattree":
		topo, err = fabric.FatTree(fabric.FatTreeParams{K: 4, Planes: planes, HostLink: lp, FabricLink: lp})
	default:
		err = fmt.Errorf("no topology %q", b.topo)
	}
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// job is what runs on a bed.
type job struct {
	spec  workload.Spec
	paths int // MetaRoCE paths per connection (0: default)
	seed  uint64
	// from and to, if set, bound when goodput is counted (bytes placed at
	// the receivers from then until then, MetaRoCE only): the steady state,
	// not the start or the drain of the last messages.
	from, to sim.Time
	// oracle tells each MetaRoCE sender of a data packet lost on a wire
	// the moment it is lost (Conn.OracleLost): the bound of loss
	// detection.
	oracle bool
	// oracleRTT makes the oracle learn of each loss one base round trip
	// after the packet was sent (Conn.OracleLostAfterRTT): the bound of
	// loss detection that needs a later packet's ACK.
	oracleRTT bool
	// faults, if set, plants faults in every MetaRoCE end (a rule turned
	// off: its before figure in the same run).
	faults metaroce.Faults
}

// lossOracle is the fabric observer behind job.oracle.
type lossOracle struct {
	nics     map[netip.Addr]*softnic.NIC
	afterRTT bool
	loop     *sim.Loop
}

func (o lossOracle) Observe(now sim.Time, ev fabric.Event, _ fabric.Point, b *packet.Buffer, r fabric.DropReason) {
	d := b.Data()
	if ev != fabric.EvDrop || r != fabric.DropFCS || len(d) < 28 {
		return
	}
	nic := o.nics[netip.AddrFrom4([4]byte(d[12:16]))]
	if nic == nil {
		return
	}
	payload := d[int(d[0]&0xf)*4+8:]
	for _, c := range nic.Conns() {
		mc, ok := c.Transport().(*metaroce.Conn)
		switch {
		case !ok:
		case !o.afterRTT:
			mc.OracleLost(now, payload)
		default:
			if at, ok := mc.OracleLostAfterRTT(now, payload); ok && at > now {
				cp := append([]byte(nil), payload...)
				o.loop.At(at, func(t sim.Time) { mc.OracleLostAfterRTT(t, cp) })
			}
		}
	}
}

type outcome struct {
	res *workload.Result
	cl  *workload.Cluster
	// goodput is payload bits per second: the workload's (bytes completed
	// over the run) or, with job.from, bytes placed from then on.
	goodput float64
	// The busiest link direction's peak and time-averaged queue, and the
	// queue-full drops of the whole fabric.
	peakQ      int
	meanQ      float64
	queueDrops uint64
	// minRTT is the MetaRoCE senders' smallest base RTT; acksPerData the
	// MetaRoCE ACKs sent per data packet.
	minRTT      sim.Time
	acksPerData float64
	// linkBytes is what each link direction sent from job.from on.
	linkBytes map[string]uint64
	// survival is the fraction of the first write_bw connection's
	// frames that no wire lost (see wireSurvival); NaN without one.
	survival float64
}

func (b bed) run(t *testing.T, j job) outcome {
	t.Helper()
	topo := b.topology(t)
	loop := sim.NewLoop()
	pool := packet.NewPool()
	seed := max(j.seed, 1)
	net, err := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	if b.gray != "" {
		for _, d := range []fabric.Direction{fabric.AtoB, fabric.BtoA} {
			if err := net.SetImpairment(b.gray, d, fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossRandom, P: 0.1}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if b.down != "" {
		if err := net.SetLinkUp(0, b.down, false); err != nil {
			t.Fatal(err)
		}
	}
	// RoCEv2 as a careful operator sets it for the bed: its local ACK
	// timeout at least four base RTTs (a 4 KiB packet per hop, both ways).
	rtt := float64(2*b.hops())*1e3 + float64(b.hops())*4200*8/b.rate*1e9
	ropts := rocev2.Options{Timeout: 5}
	for 4096*float64(int(1)<<ropts.Timeout) < 4*rtt {
		ropts.Timeout++
	}
	mopts := metaroce.Options{Paths: j.paths, Faults: j.faults}
	cl, err := workload.NewCluster("bed", loop, pool, net, seed, workload.NICOptions{Protocols: func() []transport.Protocol {
		return []transport.Protocol{metaroce.NewProtocol(mopts), rocev2.NewProtocol(ropts)}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if j.oracle || j.oracleRTT {
		o := lossOracle{nics: map[netip.Addr]*softnic.NIC{}, afterRTT: j.oracleRTT, loop: loop}
		for _, nic := range cl.NICs {
			o.nics[nic.Addr()] = nic
		}
		net.SetObserver(o)
	}
	var placedFrom, placedTo uint64
	var linkFrom, linkTo fabric.Snapshot
	if j.from > 0 {
		loop.At(j.from, func(sim.Time) { placedFrom, linkFrom = placed(cl), net.Counters() })
		loop.At(j.to, func(sim.Time) { placedTo, linkTo = placed(cl), net.Counters() })
	}
	spec := j.spec
	spec.Seed = seed
	if spec.Timeout == 0 {
		spec.Timeout = 10 * sim.Second
	}
	res, err := workload.Run(cl, spec)
	if err != nil {
		t.Fatalf("%+v: %v", spec, err)
	}
	o := outcome{res: res, cl: cl, goodput: res.GoodputGbps * 1e9}
	if j.from > 0 {
		o.goodput = float64(placedTo-placedFrom) * 8 / (j.to - j.from).Seconds()
	}
	snap := net.Counters()
	o.linkBytes = map[string]uint64{}
	o.survival = math.NaN()
	if len(res.QPs) > 0 {
		from, to := res.QPs[0].Local.Host, res.QPs[0].Remote.Host
		var tx, rx, q uint64
		for _, lc := range snap.Links {
			if lc.From.Node == from {
				tx += lc.TxPackets
			}
			if lc.To.Node == to {
				rx += lc.RxPackets
			}
			q += lc.Drops[fabric.DropQueueFull]
		}
		o.survival = wireSurvival(tx, rx, q)
	}
	for i, lc := range snap.Links {
		o.peakQ = max(o.peakQ, lc.QueueMaxBytes)
		o.meanQ = max(o.meanQ, lc.QueueAvgBytes)
		o.queueDrops += lc.Drops[fabric.DropQueueFull]
		if j.from > 0 {
			o.linkBytes[lc.Link+"/"+lc.Dir.String()] = linkTo.Links[i].TxBytes - linkFrom.Links[i].TxBytes
		}
	}
	var acks, data uint64
	for _, nic := range cl.NICs {
		for _, c := range nic.Conns() {
			if mc, ok := c.Transport().(*metaroce.Conn); ok {
				st := mc.Stats()
				acks += st.AcksSent
				data += st.DataPacketsSent
				if st.MinRTT > 0 && (o.minRTT == 0 || st.MinRTT < o.minRTT) {
					o.minRTT = st.MinRTT
				}
			}
		}
	}
	if data > 0 {
		o.acksPerData = float64(acks) / float64(data)
	}
	return o
}

// placed sums the payload bytes every MetaRoCE connection of the cluster
// placed as a receiver.
func placed(cl *workload.Cluster) uint64 {
	var n uint64
	for _, nic := range cl.NICs {
		for _, c := range nic.Conns() {
			if mc, ok := c.Transport().(*metaroce.Conn); ok {
				n += mc.Stats().BytesPlaced
			}
		}
	}
	return n
}

// wireLimit is the fraction of a link's bytes that is payload for
// messages of size bytes cut into 4 KiB packets: the transport's headers
// and trailer plus IPv4 and UDP are what the fabric serializes besides.
func wireLimit(kind transport.Kind, size int) float64 {
	pkts := (size + 4095) / 4096
	per, once := wire.DataSize+wire.TrailerSize+28, 0
	if kind == transport.RoCEv2 {
		per, once = 12+4+28, 16 // BTH, ICRC, IPv4+UDP per packet; RETH per message
	}
	return float64(size) / float64(size+pkts*per+once)
}

// bulk is write_bw from the bed's first to its last host, 64 KiB WRITEs,
// 128 in flight (perftest's default depth), for n base RTTs.
func (b bed) bulk(kind transport.Kind, n int) workload.Spec {
	rtt := float64(2*b.hops())*1e3 + float64(b.hops())*4200*8/b.rate*1e9
	return workload.Spec{Name: workload.WriteBW, Transport: kind, Size: 64 << 10, QueueDepth: 128,
		Duration: sim.Time(float64(n) * rtt)}
}

// TestTargetLossFree: loss-free, MetaRoCE reaches 0.97 of the wire limit
// of the capacity it uses at 1 and 100 Gbit/s, over one hop and four, on
// one plane and two, at least what RoCEv2 reaches on the same capacity,
// with no timeout.
func TestTargetLossFree(t *testing.T) {
	for _, b := range []bed{
		{topo: "b2b", rate: 1e9}, {topo: "b2b", rate: 100e9},
		{topo: "leafspine", rate: 1e9, hpl: 2, spines: 2}, {topo: "leafspine", rate: 100e9, hpl: 2, spines: 2},
		{topo: "leafspine", rate: 1e9, hpl: 2, spines: 2, planes: 2}, {topo: "leafspine", rate: 100e9, hpl: 2, spines: 2, planes: 2},
	} {
		t.Run(fmt.Sprintf("%s-%gG-%dp", b.topo, b.rate/1e9, max(b.planes, 1)), func(t *testing.T) {
			mr := b.run(t, job{spec: b.bulk(transport.MetaRoCE, 200)})
			frac := mr.goodput / (float64(max(b.planes, 1)) * b.rate * wireLimit(transport.MetaRoCE, 64<<10))
			t.Logf("metaroce %.3f Gb/s = %.3f of the wire limit, %d timeouts, %.2f ACKs per data packet",
				mr.goodput/1e9, frac, mr.res.Timeouts, mr.acksPerData)
			if frac < 0.97 || mr.res.Timeouts != 0 {
				t.Errorf("metaroce: %.3f of the wire limit (want >= 0.97), %d timeouts (want 0)", frac, mr.res.Timeouts)
			}
			if mr.acksPerData > 0.5 {
				t.Errorf("%.2f ACKs per data packet in bulk transfer, want well under one (<= 0.5)", mr.acksPerData)
			}
			if b.planes > 1 {
				return // RoCEv2 runs one queue pair on one plane: no equal capacity here
			}
			rc := b.run(t, job{spec: b.bulk(transport.RoCEv2, 200)})
			rfrac := rc.goodput / (b.rate * wireLimit(transport.RoCEv2, 64<<10))
			t.Logf("rocev2 %.3f Gb/s = %.3f of its wire limit", rc.goodput/1e9, rfrac)
			if frac < rfrac-0.005 {
				t.Errorf("metaroce %.3f of its wire limit, below rocev2's %.3f on the same capacity", frac, rfrac)
			}
		})
	}
}

// lossModel returns random loss p, or Gilbert-Elliott loss averaging p in
// bursts of 4 packets on average.
func lossModel(p float64, bursty bool) fabric.LossModel {
	if !bursty {
		return fabric.LossModel{Kind: fabric.LossRandom, P: p}
	}
	const r = 0.25 // mean burst 1/r
	return fabric.LossModel{Kind: fabric.LossGemodel, GEp: p * r / (1 - p), GEr: r, GE1h: 1}
}

// TestTargetOnePercent: at 1% random and bursty loss on every link,
// goodput stays at 0.90 of the same bed's loss-free goodput.
func TestTargetOnePercent(t *testing.T) {
	for _, b := range []bed{{topo: "leafspine", rate: 10e9, hpl: 2, spines: 2}, {topo: "fattree", rate: 100e9}} {
		free := b.run(t, job{spec: b.bulk(transport.MetaRoCE, 200)})
		for _, bursty := range []bool{false, true} {
			lb := b
			lb.loss = lossModel(0.01, bursty)
			o := lb.run(t, job{spec: lb.bulk(transport.MetaRoCE, 200)})
			ratio := o.goodput / free.goodput
			t.Logf("%s %g Gb/s, 1%% loss (bursty %v): %.3f of loss-free (%d retransmissions, %d timeouts)",
				b.topo, b.rate/1e9, bursty, ratio, o.res.Retransmits, o.res.Timeouts)
			if ratio < 0.90 {
				t.Errorf("%s %g Gb/s, 1%% loss (bursty %v): %.3f of loss-free goodput, want >= 0.90", b.topo, b.rate/1e9, bursty, ratio)
			}
		}
	}
}

// TestTargetTenPercent: at 10% random and bursty loss on every link,
// goodput stays at 0.85 of the loss ceiling: the wire limit times the
// fraction of the sender's frames the run's wire delivered (its
// expectation is (1-p)^hops; a seed's draw differs, and against the
// nominal figure a lucky draw read above 1 in the experiments).
// Measured: leafspine 0.980 random, 0.946 bursty; fattree 0.979 random,
// 0.929 bursty (0.958, 0.903, 0.934, 0.907 with every arrival in two ACKs
// whatever the loss: TestAckLossNotResent). With a path made suspect (its chunks moved) after one
// unanswered probe, whatever the measured loss, the fattree bursty case
// was 0.815 (leafspine bursty 0.872): at 47% loss end to end a probe round
// trip fails three times in four, and half the chunks moved had arrived
// (their ACKs were lost), so they went twice (probe.go, the chance rule).
func TestTargetTenPercent(t *testing.T) {
	for _, b := range []bed{{topo: "leafspine", rate: 100e9, hpl: 2, spines: 2}, {topo: "fattree", rate: 10e9}} {
		for _, bursty := range []bool{false, true} {
			lb := b
			lb.loss = lossModel(0.1, bursty)
			o := lb.run(t, job{spec: lb.bulk(transport.MetaRoCE, 300)})
			ceiling := b.rate * wireLimit(transport.MetaRoCE, 64<<10) * o.survival
			t.Logf("%s %g Gb/s, 10%% loss (bursty %v): %.3f of the loss ceiling (%.3f of the nominal (1-p)^hops; %.1f%% of frames lost on the wire; %d retransmissions, %d timeouts)",
				b.topo, b.rate/1e9, bursty, o.goodput/ceiling, o.goodput/(ceiling/o.survival*math.Pow(0.9, float64(b.hops()))),
				100*(1-o.survival), o.res.Retransmits, o.res.Timeouts)
			if !(o.goodput <= 1.001*ceiling) {
				t.Errorf("%s %g Gb/s, 10%% loss (bursty %v): %.4f of the loss ceiling: above 1, or no ceiling", b.topo, b.rate/1e9, bursty, o.goodput/ceiling)
			}
			if o.goodput < 0.85*ceiling {
				t.Errorf("%s %g Gb/s, 10%% loss (bursty %v): %.3f of the loss ceiling, want >= 0.85", b.topo, b.rate/1e9, bursty, o.goodput/ceiling)
			}
		}
	}
}

// hosts names h<from>..h<to-1>.
func hosts(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("h%d", i))
	}
	return out
}

// TestTargetCongestion: a 2:1 oversubscribed leaf/spine (the four hosts of
// one leaf WRITE to the four of the other: the leaf's uplinks are the
// bottleneck) and an 8-to-1 incast (the receiver's link), each with 4, 16
// and 128 paths per connection: the busiest queue stays near the marking
// threshold (mean at most 2 K), nothing is dropped, and the bottleneck
// carries at least 0.95 of its capacity.
func TestTargetCongestion(t *testing.T) {
	wl := wireLimit(transport.MetaRoCE, 64<<10)
	for _, c := range []struct {
		name     string
		b        bed
		spec     workload.Spec
		capacity float64 // bottleneck, bit/s
	}{
		{"2:1 oversubscription", bed{topo: "leafspine", rate: 100e9, hpl: 4, spines: 2, over: 2},
			workload.Spec{Name: workload.WriteBW, From: hosts(0, 4), To: hosts(4, 8)}, 200e9},
		{"8-to-1 incast", bed{topo: "leafspine", rate: 100e9, hpl: 5, spines: 2},
			workload.Spec{Name: workload.Incast, From: hosts(1, 9), To: []string{"h0"}}, 100e9},
	} {
		for _, paths := range []int{4, 16, 128} {
			t.Run(fmt.Sprintf("%s/%d paths", c.name, paths), func(t *testing.T) {
				spec := c.spec
				spec.Transport, spec.Size, spec.QueueDepth, spec.Duration = transport.MetaRoCE, 64<<10, 16, 2*sim.Millisecond
				// Goodput counts from 100us until the last messages are
				// posted: the steady state the target is about.
				o := c.b.run(t, job{spec: spec, paths: paths, from: 100 * sim.Microsecond, to: spec.Duration})
				frac := o.goodput / (c.capacity * wl)
				t.Logf("%.1f Gb/s = %.3f of the bottleneck's wire limit; busiest queue mean %.0f B (%.2f K), peak %d B; %d drops, %d timeouts",
					o.goodput/1e9, frac, o.meanQ, o.meanQ/ecnK, o.peakQ, o.queueDrops, o.res.Timeouts)
				// 16 paths: 0.943 while the reordering window ignored
				// queueing that differs between paths (#27), 0.959 with
				// the measured lateness.
				if o.meanQ > 2*ecnK || o.queueDrops != 0 || frac < 0.95 || o.res.Timeouts != 0 {
					t.Errorf("mean queue %.2f K (want <= 2), %d drops (want 0), %.3f of capacity (want >= 0.95), %d timeouts (want 0)",
						o.meanQ/ecnK, o.queueDrops, frac, o.res.Timeouts)
				}
			})
		}
	}
}

// TestTargetGrayLink: one spine link loses 10% of the packets each way.
// From 20 base RTTs on, the goodput of four flows across it is at least
// 0.95 of the same run with that link down; a single flow's paths that
// crossed it have left it (from 20 base RTTs on it carries less than a
// tenth of its fair share of the flow's uplink traffic).
func TestTargetGrayLink(t *testing.T) {
	b := bed{topo: "leafspine", rate: 100e9, hpl: 4, spines: 4}
	const gray = "p0-leaf0-spine1"
	rtt := sim.Time(float64(2*b.hops())*1e3 + float64(b.hops())*4200*8/b.rate*1e9)
	from := 20 * rtt
	four := workload.Spec{Name: workload.WriteBW, Transport: transport.MetaRoCE, From: hosts(0, 4), To: hosts(4, 8),
		Size: 64 << 10, QueueDepth: 16, Duration: 2 * sim.Millisecond}
	gb, db := b, b
	gb.gray, db.down = gray, gray
	g := gb.run(t, job{spec: four, from: from, to: four.Duration})
	d := db.run(t, job{spec: four, from: from, to: four.Duration})
	t.Logf("four flows: gray %.1f Gb/s, link down %.1f Gb/s (%.3f)", g.goodput/1e9, d.goodput/1e9, g.goodput/d.goodput)
	if g.goodput < 0.95*d.goodput {
		t.Errorf("goodput with the gray link %.3f of the run with it down, want >= 0.95", g.goodput/d.goodput)
	}
	one := four
	one.From, one.To = []string{"h0"}, []string{"h7"}
	o := gb.run(t, job{spec: one, from: from, to: one.Duration})
	var uplinks uint64
	for name, n := range o.linkBytes {
		if strings.HasPrefix(name, "p0-leaf0-spine") && strings.HasSuffix(name, "/AtoB") {
			uplinks += n
		}
	}
	share := float64(o.linkBytes[gray+"/AtoB"]) / float64(uplinks) * float64(b.spines)
	t.Logf("one flow: %.1f Gb/s; from %v on the gray link carried %.3f of its fair share of the uplink bytes", o.goodput/1e9, from, share)
	if share > 0.1 {
		t.Errorf("the gray link carried %.3f of its fair share of the flow's uplink bytes from 20 RTTs on, want < 0.1", share)
	}
}

// TestTargetUniformLossStays: under 10% random loss on every link no path
// is worse than the others, and paths rarely move: fewer than one entropy
// change per path per thousand base RTTs.
func TestTargetUniformLossStays(t *testing.T) {
	b := bed{topo: "leafspine", rate: 100e9, hpl: 2, spines: 4, loss: lossModel(0.1, false)}
	const rtts = 1000
	o := b.run(t, job{spec: b.bulk(transport.MetaRoCE, rtts)})
	changes := 0
	for _, nic := range o.cl.NICs {
		for _, c := range nic.Conns() {
			if mc, ok := c.Transport().(*metaroce.Conn); ok && mc.Stats().DataPacketsSent > 0 {
				changes += int(mc.Stats().EntropyChanges)
			}
		}
	}
	perPath := float64(changes) / 16
	t.Logf("%d entropy changes over %d base RTTs (%.2f per path), %d timeouts", changes, rtts, perPath, o.res.Timeouts)
	if perPath >= 1 {
		t.Errorf("%.2f entropy changes per path in %d base RTTs of uniform loss, want < 1", perPath, rtts)
	}
}

// TestTargetIncast: 63 senders WRITE to one receiver on one switch. Every
// sender is within 10% of its fair share, judged over windows of one base
// RTT sampled four times per RTT, from 2 base RTTs after the first data
// arrives (loss-free) and from 10 base RTTs at 1% loss on every link. The
// links are long (320us) so that one base RTT holds some 60 packets of
// each sender's share and the test is decidable at packet granularity:
// with 1us links a sender's share is under half a packet per RTT. Loss-free
// the bytes placed at the receiver are judged; at 1% loss the bytes each
// sender puts on the wire (its rate, retransmissions included), since which
// packets the fabric drops is not the controller's to choose: at 2% loss
// per path, 6 of 60 packets lost in one window happens to a few of 63
// senders over 16 RTTs.
func TestTargetIncast(t *testing.T) {
	for _, c := range []struct {
		loss   float64
		settle int // base RTTs
	}{{0, 2}, {0.01, 10}} {
		t.Run(fmt.Sprintf("loss %g%%", 100*c.loss), func(t *testing.T) {
			b := bed{topo: "leaf", rate: 100e9, hpl: 64, delay: 320 * sim.Microsecond, loss: lossModel(c.loss, false)}
			rtt := sim.Time(4*b.delay) + sim.Time(2*4200*8/b.rate*1e9)
			sent := c.loss > 0
			worst, at, fair := incastFairness(t, b, 63, rtt, 16*rtt, sim.Time(c.settle)*rtt, sent)
			what := "placed"
			if sent {
				what = "sent"
			}
			t.Logf("base RTT %v, fair share %.0f B per RTT: worst sender %.3f of it (bytes %s) from %d RTTs on (at %.1f RTTs)",
				rtt, fair, worst, what, c.settle, float64(at)/float64(rtt))
			if math.Abs(worst-1) > 0.1 {
				t.Errorf("a sender at %.3f of its fair share %.1f base RTTs after the start, want within 10%%", worst, float64(at)/float64(rtt))
			}
		})
	}
}

// incastFairness runs n senders into h0 for dur after the first data
// arrives, samples every sender's bytes placed at h0 (sent: the bytes it
// sent) every rtt/4, and
// returns the worst ratio of a sender's bytes over one rtt to the fair
// share over windows ending from settle on, when it happened (after the
// first data), and the fair share in bytes per rtt (the aggregate over the
// judged windows / n).
func incastFairness(t *testing.T, b bed, n int, rtt, dur, settle sim.Time, sent bool) (worst float64, at sim.Time, fair float64) {
	t.Helper()
	topo := b.topology(t)
	loop := sim.NewLoop()
	pool := packet.NewPool()
	net, err := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := workload.NewCluster("incast", loop, pool, net, 1, workload.NICOptions{Protocols: func() []transport.Protocol {
		return []transport.Protocol{metaroce.NewProtocol(metaroce.Options{})}
	}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		t0      sim.Time = -1
		samples [][]uint64
	)
	step := rtt / 4
	var sample func(now sim.Time)
	sample = func(now sim.Time) {
		conns := cl.NICs[0].Conns()
		row := make([]uint64, len(conns))
		var sum uint64
		for i, c := range conns {
			row[i] = c.Transport().(*metaroce.Conn).Stats().BytesPlaced
			sum += row[i]
		}
		if sent && (t0 >= 0 || sum > 0) {
			for i := range row {
				row[i] = cl.NICs[i+1].Conns()[0].Transport().(*metaroce.Conn).Stats().BytesSent
			}
		}
		if t0 < 0 && sum > 0 {
			t0 = now
		}
		if t0 >= 0 {
			samples = append(samples, row)
		}
		if t0 < 0 || now-t0 < dur {
			loop.At(now+step, sample)
		}
	}
	loop.At(step, sample)
	spec := workload.Spec{Name: workload.Incast, Transport: transport.MetaRoCE, From: hosts(1, n+1), To: []string{"h0"},
		Size: 1 << 20, QueueDepth: 8, Duration: 2 * dur}
	if _, err := workload.Run(cl, spec); err != nil {
		t.Fatal(err)
	}
	if len(samples) < 8 || len(samples[0]) != n {
		t.Fatalf("%d samples of %d senders", len(samples), len(samples[0]))
	}
	first := int(settle / step) // the first window ends here
	w := int(rtt / step)
	last := len(samples) - 1
	var total uint64
	for i := range samples[last] {
		total += samples[last][i] - samples[first-w][i]
	}
	fair = float64(total) / float64(n) / float64(last-first+w) * float64(w)
	worst = 1
	if testing.Verbose() {
		for k := w; k <= last; k += w {
			lo, hi := math.Inf(1), 0.0
			for i := range samples[k] {
				r := float64(samples[k][i]-samples[k-w][i]) / fair
				lo, hi = min(lo, r), max(hi, r)
			}
			t.Logf("RTT %d: senders between %.2f and %.2f of the fair share", k/w, lo, hi)
		}
	}
	for k := first; k <= last; k++ {
		for i := range samples[k] {
			r := float64(samples[k][i]-samples[k-w][i]) / fair
			if math.Abs(r-1) > math.Abs(worst-1) {
				worst, at = r, sim.Time(k)*step
			}
		}
	}
	return worst, at, fair
}

// wireSurvival is the fraction of the frames a sender's links serialized
// (tx) that no wire lost: each either reached the receiver (rx), was
// dropped from a full queue (queueDrops: the transport's doing), or
// failed its FCS on a link (as experiment's wireSurvival). NaN when
// nothing was sent.
func wireSurvival(tx, rx, queueDrops uint64) float64 {
	if tx == 0 {
		return math.NaN()
	}
	return float64(min(rx+queueDrops, tx)) / float64(tx)
}

// TestTargetShortTransfers: 300 WRITEs of 64 KiB from h0 to h7 of a
// loss-free 2-plane leaf-spine, goodput over the run (from the first
// post, once the handshake is done, to the last completion: the last
// ACK included) against the 2-plane capacity. The first flight
// (a SYN_ACK's first_share x the first ACK's RTT, spec §9) is what lets the
// connection use its first round trip; with one packet first the shipped
// leafspine lab (0.1% fabric loss) read 0.954/0.902/0.815 at
// 100/400/800G, with it 0.963/0.936/0.873; this bed reads
// 0.965/0.938/0.904. The target is 0.95 at every rate; the floors are
// this bed's figures less ~1.5% (0.95 is met at 100G; 400G and 800G miss
// it, #27), so a regression fails here. The figures are 0.999-1.000 of
// the most a connection can reach that sends its data after a one-RTT
// handshake (the 300 messages' wire time over that plus one base RTT,
// 8.1-9.0 us here, 1 us links). 0.95 is out of reach at 800G for any
// transport: the run's clock starts at the first post (after the
// handshake) and stops when the last message's ACK is back, so it is at
// least the data's wire time plus one round trip (8 us of propagation on
// 4 hops of 1 us): 98.3 us of payload at 1.6 Tbit/s over 106.4 us is
// 0.925 with no header at all (logged), 0.914 with RoCEv2's 44 bytes per
// packet. At 400G the no-header bound is 0.961 and 0.95 needs at most
// ~43 bytes of headers per 4 KiB packet (MetaRoCE's are 96). Data sent
// before the SYN_ACK would not move this figure: the handshake is not
// in the run's time.
func TestTargetShortTransfers(t *testing.T) {
	for _, c := range []struct {
		rate, floor float64
	}{{100e9, 0.95}, {400e9, 0.925}, {800e9, 0.89}} {
		b := bed{topo: "leafspine", rate: c.rate, planes: 2, leaves: 2, spines: 2, hpl: 4}
		spec := workload.Spec{Name: workload.WriteBW, Transport: transport.MetaRoCE, From: []string{"h0"}, To: []string{"h7"},
			Size: 64 << 10, Iterations: 300}
		o := b.run(t, job{spec: spec})
		frac := o.goodput / (2 * c.rate)
		// The most a connection that opens with a one-RTT handshake
		// can reach: the data's wire time (payload over the wire limit)
		// over that plus one base RTT (the data packets' RTT, a little
		// more than the handshake's).
		wl := wireLimit(transport.MetaRoCE, 64<<10)
		wireTime := 300 * 64 << 10 * 8 / (2 * c.rate * wl)
		bound := wl * wireTime / (wireTime + o.minRTT.Seconds())
		// No transport does better than its payload's wire time with no
		// header at all over that plus one round trip: the run starts at
		// the first post and ends when the last message's ACK is back.
		payTime := 300 * 64 << 10 * 8 / (2 * c.rate)
		anyBound := payTime / (payTime + o.minRTT.Seconds())
		t.Logf("%.0fG: %.2f Gb/s, %.3f of 2 planes (target 0.95); a one-RTT handshake (base RTT %v) allows %.3f: %.3f of it; no transport, headers or none, exceeds %.3f",
			c.rate/1e9, o.goodput/1e9, frac, o.minRTT, bound, frac/bound, anyBound)
		if frac < c.floor {
			t.Errorf("%.0fG: %.3f of capacity, want >= %.2f", c.rate/1e9, frac, c.floor)
		}
		if frac < 0.98*bound {
			t.Errorf("%.0fG: %.3f of what a one-RTT handshake allows, want >= 0.98 (0.93 with one packet before the first ACK)", c.rate/1e9, frac/bound)
		}
	}
}
