package experiment

import (
	"fmt"
	"math"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
	"github.com/mrlab/mrlab/workload"
)

func init() {
	register(Experiment{
		Name: "regimes",
		Title: "one transport in every regime: link rate x path length x loss, write_bw and a permutation, " +
			"MetaRoCE against RoCEv2 with the same capacity",
		Claim: "(issue 11) the same MetaRoCE rules hold at 1 and 400 Gbit/s, over 1 and 6 hops, loss-free and at 1% and 10% random or bursty loss",
		Target: "MetaRoCE write_bw in every cell, median and every seed: loss-free >= 97% of the wire limit, >= RoCEv2's fraction, 0 timeouts; " +
			"1% loss (random, bursty) >= 90% of loss-free; 10% loss (random, bursty) >= 85% of the loss ceiling",
		Varies: []Knob{rateKnob("it sets the rate of every link per cell"), lossKnob("it sets the loss on every link per cell"),
			{Name: "RoCEv2's local ACK timeout", Why: "it sets it per link rate, as an operator would", Keys: []string{"transports.rocev2.ack_timeout"}}},
		run: runRegimes,
	})
}

// regimeBed is one path length: a built-in lab and the write_bw pair
// farthest apart on it.
type regimeBed struct {
	name     string // "b2b", "leaf", "leafspine", "fattree"
	hops     int
	from, to string
}

var regimeBeds = []regimeBed{
	{"b2b", 1, "h0", "h1"},
	{"leaf", 2, "h0", "h3"},
	{"leafspine", 4, "h0", "h7"},
	{"fattree", 6, "h0", "h15"},
}

// regimeLoss is one loss model on every link direction.
type regimeLoss struct {
	name  string  // as the table shows it
	p     float64 // average loss probability
	netem string  // "" for none
}

// Bursty loss is Gilbert-Elliott with every packet lost in the bad state,
// none in the good, and a mean burst of 4 (r = 1/4); p = P(good -> bad) =
// avg x r / (1 - avg) makes the average loss avg.
var regimeLosses = []regimeLoss{
	{"0", 0, ""},
	{"1% random", 0.01, "loss random 1%"},
	{"10% random", 0.1, "loss random 10%"},
	{"1% bursty", 0.01, "loss gemodel 0.2525% 25% 100% 0%"},
	{"10% bursty", 0.1, "loss gemodel 2.7778% 25% 100% 0%"},
}

// RegimeRow is one (bed, rate, loss, workload, transport, seed) run.
type RegimeRow struct {
	Bed       string  `json:"bed"`
	Hops      int     `json:"hops"`
	RateGbps  float64 `json:"link_rate_gbps"`
	Loss      string  `json:"loss"`
	LossP     float64 `json:"loss_p"`
	Workload  string  `json:"workload"`
	Transport string  `json:"transport"`
	Seed      uint64  `json:"seed"`
	Command   string  `json:"command"`
	// GoodputGbps is application bytes over the run, as mrlab sim reports.
	GoodputGbps float64 `json:"goodput_gbps"`
	// CapacityGbps is the capacity the workload's senders have (their
	// NIC ports, every plane); WireLimit the fraction of it payload can
	// fill: payload / (payload + every header byte on the wire).
	CapacityGbps float64 `json:"capacity_gbps"`
	WireLimit    float64 `json:"wire_limit"`
	// OfWire is goodput / (capacity x wire limit); OfLossFree goodput over
	// the same case's loss-free goodput (same seed); OfCeiling OfWire over
	// the loss ceiling, the fraction of the sender's frames this run's
	// wire delivered (WireSurvival; write_bw only: a permutation's
	// senders share links). The ceiling is measured, not (1-p)^hops: a
	// seed's draw loses more or fewer frames than p, and against the
	// nominal p a lucky draw read as more than the wire can carry (100.3%
	// on the page, b2b 1 Gbit/s 10% random seed 1: 9.35% of its data
	// frames lost).
	OfWire     float64 `json:"of_wire_limit"`
	OfLossFree Float   `json:"of_loss_free"`
	OfCeiling  Float   `json:"of_loss_ceiling"`
	// WireSurvival is wireSurvival of the write_bw sender's frames (NaN
	// for a permutation).
	WireSurvival Float `json:"wire_survival"`
	// Retransmits and Timeouts are the transports' counters; PeakQueue and
	// MeanQueue the largest queue and largest time-average queue over
	// every link direction.
	Retransmits uint64  `json:"retransmits"`
	Timeouts    uint64  `json:"timeouts"`
	PeakQueue   int     `json:"peak_queue_bytes"`
	MeanQueue   float64 `json:"mean_queue_bytes"`
	QueueDrops  uint64  `json:"queue_drops"`
	Errors      int     `json:"app_errors"`
	Error       string  `json:"error,omitempty"`
	DataOK      bool    `json:"data_ok"`
	// Sanity says why the run failed goodput sanity (pointRun.sanityFailure).
	Sanity string `json:"sanity,omitempty"`
}

