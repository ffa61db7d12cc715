package experiment

import (
	"fmt"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

func init() {
	register(Experiment{
		Name:  "collectives",
		Title: "ring all-reduce and all-to-all on a 64-host 8-plane lab, loss-free and at 1% loss, MetaRoCE vs RoCEv2",
		Claim: "on a 64-node cluster MetaRoCE delivers higher throughput and lower completion times than RoCEv2 on all-reduce and all-to-all",
		Target: "MetaRoCE completion time below RoCEv2's (algorithm bandwidth above) for both collectives, " +
			"loss-free and at 1% loss",
		run: runCollectives,
	})
}

// CollectiveRow is one (collective, loss, transport) run.
type CollectiveRow struct {
	Collective string  `json:"collective"`
	LossPct    float64 `json:"loss_pct"`
	Transport  string  `json:"transport"`
	// Conns is connections per host pair.
	Conns int `json:"conns_per_pair"`
	// Size is the bytes per operation: the vector reduced (allreduce), or
	// what each host sends in total (alltoall).
	Size int `json:"size_bytes"`
	// Ops is the number of operations timed.
	Ops int `json:"ops"`
	// OpTime is the completion time of one operation: P50 and max over
	// the operations.
	OpTimeP50 sim.Time `json:"op_time_p50_ns"`
	OpTimeMax sim.Time `json:"op_time_max_ns"`
	// AlgBWGbps is size x ops / time; BusBWGbps NCCL's bus bandwidth.
	AlgBWGbps   float64 `json:"algbw_gbps"`
	BusBWGbps   float64 `json:"busbw_gbps"`
	Retransmits uint64  `json:"retransmits"`
	Timeouts    uint64  `json:"timeouts"`
	Errors      int     `json:"app_errors"`
	Error       string  `json:"error,omitempty"`
	DataOK      bool    `json:"data_ok"`
	// Speedup is MetaRoCE's algorithm bandwidth over RoCEv2's in the same
	// (collective, loss) pair, on the MetaRoCE row; 0 elsewhere.
	Speedup float64 `json:"speedup_vs_rocev2,omitempty"`
}

type collParams struct {
	bed         bed
	allreduce   int // bytes
	alltoall    int
	ops         int
	losses      []float64
	rocev2Conns int
	timeout     sim.Time
}

func collectivesParams(cfg Config) collParams {
	b := defaultBed("collectives", cfg.Seed)
	b.payload = cfg.Payload
	b.planes, b.leaves, b.hpl, b.spines = 8, 4, 16, 4
	p := collParams{bed: b, allreduce: 16 << 20, alltoall: 16 << 20, ops: 2, losses: []float64{0, 1}, rocev2Conns: 1, timeout: sim.Second}
	switch cfg.Scale {
	case Quick:
		p.allreduce, p.alltoall = 4<<20, 4<<20
	case Tiny:
		p.bed.planes, p.bed.leaves, p.bed.hpl, p.bed.spines = 2, 2, 2, 2
		p.allreduce, p.alltoall = 256<<10, 256<<10
		p.ops = 1
	}
	return p
}

func runCollectives(cfg Config) (*Report, error) {
	p := collectivesParams(cfg)
	type ccase struct {
		name workload.Name
		loss float64
		kind transport.Kind
	}
	var cases []ccase
	for _, n := range []workload.Name{workload.AllReduce, workload.AllToAll} {
		for _, l := range p.losses {
			for _, k := range []transport.Kind{transport.MetaRoCE, transport.RoCEv2} {
				cases = append(cases, ccase{n, l, k})
			}
		}
	}
	jobs := make([]job[CollectiveRow], len(cases))
	for i, c := range cases {
		c := c
		jobs[i] = job[CollectiveRow]{name: fmt.Sprintf("%s %v loss %g%%", c.name, c.kind, c.loss),
			run: func() (CollectiveRow, error) { return collectiveOne(p, c.name, c.loss, c.kind) }}
	}
	rows, err := runJobs(cfg, "collectives", jobs)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		if rows[i].Transport != transport.MetaRoCE.String() {
			continue
		}
		for _, o := range rows {
			if o.Transport == transport.RoCEv2.String() && o.Collective == rows[i].Collective && o.LossPct == rows[i].LossPct && o.AlgBWGbps > 0 && rows[i].Error == "" {
				rows[i].Speedup = rows[i].AlgBWGbps / o.AlgBWGbps
			}
		}
	}
	r := &Report{Rows: rows}
	r.Setup = []string{
		p.bed.describe(),
		fmt.Sprintf("all-reduce: ring (reduce-scatter then all-gather, 2(N-1) WRITE_IMM steps) over a %s vector; all-to-all: each host sends %s in total, %s to every other host; %d operations each, timed one after another",
			sizeString(p.allreduce), sizeString(p.alltoall), sizeString(p.alltoall/p.bed.hosts()), p.ops),
		"loss: random loss on every link direction (data and ACKs)",
		fmt.Sprintf("connections: MetaRoCE one per host pair (its paths spread over every plane); RoCEv2 %d queue pair per host pair, each on one plane (chosen at random per queue pair)", p.rocev2Conns),
		rocev2Timeout,
		"sizes scaled down from the seeds' RCCL runs (collective sizes of MiB, not GiB) to keep each run within a minute",
	}
	if cfg.Scale != Full {
		r.Setup = append(r.Setup, fmt.Sprintf("scaled down (%s scale): fewer hosts and planes, smaller collectives", cfg.Scale))
	}
	r.table = Table{Columns: []string{"collective", "loss", "transport", "op time p50", "op time max", "algbw Gb/s", "busbw Gb/s", "speedup", "retx", "timeouts", "app errors", "data"}}
	for _, row := range rows {
		data := "ok"
		if !row.DataOK {
			data = "FAIL"
			if row.Error != "" {
				data = "not checked"
			}
		}
		sp := "-"
		if row.Speedup > 0 {
			sp = fmt.Sprintf("%.2fx", row.Speedup)
		}
		r.table.add(row.Collective, fmt.Sprintf("%g%%", row.LossPct), row.Transport, row.OpTimeP50.String(), row.OpTimeMax.String(),
			f2(row.AlgBWGbps), f2(row.BusBWGbps), sp, fmt.Sprint(row.Retransmits), fmt.Sprint(row.Timeouts), errCell(row.Errors, row.Error), data)
	}
	for _, row := range rows {
		if row.Transport == transport.MetaRoCE.String() {
			c := check(fmt.Sprintf("MetaRoCE vs RoCEv2 algbw, %s at %g%% loss", row.Collective, row.LossPct), "> 1x", row.Speedup, 1, true, fmt.Sprintf("%.2fx", row.Speedup))
			c.Met = row.Speedup > 1 && row.Error == ""
			switch {
			case row.Error != "":
				c.Measured = "MetaRoCE run failed"
				c.Note = row.Error
			case row.Speedup == 0:
				c.Measured = "no RoCEv2 figure"
			case !c.Met:
				c.Note = fmt.Sprintf("RoCEv2 faster by %.1f%%", 100*(1/row.Speedup-1))
			}
			r.Checks = append(r.Checks, c)
		}
		if row.Error != "" {
			r.Notes = append(r.Notes, fmt.Sprintf("%s %s at %g%% loss: %s", row.Collective, row.Transport, row.LossPct, row.Error))
		}
	}
	for _, coll := range []workload.Name{workload.AllReduce, workload.AllToAll} {
		fig := figure{file: "collectives-" + string(coll), title: fmt.Sprintf("%s, %d hosts, %d planes", coll, p.bed.hosts(), p.bed.planes),
			ylabel: "algorithm bandwidth (Gb/s)"}
		for _, l := range p.losses {
			fig.xticks = append(fig.xticks, fmt.Sprintf("%g%% loss", l))
		}
		for _, k := range []transport.Kind{transport.MetaRoCE, transport.RoCEv2} {
			var vals []float64
			for _, l := range p.losses {
				for _, row := range rows {
					if row.Collective == string(coll) && row.Transport == k.String() && row.LossPct == l {
						vals = append(vals, row.AlgBWGbps)
					}
				}
			}
			fig.bars = append(fig.bars, figBars{name: k.String(), values: vals})
			r.Series = append(r.Series, Series{Plot: fig.file, Name: k.String(), X: p.losses, Y: vals})
		}
		r.plots = append(r.plots, fig)
	}
	return r, nil
}

