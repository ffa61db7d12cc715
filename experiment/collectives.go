package experiment

import (
	"fmt"
	"math"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

func init() {
	register(Experiment{
		Name:  "collectives",
		Title: "ring all-reduce and all-to-all on 64 hosts x 8 planes at equal capacity: MetaRoCE vs multi-rail RoCEv2, lossless and at 1% loss",
		Claim: "on a 64-node cluster MetaRoCE delivers higher throughput and lower completion times than RoCEv2 on all-reduce and all-to-all",
		Target: "MetaRoCE's algorithm bandwidth above RoCEv2's (completion time below) for both collectives: loss-free against RoCEv2 on its " +
			"lossless PFC fabric, and at 1% loss against RoCEv2 lossy and lossless; median and every seed",
		Varies: []Knob{lossKnob("it runs loss-free beds and beds with 1% random loss"), pfcKnob("it runs RoCEv2 on lossy beds and on lossless (PFC) ones")},
		run:    runCollectives,
	})
}

// CollectiveRow is one (collective, loss, transport, fabric, seed) run.
type CollectiveRow struct {
	Collective string  `json:"collective"`
	LossPct    float64 `json:"loss_pct"`
	Transport  string  `json:"transport"`
	Fabric     string  `json:"fabric"`
	Seed       uint64  `json:"seed"`
	Command    string  `json:"command"`
	// Conns is connections per host pair (RoCEv2: one queue pair per
	// plane; the collective runs one ring or stripe per connection).
	Conns int `json:"conns_per_pair"`
	// Size is the bytes per operation: the vector reduced (allreduce), or
	// what each host sends in total (alltoall).
	Size int `json:"size_bytes"`
	Ops  int `json:"ops"`
	// OpTime is the completion time of one operation: P50 and max over
	// the operations.
	OpTimeP50 sim.Time `json:"op_time_p50_ns"`
	OpTimeMax sim.Time `json:"op_time_max_ns"`
	// AlgBWGbps is size x ops / time; BusBWGbps NCCL's bus bandwidth.
	AlgBWGbps   float64 `json:"algbw_gbps"`
	BusBWGbps   float64 `json:"busbw_gbps"`
	GoodputGbps float64 `json:"goodput_gbps"`
	Retransmits uint64  `json:"retransmits"`
	Timeouts    uint64  `json:"timeouts"`
	PFCPauses   uint64  `json:"pfc_pauses"`
	Errors      int     `json:"app_errors"`
	Error       string  `json:"error,omitempty"`
	DataOK      bool    `json:"data_ok"`
	// Sanity says why the run failed goodput sanity (pointRun.sanityFailure).
	Sanity string `json:"sanity,omitempty"`
}

type collParams struct {
	prefix    string // "collectives/" or "collectives/tiny-"
	allreduce int    // bytes
	alltoall  int
	ops       int
	hosts     int
}

func collectivesParams(s Scale) collParams {
	p := collParams{prefix: "collectives/", allreduce: 8 << 20, alltoall: 8 << 20, ops: 2, hosts: 64}
	switch s {
	case Quick:
		p.allreduce, p.alltoall = 2<<20, 2<<20
	case Tiny:
		p.prefix, p.hosts = "collectives/tiny-", 4
		p.allreduce, p.alltoall = 1<<20, 1<<20
	}
	return p
}

type collCase struct {
	name workload.Name
	loss float64
	side side
}

func (p collParams) point(c collCase, seed uint64) Point {
	kind := "lossy"
	if c.side.pfc {
		kind = "pfc"
	}
	if c.loss > 0 {
		kind += "-1pct"
	}
	size := p.allreduce
	if c.name == workload.AllToAll {
		size = p.alltoall
	}
	return Point{Lab: p.prefix + kind, Seed: seed, Spec: workload.Spec{
		Name: c.name, Transport: c.side.kind, Size: size, Iterations: p.ops, Timeout: 10 * sim.Second,
	}}
}

func runCollectives(cfg Config) (*Report, error) {
	p := collectivesParams(cfg.Scale)
	var cases []collCase
	for _, n := range []workload.Name{workload.AllReduce, workload.AllToAll} {
		cases = append(cases, collCase{n, 0, metaroceLossy}, collCase{n, 0, rocev2Lossless},
			collCase{n, 1, metaroceLossy}, collCase{n, 1, rocev2Lossy}, collCase{n, 1, rocev2Lossless})
	}
	rows, err := runCases(cfg, "collectives", cases, p.point, collectiveRun)
	if err != nil {
		return nil, err
	}
	r := &Report{Rows: rows}
	r.Setup = []string{
		fmt.Sprintf("beds: built-in labs %slossy, %spfc (and -1pct, with 1%% random loss on every link): %d hosts on 8 planes of 4 leaves x 16 hosts and 4 spines (non-blocking), 100 Gbit/s links, 1 us per link, 512 KiB queues, ECN step marking above 64 KiB on the lossy beds (the lossless ones: see below)",
			p.prefix, p.prefix, p.hosts),
		"capacity: equal — every host has one 100 Gbit/s port per plane on both sides. MetaRoCE: one connection per host pair spraying its 16 paths over all planes. RoCEv2 (multi-rail, as NCCL runs it): one queue pair per plane per host pair, all-to-all chunks striped over them, all-reduce as one ring per queue pair (NCCL channels) over its slice of the vector",
		"RoCEv2 lossless: PFC on every link (xoff 64 KiB, xon 56 KiB), ECN RED 5-200 KiB at most 1% (the DCQCN paper's), DCQCN on, the HCA default ACK timeout; RoCEv2 lossy: DCQCN on, ACK timeout 131 us; loss-free, RoCEv2 runs as deployed (lossless) and MetaRoCE on the lossy fabric; at 1% loss (which PFC does not stop) RoCEv2 runs on both",
		fmt.Sprintf("all-reduce: ring (reduce-scatter then all-gather, 2(N-1) WRITE_IMM steps) over a %s vector; all-to-all: each host sends %s in total, %s to every other host; %d operations each, timed one after another",
			sizeString(p.allreduce), sizeString(p.alltoall), sizeString(p.alltoall/p.hosts), p.ops),
		"bus bandwidth: NCCL's (algbw x 2(N-1)/N for all-reduce, x (N-1)/N for all-to-all); speedup: MetaRoCE's algorithm bandwidth over RoCEv2's, seed by seed",
		"sizes scaled down from the seeds' RCCL runs (collective sizes of MiB, not GiB) to keep each run within a minute",
	}
	if cfg.Scale != Full {
		r.Setup = append(r.Setup, fmt.Sprintf("scaled down (%s scale): smaller collectives (tiny: a 4-host, 2-plane bed)", cfg.Scale))
	}
	key := func(coll string, loss float64, transport, fab string) string {
		return fmt.Sprint(coll, loss, transport, fab)
	}
	g := groupBy(rows, func(r CollectiveRow) string { return key(r.Collective, r.LossPct, r.Transport, r.Fabric) })
	// speedups of MetaRoCE over a RoCEv2 side, seed by seed.
	speedups := func(coll string, loss float64, fab string) []float64 {
		mr := g.rows[key(coll, loss, transport.MetaRoCE.String(), FabricLossy)]
		ro := g.rows[key(coll, loss, transport.RoCEv2.String(), fab)]
		var out []float64
		for _, a := range mr {
			for _, b := range ro {
				if a.Seed == b.Seed {
					x := math.NaN()
					if a.Error == "" && b.AlgBWGbps > 0 {
						x = a.AlgBWGbps / b.AlgBWGbps
					}
					out = append(out, x)
				}
			}
		}
		return out
	}
	r.table = Table{Columns: []string{"collective", "loss", "transport", "fabric", "conns/pair", "op time p50 (us)", "algbw Gb/s", "busbw Gb/s", "MetaRoCE speedup", "retx", "timeouts", "PFC pauses", "app errors", "data"}}
	for _, k := range g.keys {
		rs := g.rows[k]
		row := rs[0]
		sp := "-"
		if row.Transport == transport.RoCEv2.String() {
			sp = statOf(speedups(row.Collective, row.LossPct, row.Fabric)).cell(speedupFmt)
		}
		r.table.add(row.Collective, fmt.Sprintf("%g%%", row.LossPct), row.Transport, row.Fabric, fmt.Sprint(row.Conns),
			statRows(rs, func(r CollectiveRow) float64 { return r.OpTimeP50.Micros() }).cell(f1),
			statRows(rs, func(r CollectiveRow) float64 { return r.AlgBWGbps }).cell(f2),
			statRows(rs, func(r CollectiveRow) float64 { return r.BusBWGbps }).cell(f2), sp,
			statRows(rs, func(r CollectiveRow) float64 { return float64(r.Retransmits) }).cell(n0),
			statRows(rs, func(r CollectiveRow) float64 { return float64(r.Timeouts) }).cell(n0),
			statRows(rs, func(r CollectiveRow) float64 { return float64(r.PFCPauses) }).cell(n0),
			errorsCell(rs, func(r CollectiveRow) (int, string) { return r.Errors, r.Error }),
			dataCellRows(rs, func(r CollectiveRow) (bool, string) { return r.DataOK, r.Error }))
	}
	for _, coll := range []workload.Name{workload.AllReduce, workload.AllToAll} {
		for _, c := range []struct {
			loss float64
			fab  string
		}{{0, FabricLossless}, {1, FabricLossy}, {1, FabricLossless}} {
			s := statOf(speedups(string(coll), c.loss, c.fab))
			r.Checks = append(r.Checks, statCheck(fmt.Sprintf("MetaRoCE vs RoCEv2 (%s) algbw, %s at %g%% loss", c.fab, coll, c.loss),
				"> 1x, median and every seed", s, goal{median: 1, floor: 1, atLeast: true}, speedupFmt))
		}
	}
	for _, row := range rows {
		if row.Error != "" {
			r.Notes = append(r.Notes, fmt.Sprintf("%s %s %s at %g%% loss, seed %d: %s", row.Collective, row.Transport, row.Fabric, row.LossPct, row.Seed, row.Error))
		}
	}
	for _, coll := range []workload.Name{workload.AllReduce, workload.AllToAll} {
		fig := figure{file: "collectives-" + string(coll), title: fmt.Sprintf("%s, %d hosts, equal capacity (median of seeds)", coll, p.hosts),
			ylabel: "algorithm bandwidth (Gb/s)", xticks: []string{"0% loss", "1% loss"}}
		for _, sd := range []side{metaroceLossy, rocev2Lossless, rocev2Lossy} {
			var vals []float64
			for _, l := range []float64{0, 1} {
				v := 0.0
				if rs, ok := g.rows[key(string(coll), l, sd.kind.String(), sd.fabric())]; ok {
					v = statRows(rs, func(r CollectiveRow) float64 { return r.AlgBWGbps }).Median
				}
				vals = append(vals, v)
			}
			fig.bars = append(fig.bars, figBars{name: sd.String(), values: vals})
			r.Series = append(r.Series, Series{Plot: fig.file, Name: sd.String(), X: []float64{0, 1}, Y: vals})
		}
		r.plots = append(r.plots, fig)
	}
	return r, nil
}

func collectiveRun(c collCase, pt Point) (CollectiveRow, error) {
	run, err := pt.run(probe{})
	if err != nil {
		return CollectiveRow{}, err
	}
	res := run.res
	return CollectiveRow{
		Collective: string(c.name), LossPct: c.loss, Transport: c.side.kind.String(), Fabric: c.side.fabric(),
		Seed: pt.Seed, Command: pt.Command(), Conns: res.Conns, Size: res.Size, Ops: res.Iterations,
		OpTimeP50: res.FlowTime.P50, OpTimeMax: res.FlowTime.Max, AlgBWGbps: res.AlgBWGbps, BusBWGbps: res.BusBWGbps, GoodputGbps: res.GoodputGbps,
		Retransmits: res.Retransmits, Timeouts: res.Timeouts, PFCPauses: res.PFCPauses,
		Errors: res.Errors, Error: errText(run.err), DataOK: res.Check.OK, Sanity: run.sanityFailure(),
	}, nil
}