type regimeCase struct {
	bed  regimeBed
	rate float64 // bit/s
	loss regimeLoss
	wl   workload.Name
	kind transport.Kind
}

type regimeParams struct {
	beds   []regimeBed
	rates  []float64
	losses []regimeLoss
	wls    []workload.Name
	// A run lasts the longer of pkts full packets at the link rate and
	// rtts base round trips, so that start-up weighs alike at every rate.
	pkts, rtts int
}

func regimeParamsFor(s Scale) regimeParams {
	p := regimeParams{beds: regimeBeds, rates: []float64{1e9, 10e9, 100e9, 400e9}, losses: regimeLosses,
		wls: []workload.Name{workload.WriteBW, workload.Permutation}, pkts: 3000, rtts: 200}
	switch s {
	case Quick:
		p.pkts, p.rtts = 1000, 100
	case Tiny:
		p.beds = []regimeBed{regimeBeds[0], regimeBeds[2]}
		p.rates = []float64{10e9, 100e9}
		p.losses = regimeLosses[:3]
		p.wls = p.wls[:1]
		p.pkts, p.rtts = 400, 50
	}
	return p
}

// regimeMTU is the path MTU the built-in labs' NICs use.
const regimeMTU = 4096

// duration is how long a case runs: the longer of pkts packet times and
// rtts base round trips (propagation, 1 us per link, and one full
// packet's serialization per hop).
func (p regimeParams) duration(c regimeCase) sim.Time {
	pkt := serialize(regimeMTU+wire.MaxOverhead+28, c.rate)
	rtt := float64(c.bed.hops) * (2000 + pkt)
	return sim.Time(math.Ceil(max(float64(p.pkts)*pkt, float64(p.rtts)*rtt)))
}

// rocev2AckTimeout is the local ACK timeout a careful operator gives
// RoCEv2 at a link rate: the lab's 131 us at 100 Gbit/s and above, longer
// in proportion to a packet's serialization below (a queue of messages
// drains that much slower).
func rocev2AckTimeout(rate float64) sim.Time {
	return max(131*sim.Microsecond, sim.Time(131e3*100e9/rate))
}

// queueDepth is how many 64 KiB messages a host pair keeps posted: enough
// to cover 32 base round trips of its capacity (both planes), and at
// least perftest's 128, in powers of two up to 1024 (connDepth splits
// them among the pair's connections). Completions come in
// post order, so the oldest message's retries hold back every later one:
// at 10% loss on each of 6 links (47% end to end) one packet in ten
// thousand needs a dozen attempts, a dozen round trips, and a window of
// fewer round trips would measure the queue depth, not the transport.
func (p regimeParams) queueDepth(c regimeCase) int {
	pkt := serialize(regimeMTU+wire.MaxOverhead+28, c.rate)
	rtt := float64(c.bed.hops) * (2000 + pkt) / 1e9
	want := 32 * 2 * c.rate / 8 * rtt / (64 << 10)
	qd := 128
	for float64(qd) < want && qd < 1024 {
		qd *= 2
	}
	return qd
}

