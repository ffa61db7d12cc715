package experiment

import (
	"fmt"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/workload"
)

func init() {
	register(Experiment{
		Name:   "congestion",
		Title:  "RoCEv2 as deployed under congestion: a 2:1 oversubscribed uplink and an 8:1 incast, lossy and lossless (PFC + DCQCN), with MetaRoCE for reference",
		Claim:  "(the baseline's) deployed RoCEv2 runs on a lossless PFC fabric with DCQCN; a fair comparison gives it that",
		Target: "RoCEv2 with PFC and DCQCN: >= 90% of the bottleneck's capacity, no drops and a bounded queue, on both beds (median and every seed)",
		Varies: []Knob{pfcKnob("it runs RoCEv2 on lossy beds and on lossless (PFC) ones")},
		run:    runCongestion,
	})
}

// CongestionRow is one (pattern, transport, fabric, seed) run.
type CongestionRow struct {
	Pattern   string `json:"pattern"`
	Transport string `json:"transport"`
	Fabric    string `json:"fabric"`
	Seed      uint64 `json:"seed"`
	Command   string `json:"command"`
	// Bottleneck is the congested link direction; Utilization its data
	// rate over the last three quarters of the run as a fraction of its
	// capacity; PeakQueue its largest queue.
	Bottleneck  string  `json:"bottleneck"`
	CapacityGb  float64 `json:"capacity_gbps"`
	Utilization float64 `json:"utilization"`
	PeakQueue   int     `json:"peak_queue_bytes"`
	QueueDrops  uint64  `json:"queue_drops"`
	PFCPauses   uint64  `json:"pfc_pauses"`
	ECNMarks    uint64  `json:"ecn_marks"`
	GoodputGbps float64 `json:"goodput_gbps"`
	Retransmits uint64  `json:"retransmits"`
	Timeouts    uint64  `json:"timeouts"`
	Errors      int     `json:"app_errors"`
	Error       string  `json:"error,omitempty"`
	DataOK      bool    `json:"data_ok"`
	// Sanity says why the run failed goodput sanity (pointRun.sanityFailure).
	Sanity string `json:"sanity,omitempty"`
}

type congestionCase struct {
	pattern string
	lab     string
	side    side
	spec    workload.Spec
	link    string
	dir     fabric.Direction
}

type congestionParams struct {
	cases    []congestionCase
	duration sim.Time
	sample   sim.Time
}

func congestionParamsFor(s Scale) congestionParams {
	p := congestionParams{duration: 2 * sim.Millisecond, sample: 5 * sim.Microsecond}
	switch s {
	case Quick:
		p.duration = sim.Millisecond
	case Tiny:
		p.duration = 500 * sim.Microsecond
	}
	for _, sd := range []side{rocev2Lossless, rocev2Lossy, metaroceLossy} {
		ov, ic := "congestion/oversub-lossy", "incast/lossy"
		if sd.pfc {
			ov, ic = "congestion/oversub-pfc", "incast/pfc"
		}
		p.cases = append(p.cases,
			congestionCase{pattern: "2:1 oversubscription", lab: ov, side: sd, link: "p0-leaf0-spine0", dir: fabric.AtoB,
				spec: workload.Spec{Name: workload.WriteBW, From: hostNames(0, 4), To: hostNames(4, 8)}},
			congestionCase{pattern: "8:1 incast", lab: ic, side: sd, link: "h0-p0", dir: fabric.BtoA,
				spec: workload.Spec{Name: workload.Incast, From: hostsByLeaf(4, 16, 8, "h0"), To: []string{"h0"}}})
	}
	return p
}

func (p congestionParams) point(c congestionCase, seed uint64) Point {
	s := c.spec
	s.Transport, s.Size, s.QueueDepth, s.Duration, s.Timeout = c.side.kind, 64<<10, 16, p.duration, sim.Second
	return Point{Lab: c.lab, Seed: seed, Spec: s}
}

