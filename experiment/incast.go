package experiment

import (
	"fmt"
	"math"
	"net/netip"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

func init() {
	register(Experiment{
		Name:  "incast",
		Title: "N-to-1 incast for N = 8, 32, 63, loss-free and at 1% loss: time until every sender holds its fair share, peak queue, drops, pauses",
		Claim: "with receiver-driven fair-share rate hints, incast resolves in one or two round trips",
		Target: "MetaRoCE: every sender within ±10% of its fair share over windows of one base RTT (sampled 4 times per RTT) from at most " +
			"2 base RTTs after the start on, median and every seed; RoCEv2 on its lossless fabric: no drops",
		Varies: []Knob{lossKnob("it runs loss-free beds and beds with 1% random loss"), pfcKnob("it runs RoCEv2 on lossy beds and on lossless (PFC) ones")},
		run:    runIncast,
	})
}

// IncastRow is one (bed, N, transport, seed) incast run.
type IncastRow struct {
	Senders   int     `json:"senders"`
	Transport string  `json:"transport"`
	Fabric    string  `json:"fabric"`
	LossPct   float64 `json:"loss_pct"`
	Lab       string  `json:"lab"`
	Seed      uint64  `json:"seed"`
	Command   string  `json:"command"`
	// BaseRTT is the bed's unloaded round trip between leaves.
	BaseRTT sim.Time `json:"base_rtt_ns"`
	// SettleRTTs is the strict measure: the time (in base RTTs after the
	// workload starts) from which every window of one base RTT, sliding by
	// a quarter RTT, finds every sender within ±10% of its fair share of
	// the receiver's link (bytes counted as they cross the wire); -1 if
	// that never holds to the end of the run.
	SettleRTTs float64 `json:"settle_rtts"`
	// ShareRTTPackets is one sender's fair share of one base RTT in
	// full-size packets: below about 10 no packet-switched sender can be
	// within ±10% in every window, so the strict measure says "never"
	// whatever the transport.
	ShareRTTPackets float64 `json:"share_per_rtt_packets"`
	// WideSettleRTTs is the same test over the shortest window (a whole
	// number of quarter RTTs, at least one RTT) in which the fair share
	// spans 20 packets, so that one packet more or less is half the
	// tolerance; the window is WideWindowRTTs long.
	WideSettleRTTs float64 `json:"wide_settle_rtts"`
	WideWindowRTTs float64 `json:"wide_window_rtts"`
	// BottleneckGbps is the receiver link's rate.
	BottleneckGbps float64 `json:"bottleneck_gbps"`
	// Utilization is the receiver link's data over the second half of the
	// run as a fraction of its rate.
	Utilization float64 `json:"utilization"`
	// PeakQueue is the largest queue at the receiver's downlink (the
	// bottleneck); QueueDrops the packets full queues dropped anywhere;
	// PFCPauses the pauses.
	PeakQueue   int     `json:"peak_queue_bytes"`
	QueueDrops  uint64  `json:"queue_drops"`
	PFCPauses   uint64  `json:"pfc_pauses"`
	Jain        float64 `json:"jain_second_half"`
	GoodputGbps float64 `json:"goodput_gbps"`
	Retransmits uint64  `json:"retransmits"`
	Timeouts    uint64  `json:"timeouts"`
	Errors      int     `json:"app_errors"`
	Error       string  `json:"error,omitempty"`
	DataOK      bool    `json:"data_ok"`
	// Sanity says why the run failed goodput sanity (pointRun.sanityFailure).
	Sanity string `json:"sanity,omitempty"`

	// RateRTTs and Rates are the per-sender rates over one-RTT windows
	// (Gb/s) at window starts in base RTTs, for the plot (8 senders or
	// fewer). They are not in the report's JSON (its series are), but a
	// point's result carries them to the merge.
	RateRTTs []float64   `json:"-"`
	Rates    [][]float64 `json:"-"`
}

type incastCase struct {
	lab     string
	leaves  int // the bed's leaves and hosts per leaf, to spread the senders
	perLeaf int
	n       int
	side    side
	loss    float64
}

type incastParams struct {
	cases    []incastCase
	duration sim.Time
	size, qd int
}

func incastParamsFor(s Scale) incastParams {
	p := incastParams{duration: 2 * sim.Millisecond, size: 64 << 10, qd: 16}
	ns := []int{8, 32, 63}
	if s == Quick {
		p.duration = sim.Millisecond
	}
	sides := []side{metaroceLossy, rocev2Lossless, rocev2Lossy}
	losses := []float64{0, 1}
	if s == Tiny {
		// The claims: 63-to-1 RoCEv2 on its lossless bed, and the strict
		// settling on the long bed below.
		p.duration = 300 * sim.Microsecond
		ns, sides, losses = []int{63}, []side{rocev2Lossless}, []float64{0}
	}
	for _, loss := range losses {
		for _, sd := range sides {
			for _, n := range ns {
				kind := "lossy"
				if sd.pfc {
					kind = "pfc"
				}
				if loss > 0 {
					kind += "-1pct"
				}
				p.cases = append(p.cases, incastCase{lab: "incast/" + kind, leaves: 4, perLeaf: 16, n: n, side: sd, loss: loss})
			}
		}
	}
	// A bed with long links, where one sender's fair share of a base RTT
	// spans enough packets for the strict test to be decidable at N = 8.
	for _, sd := range []side{metaroceLossy, rocev2Lossless} {
		lab := "incast/long-lossy"
		if sd.pfc {
			lab = "incast/long-pfc"
		}
		p.cases = append(p.cases, incastCase{lab: lab, leaves: 2, perLeaf: 8, n: 8, side: sd})
	}
	return p
}

func (p incastParams) point(c incastCase, seed uint64) Point {
	return Point{Lab: c.lab, Seed: seed, Spec: workload.Spec{
		Name: workload.Incast, Transport: c.side.kind, Size: p.size, QueueDepth: p.qd,
		From: hostsByLeaf(c.leaves, c.perLeaf, c.n, "h0"), To: []string{"h0"},
		Duration: p.duration, Timeout: sim.Second,
	}}
}

func runIncast(cfg Config) (*Report, error) {
	p := incastParamsFor(cfg.Scale)
	rows, err := runCases(cfg, "incast", p.cases, p.point, func(c incastCase, pt Point) (IncastRow, error) { return incastRun(p, c, pt) })
	if err != nil {
		return nil, err
	}
	r := &Report{Rows: rows}
	r.Setup = []string{
		"beds: built-in labs incast/lossy, incast/pfc (and -1pct with 1% random loss on every link): 64 hosts on one plane of 4 leaves x 16 hosts and 4 spines (non-blocking), 100 Gbit/s links, 1 us per link, 512 KiB queues, ECN step marking above 64 KiB on the lossy beds (the lossless ones: see below); incast/long-lossy and incast/long-pfc: 16 hosts on 2 leaves, 5 us per link",
		"capacity: the same for every transport (one 100 Gbit/s port per host, one plane)",
		"RoCEv2 lossless: PFC on every link (xoff 64 KiB, xon 56 KiB), ECN RED 5-200 KiB at most 1% (the DCQCN paper's), DCQCN on, the HCA default ACK timeout; RoCEv2 lossy: DCQCN on, ACK timeout 131 us; MetaRoCE: the lossy bed, its defaults",
		fmt.Sprintf("workload: N senders spread over the leaves WRITE %s messages (%d in flight each) to h0 for %v", sizeString(p.size), p.qd, p.duration),
		"settle (strict): the first time from which every window of one base RTT, sliding by a quarter RTT to the end of the run, finds every sender's delivered bytes within ±10% of its fair share (the receiver link's rate / N); bytes are counted as they cross the receiver's link (a packet over its serialization), not whole at arrival",
		"share/RTT: one sender's fair share of a base RTT in full-size packets. Below about 10 packets, ±10% in every one-RTT window is beyond any packet-switched sender (one packet more or less is more than 10%), so the strict test says \"never\" whatever the transport; settle (wide) is the same test over the shortest window (at least one RTT) in which the fair share spans 20 packets (one packet is then half the tolerance); the checks use the strict test where the fair share spans 10 packets per RTT, the wide one elsewhere",
		"bottleneck: the receiver's downlink h0-p0 (leaf to host); utilization over the second half of the run",
	}
	if cfg.Scale != Full {
		r.Setup = append(r.Setup, fmt.Sprintf("scaled down (%s scale): shorter runs, fewer cases", cfg.Scale))
	}
	g := groupBy(rows, func(r IncastRow) string { return fmt.Sprint(r.Lab, r.Senders, r.Transport, r.Fabric) })
	r.table = Table{Columns: []string{"bed", "N", "transport", "fabric", "loss", "share/RTT pkts", "settle (strict)", "settle (wide)", "utilization", "peak queue", "queue drops", "PFC pauses", "Jain", "retx", "timeouts", "app errors", "data"}}
	for _, k := range g.keys {
		rs := g.rows[k]
		row := rs[0]
		r.table.add(row.Lab, fmt.Sprint(row.Senders), row.Transport, row.Fabric, fmt.Sprintf("%g%%", row.LossPct), f1(row.ShareRTTPackets),
			settleCell(rs, func(r IncastRow) float64 { return r.SettleRTTs }, 1),
			settleCell(rs, func(r IncastRow) float64 { return r.WideSettleRTTs }, row.WideWindowRTTs),
			statRows(rs, func(r IncastRow) float64 { return r.Utilization }).cell(pct),
			statRows(rs, func(r IncastRow) float64 { return float64(r.PeakQueue) / 1024 }).cell(func(f float64) string { return fmt.Sprintf("%.0f KiB", f) }),
			statRows(rs, func(r IncastRow) float64 { return float64(r.QueueDrops) }).cell(n0),
			statRows(rs, func(r IncastRow) float64 { return float64(r.PFCPauses) }).cell(n0),
			statRows(rs, func(r IncastRow) float64 { return r.Jain }).cell(f3),
			statRows(rs, func(r IncastRow) float64 { return float64(r.Retransmits) }).cell(n0),
			statRows(rs, func(r IncastRow) float64 { return float64(r.Timeouts) }).cell(n0),
			errorsCell(rs, func(r IncastRow) (int, string) { return r.Errors, r.Error }),
			dataCellRows(rs, func(r IncastRow) (bool, string) { return r.DataOK, r.Error }))
	}
	settled := func(f func(IncastRow) float64) func(IncastRow) float64 {
		return func(r IncastRow) float64 {
			if v := f(r); v >= 0 {
				return v
			}
			return math.Inf(1)
		}
	}
	for _, k := range g.keys {
		rs := g.rows[k]
		row := rs[0]
		switch {
		case row.Transport == transport.MetaRoCE.String() && row.LossPct == 0:
			// The strict test where it can be decided (a fair share of
			// at least 10 packets per RTT); else the same test over the
			// shortest window where it can (the table shows both).
			what := fmt.Sprintf("MetaRoCE %d-to-1 on %s (fair share %.1f packets per RTT)", row.Senders, row.Lab, row.ShareRTTPackets)
			if row.ShareRTTPackets >= 10 {
				r.Checks = append(r.Checks, statCheck(what+": settled, one-RTT windows", "<= 2 base RTTs, median and every seed",
					statRows(rs, settled(func(r IncastRow) float64 { return r.SettleRTTs })), goal{median: 2, floor: 2}, f1))
			} else {
				r.Checks = append(r.Checks, statCheck(fmt.Sprintf("%s: settled, %.2f-RTT windows", what, row.WideWindowRTTs), "<= 2 base RTTs, median and every seed",
					statRows(rs, settled(func(r IncastRow) float64 { return r.WideSettleRTTs })), goal{median: 2, floor: 2}, f1))
			}
		case row.Fabric == FabricLossless && row.LossPct == 0:
			r.Checks = append(r.Checks, statCheck(fmt.Sprintf("RoCEv2 %d-to-1 on %s: queue drops", row.Senders, row.Lab), "0 in every seed (lossless)",
				statRows(rs, func(r IncastRow) float64 { return float64(r.QueueDrops) }), goal{}, n0))
		}
	}
	for _, row := range rows {
		if row.Error != "" {
			r.Notes = append(r.Notes, fmt.Sprintf("%s %s %d-to-1 on %s, seed %d: %s", row.Transport, row.Fabric, row.Senders, row.Lab, row.Seed, row.Error))
		}
	}
	// Per-sender rates of the first seed of each transport on the long
	// bed, where one RTT holds enough packets to read them.
	for _, k := range g.keys {
		row := g.rows[k][0]
		if len(row.Rates) == 0 || row.Lab != "incast/long-lossy" && row.Lab != "incast/long-pfc" {
			continue
		}
		fig := figure{file: "incast-" + row.Transport, title: fmt.Sprintf("%d-to-1 incast on %s, %s (seed %d): each sender's rate over one-RTT windows", row.Senders, row.Lab, row.Transport, row.Seed),
			xlabel: "window start (base RTTs after the start)", ylabel: "delivered rate (Gb/s)"}
		if row.Transport == transport.MetaRoCE.String() {
			fig.file = "incast"
		}
		for i, y := range row.Rates {
			fig.lines = append(fig.lines, figLine{name: fmt.Sprintf("sender %d", i+1), x: row.RateRTTs, y: y})
			r.Series = append(r.Series, Series{Plot: fig.file, Name: fmt.Sprintf("sender %d", i+1), X: row.RateRTTs, Y: y})
		}
		if n := len(row.RateRTTs); n > 0 {
			fair := row.BottleneckGbps / float64(row.Senders)
			fig.lines = append(fig.lines, figLine{name: "fair share ±10%", x: []float64{0, row.RateRTTs[n-1]}, y: []float64{0.9 * fair, 0.9 * fair}, dashed: true, color: -1},
				figLine{name: "", x: []float64{0, row.RateRTTs[n-1]}, y: []float64{1.1 * fair, 1.1 * fair}, dashed: true, color: -1})
		}
		r.plots = append(r.plots, fig)
	}
	return r, nil
}

// settleCell shows settle times over seeds: "median (min–max) RTTs",
// with the seeds that never settled counted.
func settleCell(rs []IncastRow, f func(IncastRow) float64, window float64) string {
	var xs []float64
	never := 0
	for _, r := range rs {
		if v := f(r); v >= 0 {
			xs = append(xs, v)
		} else {
			never++
		}
	}
	w := ""
	if window > 1 {
		w = fmt.Sprintf(" [%.2f-RTT windows]", window)
	}
	switch {
	case never == len(rs):
		return "never" + w
	case never > 0:
		return fmt.Sprintf("%s; never in %d of %d%s", statOf(xs).cell(f1), never, len(rs), w)
	}
	return statOf(xs).cell(f1) + w
}

func incastRun(p incastParams, c incastCase, pt Point) (IncastRow, error) {
	row := IncastRow{Senders: c.n, Transport: c.side.kind.String(), Fabric: c.side.fabric(), LossPct: c.loss, Lab: c.lab,
		Seed: pt.Seed, Command: pt.Command(), SettleRTTs: -1, WideSettleRTTs: -1}
	var arr *arrivals
	var bott *fabric.Port
	run, err := pt.run(probe{observe: func(net *fabric.Network) error {
		var err error
		if bott, err = net.LinkPort("h0-p0", fabric.BtoA); err != nil {
			return err
		}
		addrs := hostAddrs(net)
		byName := map[string]netip.Addr{}
		for a, n := range addrs {
			byName[n] = a
		}
		var senders []netip.Addr
		for _, h := range pt.Spec.From {
			senders = append(senders, byName[h])
		}
		arr = newArrivals(bott, senders)
		net.SetObserver(arr)
		return nil
	}})
	if err != nil {
		return row, err
	}
	res := run.res
	row.GoodputGbps, row.Retransmits, row.Timeouts = res.GoodputGbps, res.Retransmits, res.Timeouts
	row.Errors, row.Error, row.DataOK = res.Errors, errText(run.err), res.Check.OK
	row.Sanity = run.sanityFailure()
	snap := run.net.Counters()
	lc, _ := snap.Link("h0-p0", fabric.BtoA)
	row.PeakQueue, row.QueueDrops, row.PFCPauses = lc.QueueMaxBytes, snap.Drops()[fabric.DropQueueFull], snap.PFCPauses()
	rate := bott.Rate()
	row.BottleneckGbps = rate / 1e9
	rtt := labBaseRTT(run.lab)
	row.BaseRTT = rtt
	fair := rate / 8 * float64(rtt) / 1e9 / float64(c.n)
	row.ShareRTTPackets = fair / incastPkt
	step := rtt / 4
	end := min(p.duration, run.end-run.t0)
	if s := arr.settle(run.t0, end, 4*step, step, rate, fair, 0.1); s >= 0 {
		row.SettleRTTs = float64(s) / float64(rtt)
	}
	m := wideQuarters(step, rate, c.n)
	row.WideWindowRTTs = float64(m*int(step)) / float64(rtt)
	if s := arr.settle(run.t0, end, sim.Time(m)*step, step, rate, float64(m)*fair/4, 0.1); s >= 0 {
		row.WideSettleRTTs = float64(s) / float64(rtt)
	}
	if c.n <= 8 {
		k := int(end/step) + 1
		grid := make([]float64, k)
		for i := range grid {
			grid[i] = float64(run.t0 + sim.Time(i)*step)
		}
		for i := range arr.at {
			f := arr.fluid(i, grid, rate)
			var ys []float64
			for w := 0; w+4 < k; w++ {
				ys = append(ys, (f[w+4]-f[w])*8/float64(rtt))
			}
			row.Rates = append(row.Rates, ys)
		}
		for w := 0; w+4 < k; w++ {
			row.RateRTTs = append(row.RateRTTs, float64(w)/4)
		}
	}
	half := run.t0 + end/2
	var late []float64
	var sum float64
	for i := range arr.at {
		b := float64(arr.bytesBetween(i, half, run.t0+end))
		late = append(late, b)
		sum += b
	}
	row.Utilization = sum * 8 / (rate * float64(end-end/2) / 1e9)
	row.Jain = jain(late)
	return row, nil
}

// incastPkt is a full packet on the wire in IPv4 bytes (approx. transport
// headers): the unit of the incast's shares.
const incastPkt = 4096 + 64 + 28

// wideQuarters is the wide settle test's window in steps of a quarter
// RTT (step): the shortest whole number of them, at least four (one
// RTT), in which one of n senders' fair share of a line of rate bit/s
// spans 20 packets.
func wideQuarters(step sim.Time, rate float64, n int) int {
	m := 4
	for float64(m)*float64(step)*rate/8/1e9/float64(n) < 20*incastPkt {
		m++
	}
	return m
}