// regimeQPs is how many connections RoCEv2 opens per host pair on every
// regimes bed: one queue pair per plane (qps_per_peer: per-plane), two
// planes (TestRegimeBedsPerPlaneQPs).
const regimeQPs = 2

// connDepth is the queue depth of each of a host pair's connections: the
// pair's queueDepth split among them, so that both transports keep the
// same messages in flight per pair. A duration-bounded run ends when the
// messages posted before its end complete, so the depth sets how long
// the run drains and over how much data its fixed costs (the first
// packet's one-way trip, the last ACK's return) spread: RoCEv2 with the
// pair's depth on each of its two queue pairs ran 1143 us where
// MetaRoCE's one connection ran 809 (100 Gbit/s leafspine), and that
// alone made MetaRoCE's fraction of its wire limit 0.997 of RoCEv2's.
func (p regimeParams) connDepth(c regimeCase) int {
	if c.kind == transport.RoCEv2 {
		return p.queueDepth(c) / regimeQPs
	}
	return p.queueDepth(c)
}

func (p regimeParams) point(c regimeCase, seed uint64) Point {
	d := p.duration(c)
	spec := workload.Spec{Name: c.wl, Transport: c.kind, Size: 64 << 10, QueueDepth: p.connDepth(c), Duration: d,
		Timeout: max(sim.Second, 20*d)}
	if c.wl == workload.WriteBW {
		spec.From, spec.To = []string{c.bed.from}, []string{c.bed.to}
	}
	pt := Point{Lab: "regimes/" + c.bed.name, Seed: seed, Spec: spec,
		WhatIf: WhatIf{Set: []string{"links.default.rate=" + fabric.FormatRate(c.rate)}}}
	if c.kind == transport.RoCEv2 {
		pt.Set = append(pt.Set, "transports.rocev2.ack_timeout="+timeArg(rocev2AckTimeout(c.rate)))
	}
	if c.loss.netem != "" {
		pt.Impair = []string{"all=" + c.loss.netem}
	}
	return pt
}