func collectiveOne(p collParams, name workload.Name, loss float64, kind transport.Kind) (CollectiveRow, error) {
	b := p.bed
	b.loss = loss / 100
	tb, err := b.build()
	if err != nil {
		return CollectiveRow{}, err
	}
	size := p.allreduce
	if name == workload.AllToAll {
		size = p.alltoall
	}
	conns := 1
	if kind == transport.RoCEv2 {
		conns = p.rocev2Conns
	}
	row := CollectiveRow{Collective: string(name), LossPct: loss, Transport: kind.String(), Conns: conns, Size: size, Ops: p.ops}
	res, runErr := workload.Run(tb.cl, workload.Spec{
		Name: name, Transport: kind, Size: size, Iterations: p.ops, Conns: conns, Seed: b.seed, Payload: b.payload, Timeout: p.timeout,
	})
	if res == nil {
		return row, runErr
	}
	if runErr != nil {
		row.Error = runErr.Error()
	}
	row.Size = res.Size
	row.OpTimeP50, row.OpTimeMax = res.FlowTime.P50, res.FlowTime.Max
	row.AlgBWGbps, row.BusBWGbps = res.AlgBWGbps, res.BusBWGbps
	row.Retransmits, row.Timeouts, row.Errors, row.DataOK = res.Retransmits, res.Timeouts, res.Errors, res.Check.OK
	return row, nil
}