func runCongestion(cfg Config) (*Report, error) {
	p := congestionParamsFor(cfg.Scale)
	rows, err := runCases(cfg, "congestion", p.cases, p.point, func(c congestionCase, pt Point) (CongestionRow, error) { return congestionRun(p, c, pt) })
	if err != nil {
		return nil, err
	}
	r := &Report{Rows: rows}
	r.Setup = []string{
		"2:1 oversubscription: built-in labs congestion/oversub-lossy and congestion/oversub-pfc, 8 hosts on 2 leaves x 4 hosts and one spine; each leaf's uplink runs at 200 Gbit/s for 4 x 100 Gbit/s of hosts; workload: write_bw from the 4 hosts of leaf 0 to the 4 of leaf 1 (16 flows), bottleneck: leaf 0's uplink",
		"8:1 incast: built-in labs incast/lossy and incast/pfc, 64 hosts on 4 leaves x 16 hosts and 4 spines; 8 senders spread over the leaves WRITE to h0, bottleneck: h0's downlink",
		"capacity: the same for every transport (one 100 Gbit/s port per host, one plane)",
		fmt.Sprintf("every flow WRITEs 64 KiB messages, 16 in flight, for %v; utilization: the bottleneck's data over the last three quarters of the run", p.duration),
		"every link: 100 Gbit/s (the oversubscribed uplinks 200), 1 us, 512 KiB queues; lossy beds: ECN step marking above 64 KiB (DCTCP-style, as MetaRoCE's beds); lossless beds: PFC on every link (xoff 64 KiB, xon 56 KiB) and ECN marking as the DCQCN paper recommends (RED from 5 to 200 KiB, at most 1%)",
		"RoCEv2: DCQCN on with the defaults of docs/rocev2-baseline.md (the paper's CNP interval and increase timer, the NICs' rate-decrease period and target rule); MetaRoCE on the lossy beds for reference",
	}
	if cfg.Scale != Full {
		r.Setup = append(r.Setup, fmt.Sprintf("scaled down (%s scale): shorter runs", cfg.Scale))
	}
	g := groupBy(rows, func(r CongestionRow) string { return r.Pattern + r.Transport + r.Fabric })
	r.table = Table{Columns: []string{"pattern", "transport", "fabric", "bottleneck", "utilization", "peak queue", "queue drops", "PFC pauses", "ECN marks", "retx", "timeouts", "app errors"}}
	for _, k := range g.keys {
		rs := g.rows[k]
		row := rs[0]
		r.table.add(row.Pattern, row.Transport, row.Fabric, fmt.Sprintf("%s (%s)", row.Bottleneck, fabric.FormatRate(row.CapacityGb*1e9)),
			statRows(rs, func(r CongestionRow) float64 { return r.Utilization }).cell(pct),
			statRows(rs, func(r CongestionRow) float64 { return float64(r.PeakQueue) / 1024 }).cell(func(f float64) string { return fmt.Sprintf("%.0f KiB", f) }),
			statRows(rs, func(r CongestionRow) float64 { return float64(r.QueueDrops) }).cell(n0),
			statRows(rs, func(r CongestionRow) float64 { return float64(r.PFCPauses) }).cell(n0),
			statRows(rs, func(r CongestionRow) float64 { return float64(r.ECNMarks) }).cell(n0),
			statRows(rs, func(r CongestionRow) float64 { return float64(r.Retransmits) }).cell(n0),
			statRows(rs, func(r CongestionRow) float64 { return float64(r.Timeouts) }).cell(n0),
			errorsCell(rs, func(r CongestionRow) (int, string) { return r.Errors, r.Error }))
	}
	for _, k := range g.keys {
		rs := g.rows[k]
		row := rs[0]
		if row.Transport != rocev2Lossless.kind.String() || row.Fabric != FabricLossless {
			continue
		}
		r.Checks = append(r.Checks,
			statCheck(fmt.Sprintf("RoCEv2 with PFC + DCQCN, %s: bottleneck utilization", row.Pattern), ">= 90%, median and every seed",
				statRows(rs, func(r CongestionRow) float64 { return r.Utilization }), goal{median: 0.9, floor: 0.9, atLeast: true}, pct),
			statCheck(fmt.Sprintf("RoCEv2 with PFC + DCQCN, %s: queue drops", row.Pattern), "0 in every seed",
				statRows(rs, func(r CongestionRow) float64 { return float64(r.QueueDrops) }), goal{}, n0))
	}
	for _, row := range rows {
		if row.Error != "" {
			r.Notes = append(r.Notes, fmt.Sprintf("%s, %s %s, seed %d: %s", row.Pattern, row.Transport, row.Fabric, row.Seed, row.Error))
		}
	}
	return r, nil
}

func congestionRun(p congestionParams, c congestionCase, pt Point) (CongestionRow, error) {
	var times []sim.Time
	var bytes []uint64
	var s *sampler
	run, err := pt.run(probe{start: func(r *pointRun) {
		s = startSampler(r.loop, 0, p.sample, sim.Never, func(now sim.Time) {
			times = append(times, now)
			bytes = append(bytes, linkBytes(r.net, c.link, c.dir))
		})
	}})
	if err != nil {
		return CongestionRow{}, err
	}
	s.stop()
	res := run.res
	snap := run.net.Counters()
	lc, _ := snap.Link(c.link, c.dir)
	row := CongestionRow{Pattern: c.pattern, Transport: c.side.kind.String(), Fabric: c.side.fabric(), Seed: pt.Seed, Command: pt.Command(),
		Bottleneck: c.link + " " + c.dir.String(), CapacityGb: lc.Rate / 1e9, PeakQueue: lc.QueueMaxBytes,
		QueueDrops: snap.Drops()[fabric.DropQueueFull], PFCPauses: snap.PFCPauses(), ECNMarks: res.ECNMarks,
		GoodputGbps: res.GoodputGbps, Retransmits: res.Retransmits, Timeouts: res.Timeouts,
		Errors: res.Errors, Error: errText(run.err), DataOK: res.Check.OK, Sanity: run.sanityFailure()}
	from, to := run.t0+p.duration/4, run.t0+p.duration
	i, j := -1, -1
	for k, t := range times {
		if i < 0 && t >= from {
			i = k
		}
		if t <= to {
			j = k
		}
	}
	if i >= 0 && j > i {
		row.Utilization = float64(bytes[j]-bytes[i]) * 8 / (lc.Rate * (times[j] - times[i]).Seconds())
	}
	return row, nil
}