func runRegimes(cfg Config) (*Report, error) {
	p := regimeParamsFor(cfg.Scale)
	var cases []regimeCase
	for _, b := range p.beds {
		for _, rate := range p.rates {
			for _, l := range p.losses {
				for _, wl := range p.wls {
					for _, k := range []transport.Kind{transport.MetaRoCE, transport.RoCEv2} {
						cases = append(cases, regimeCase{b, rate, l, wl, k})
					}
				}
			}
		}
	}
	rows, err := runCases(cfg, "regimes", cases, p.point, regimeRun)
	if err != nil {
		return nil, err
	}
	lossFree := map[string]float64{}
	key := func(r RegimeRow) string {
		return fmt.Sprint(r.Bed, r.RateGbps, r.Workload, r.Transport, r.Seed)
	}
	for _, r := range rows {
		if r.LossP == 0 {
			lossFree[key(r)] = r.GoodputGbps
		}
	}
	for i := range rows {
		r := &rows[i]
		r.OfLossFree = Float(math.NaN())
		if b := lossFree[key(*r)]; b > 0 {
			r.OfLossFree = Float(r.GoodputGbps / b)
		}
	}
	r := &Report{Rows: rows}
	r.Setup = []string{
		"beds: built-in labs regimes/b2b (2 hosts back to back, 1 hop), regimes/leaf (4 hosts on one leaf, 2 hops), regimes/leafspine (8 hosts, 2 leaves x 2 spines, 4 hops between leaves), regimes/fattree (k=4 fat-tree, 16 hosts, 6 hops between pods); two planes each, 1 us per link, 512 KiB queues, ECN step marking above 64 KiB",
		"link rate (every link) and loss (every link direction, data and ACKs alike) are set on the command line: --set links.default.rate=R, --impair 'all=LOSS'; bursty loss is Gilbert-Elliott with mean burst 4 (every packet lost in the bad state)",
		"capacity: the same for both transports: MetaRoCE spreads one connection over both planes, RoCEv2 opens one queue pair per plane (qps_per_peer: per-plane), DCQCN on; RoCEv2's local ACK timeout is 131 us at 100 Gbit/s and above and grows in proportion below (1.31 ms at 10, 13.1 ms at 1 Gbit/s), as an operator would set it for the rate",
		fmt.Sprintf("workloads: write_bw between the two hosts farthest apart (h0 to the last host) and a permutation (every host WRITEs to one other), 64 KiB messages, enough in flight per host pair to cover 32 base round trips of its capacity (at least perftest's 128, at most 1024: 256 at 100 Gbit/s over 6 hops, 256/512/1024 at 400 Gbit/s over 2/4/6 hops; RoCEv2's two per-plane queue pairs keep half each, so both transports have the same messages in flight and their runs drain alike), since completions come in post order and a window shorter than the oldest message's retries under 47%% end-to-end loss measures the queue depth; each run lasts the longer of %d full packets and %d base round trips at its rate", p.pkts, p.rtts),
		"wire limit: payload / (payload + every header byte on the wire): MetaRoCE 96 B per packet (64 B header, 4 B CRC, 28 B IPv4/UDP); RoCEv2 44 B per packet (BTH, ICRC, IPv4/UDP) and a 16 B RETH per message; loss ceiling (write_bw): the wire limit times the fraction of the sender's frames that no link lost on the wire, counted per run (its expectation is (1-p)^hops; a seed's draw differs)",
		"queues: the largest peak and the largest time-average over every link direction (K = 64 KiB)",
	}
	if cfg.Scale != Full {
		r.Setup = append(r.Setup, fmt.Sprintf("scaled down (%s scale): shorter runs%s", cfg.Scale, map[bool]string{true: ", two beds, two rates, three losses, write_bw only"}[cfg.Scale == Tiny]))
	}
	g := groupBy(rows, func(r RegimeRow) string {
		return fmt.Sprint(r.Bed, r.RateGbps, r.Loss, r.Workload, r.Transport)
	})
	kib := func(f float64) string { return fmt.Sprintf("%.0f", f/1024) }
	r.table = Table{Columns: []string{"bed", "rate", "loss", "workload", "transport", "goodput Gb/s", "of wire limit", "of loss-free",
		"of loss ceiling", "retx", "timeouts", "peak queue KiB", "mean queue KiB", "app errors"}}
	for _, k := range g.keys {
		rs := g.rows[k]
		x := rs[0]
		r.table.add(x.Bed, fabric.FormatRate(x.RateGbps*1e9), x.Loss, x.Workload, x.Transport,
			statRows(rs, func(r RegimeRow) float64 { return r.GoodputGbps }).cell(f2),
			statRows(rs, func(r RegimeRow) float64 { return r.OfWire }).cell(f3),
			statRows(rs, func(r RegimeRow) float64 { return float64(r.OfLossFree) }).cell(f3),
			statRows(rs, func(r RegimeRow) float64 { return float64(r.OfCeiling) }).cell(f3),
			statRows(rs, func(r RegimeRow) float64 { return float64(r.Retransmits) }).cell(n0),
			statRows(rs, func(r RegimeRow) float64 { return float64(r.Timeouts) }).cell(n0),
			statRows(rs, func(r RegimeRow) float64 { return float64(r.PeakQueue) }).cell(kib),
			statRows(rs, func(r RegimeRow) float64 { return r.MeanQueue }).cell(kib),
			errorsCell(rs, func(r RegimeRow) (int, string) { return r.Errors, r.Error }))
	}
	regimeChecks(r, rows)
	return r, nil
}

// regimeChecks checks MetaRoCE's write_bw targets over every cell at
// once: a target is met when every cell's median and every seed meet it;
// a miss names the worst cell.
func regimeChecks(r *Report, rows []RegimeRow) {
	meta := func(keep func(RegimeRow) bool) []RegimeRow {
		var out []RegimeRow
		for _, x := range rows {
			if x.Transport == transport.MetaRoCE.String() && x.Workload == string(workload.WriteBW) && keep(x) {
				out = append(out, x)
			}
		}
		return out
	}
	check := func(what, target string, rs []RegimeRow, f func(RegimeRow) float64, g goal, format func(float64) string) {
		if len(rs) == 0 {
			return
		}
		st := statRows(rs, f)
		c := statCheck(what, target, st, g, format)
		if !c.Met {
			format = sharpen(format, g.median)
		}
		c.Measured = fmt.Sprintf("%s over %d runs (every cell, every seed)", st.cell(format), st.N)
		var short string
		if g.atLeast && st.Median < g.median {
			short = fmt.Sprintf("median short by %s; ", sharpen(format, 0)(g.median-st.Median))
		}
		worst := rs[0]
		for _, x := range rs {
			if (g.atLeast && f(x) < f(worst)) || (!g.atLeast && f(x) > f(worst)) {
				worst = x
			}
		}
		c.Note = fmt.Sprintf("%sworst cell %s %s %s, seed %d: %s (%s)", short, worst.Bed, fabric.FormatRate(worst.RateGbps*1e9), worst.Loss, worst.Seed, format(f(worst)), worst.Command)
		r.Checks = append(r.Checks, c)
	}
	lossFree := meta(func(x RegimeRow) bool { return x.LossP == 0 })
	check("MetaRoCE loss-free write_bw, every cell: goodput", ">= 97% of the wire limit, every seed",
		lossFree, func(x RegimeRow) float64 { return x.OfWire }, goal{median: 0.97, floor: 0.97, atLeast: true}, pct)
	check("MetaRoCE loss-free write_bw, every cell: timeouts", "0 in every seed",
		lossFree, func(x RegimeRow) float64 { return float64(x.Timeouts) }, goal{}, n0)
	rocev2 := map[string]float64{}
	for _, x := range rows {
		if x.Transport == transport.RoCEv2.String() && x.LossP == 0 {
			rocev2[fmt.Sprint(x.Bed, x.RateGbps, x.Workload, x.Seed)] = x.OfWire
		}
	}
	check("MetaRoCE loss-free write_bw, every cell: fraction of the wire limit over RoCEv2's", ">= 1 (median), every seed >= 0.99",
		lossFree, func(x RegimeRow) float64 {
			if b := rocev2[fmt.Sprint(x.Bed, x.RateGbps, x.Workload, x.Seed)]; b > 0 {
				return x.OfWire / b
			}
			return math.NaN()
		}, goal{median: 1, floor: 0.99, atLeast: true}, f3)
	check("MetaRoCE write_bw at 1% loss (random and bursty), every cell", ">= 90% of loss-free, every seed",
		meta(func(x RegimeRow) bool { return x.LossP == 0.01 }), func(x RegimeRow) float64 { return float64(x.OfLossFree) },
		goal{median: 0.9, floor: 0.9, atLeast: true}, pct)
	check("MetaRoCE write_bw at 10% loss (random and bursty), every cell", ">= 85% of the loss ceiling, every seed",
		meta(func(x RegimeRow) bool { return x.LossP == 0.1 }), func(x RegimeRow) float64 { return float64(x.OfCeiling) },
		goal{median: 0.85, floor: 0.85, atLeast: true}, pct)
	for _, x := range rows {
		if x.Error != "" {
			r.Notes = append(r.Notes, fmt.Sprintf("%s %s %s %s %s, seed %d: %s", x.Bed, fabric.FormatRate(x.RateGbps*1e9), x.Loss, x.Workload, x.Transport, x.Seed, x.Error))
		}
	}
}

// wireLimit is the fraction of the wire a transport's WRITEs of size
// bytes can fill with payload at path MTU mtu.
func wireLimit(kind transport.Kind, size, mtu int) float64 {
	pkts := (size + mtu - 1) / mtu
	var hdr int
	switch kind {
	case transport.MetaRoCE:
		hdr = pkts * (wire.MaxOverhead + 28)
	default:
		hdr = pkts*(ib.BTHSize+ib.ICRCSize+28) + ib.RETHSize
	}
	return float64(size) / float64(size+hdr)
}

func regimeRun(c regimeCase, pt Point) (RegimeRow, error) {
	row := RegimeRow{Bed: c.bed.name, Hops: c.bed.hops, RateGbps: c.rate / 1e9, Loss: c.loss.name, LossP: c.loss.p,
		Workload: string(c.wl), Transport: c.kind.String(), Seed: pt.Seed, Command: pt.Command()}
	run, err := pt.run(probe{})
	if err != nil {
		// A workload that failed without a result (a RoCEv2 QP out of
		// retries under heavy loss) is a row with no goodput, not a
		// failed experiment.
		row.Error, row.Errors = err.Error(), 1
		row.OfLossFree, row.OfCeiling = Float(math.NaN()), Float(math.NaN())
		return row, nil
	}
	res := run.res
	snap := run.net.Counters()
	row = RegimeRow{Bed: row.Bed, Hops: row.Hops, RateGbps: row.RateGbps, Loss: row.Loss, LossP: row.LossP,
		Workload: row.Workload, Transport: row.Transport, Seed: row.Seed, Command: row.Command,
		GoodputGbps: res.GoodputGbps, Retransmits: res.Retransmits, Timeouts: res.Timeouts,
		QueueDrops: snap.Drops()[fabric.DropQueueFull],
		Errors:     res.Errors, Error: errText(run.err), DataOK: res.Check.OK, Sanity: run.sanityFailure()}
	for _, lc := range snap.Links {
		row.PeakQueue = max(row.PeakQueue, lc.QueueMaxBytes)
		row.MeanQueue = max(row.MeanQueue, lc.QueueAvgBytes)
	}
	senders := 1
	if c.wl == workload.Permutation {
		senders = len(run.lab.Topology().Hosts)
	}
	planes := run.lab.Topology().Hosts[0].Ports
	row.CapacityGbps = float64(senders*planes) * c.rate / 1e9
	row.WireLimit = wireLimit(c.kind, res.Size, res.MTU)
	row.OfWire = res.GoodputGbps / (row.CapacityGbps * row.WireLimit)
	row.OfCeiling, row.WireSurvival = Float(math.NaN()), Float(math.NaN())
	if c.wl == workload.WriteBW {
		var tx, rx uint64
		for _, lc := range snap.Links {
			if lc.From.Node == c.bed.from {
				tx += lc.TxPackets
			}
			if lc.To.Node == c.bed.to {
				rx += lc.RxPackets
			}
		}
		row.WireSurvival = Float(wireSurvival(tx, rx, row.QueueDrops))
		row.OfCeiling = Float(row.OfWire / float64(row.WireSurvival))
	}
	return row, nil
}

// wireSurvival is the fraction of the frames a sender's links serialized
// (tx) that no wire lost: each either reached the receiver (rx), was
// dropped from a full queue (queueDrops: the transport's doing, so it
// does not lower the ceiling), or failed its FCS on some link. Goodput
// cannot exceed the wire limit times this fraction: unique payload
// delivered is at most the frames delivered, and the frames sent took
// their wire time. A lab's handshake frames are counted too (two or
// three of thousands). NaN when nothing was sent.
func wireSurvival(tx, rx, queueDrops uint64) float64 {
	if tx == 0 {
		return math.NaN()
	}
	return float64(min(rx+queueDrops, tx)) / float64(tx)
}
