package experiment

import (
	"fmt"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

func init() {
	register(Experiment{
		Name:   "plane-scaling",
		Title:  "aggregate throughput over 1, 2, 4 and 8 planes, with up to 4,000 concurrent connections",
		Claim:  "throughput scales linearly with plane count on 4- and 8-plane topologies with up to 4,000 concurrent connections",
		Target: "MetaRoCE aggregate throughput within 5% of linear at 8 planes with 4,000 connections",
		run:    runPlaneScaling,
	})
}

// PlaneRow is one (planes, connections) run of the plane-scaling
// experiment, MetaRoCE.
type PlaneRow struct {
	Planes int `json:"planes"`
	// Conns is the number of concurrent connections (all hosts).
	Conns int `json:"connections"`
	// SteadyGbps is the aggregate rate of data packets (IPv4 bytes)
	// arriving at the receivers over the middle of the run (from 20% to
	// 80% of it), when every connection is active.
	SteadyGbps float64 `json:"steady_gbps"`
	// GoodputGbps is application bytes over the whole run (first post to
	// last completion), ramp-up and tail included.
	GoodputGbps float64 `json:"goodput_gbps"`
	// CapacityGbps is the receivers' line rate: hosts x planes x rate.
	CapacityGbps float64 `json:"capacity_gbps"`
	// Utilization is SteadyGbps / CapacityGbps.
	Utilization float64 `json:"utilization"`
	// Linear is SteadyGbps / (planes x the 1-plane row's SteadyGbps with
	// the same connection count).
	Linear float64 `json:"ratio_to_linear"`
	// PlaneSpread is the smallest plane's share of received bytes over
	// the largest's (1 = perfectly even).
	PlaneSpread float64 `json:"plane_spread"`
	Retransmits uint64  `json:"retransmits"`
	Errors      int     `json:"app_errors"`
	DataOK      bool    `json:"data_ok"`
	Error       string  `json:"error,omitempty"`
}

type planeParams struct {
	bed    bed
	planes []int
	conns  []int // connections per host pair (permutation: one pair per host)
	// size and qd are the message size and messages in flight per
	// connection with many connections; a single connection per pair uses
	// bigSize and bigQD so that it alone can fill 8 planes.
	size, bigSize, bigQD int
	// perHost is the bytes each host sends per plane: a connection sends
	// max(1, perHost/(size x conns)) messages per plane, so runs with more
	// planes move proportionally more and last about as long.
	perHost int
	qd      int
	sample  sim.Time
}

func planeScalingParams(cfg Config) planeParams {
	b := defaultBed("plane-scaling", cfg.Seed)
	b.payload = cfg.Payload
	b.leaves, b.hpl, b.spines = 2, 8, 4
	p := planeParams{bed: b, planes: []int{1, 2, 4, 8}, conns: []int{1, 250}, size: 16 << 10, bigSize: 256 << 10, bigQD: 8, perHost: 4 << 20, qd: 2, sample: 5 * sim.Microsecond}
	switch cfg.Scale {
	case Quick:
		p.conns = []int{1, 25}
		p.perHost = 1 << 20
	case Tiny:
		p.bed.leaves, p.bed.hpl, p.bed.spines = 2, 2, 2
		p.planes = []int{1, 2}
		p.conns = []int{1, 4}
		p.perHost = 128 << 10
		p.sample = 2 * sim.Microsecond
	}
	return p
}

func runPlaneScaling(cfg Config) (*Report, error) {
	p := planeScalingParams(cfg)
	type pcase struct{ planes, conns int }
	var cases []pcase
	for _, c := range p.conns {
		for _, pl := range p.planes {
			cases = append(cases, pcase{pl, c})
		}
	}
	hosts := p.bed.hosts()
	jobs := make([]job[PlaneRow], len(cases))
	for i, c := range cases {
		c := c
		jobs[i] = job[PlaneRow]{
			name: fmt.Sprintf("%d planes, %d connections", c.planes, c.conns*hosts),
			run:  func() (PlaneRow, error) { return planeRun(p, c.planes, c.conns) },
		}
	}
	rows, err := runJobs(cfg, "plane-scaling", jobs)
	if err != nil {
		return nil, err
	}
	one := map[int]float64{}
	for _, row := range rows {
		if row.Planes == 1 {
			one[row.Conns] = row.SteadyGbps
		}
	}
	for i := range rows {
		if b := one[rows[i].Conns]; b > 0 {
			rows[i].Linear = rows[i].SteadyGbps / (float64(rows[i].Planes) * b)
		}
	}
	r := &Report{Rows: rows}
	r.Setup = []string{
		p.bed.describe() + " — planes vary",
		fmt.Sprintf("workload: MetaRoCE permutation (every host WRITEs to one other host); with one connection per host pair %s messages, %d in flight; with more, %s messages, %d in flight per connection; each host sends about %s per plane (at least one message per connection), so every run lasts about as long",
			sizeString(p.bigSize), p.bigQD, sizeString(p.size), p.qd, sizeString(p.perHost)),
		fmt.Sprintf("connections: %v per host pair x %d hosts", p.conns, hosts),
		fmt.Sprintf("steady throughput: IPv4 bytes of data packets arriving at the receivers, sampled every %v, over the middle 60%% of the run; ratio to linear = steady(P) / (P x steady(1 plane)) at the same connection count", p.sample),
		"message sizes and counts scaled down to keep 4,000 connections within memory and a run within seconds: each connection moves tens of packets per plane, so every connection is in flight at once",
	}
	if cfg.Scale != Full {
		r.Setup = append(r.Setup, fmt.Sprintf("scaled down (%s scale): fewer hosts, planes and connections", cfg.Scale))
	}
	r.table = Table{Columns: []string{"planes", "conns", "steady Gb/s", "capacity Gb/s", "utilization", "ratio to linear", "plane spread", "goodput Gb/s", "retx", "app errors", "data"}}
	for _, row := range rows {
		data := "ok"
		if !row.DataOK {
			data = "FAIL"
		}
		r.table.add(fmt.Sprint(row.Planes), fmt.Sprint(row.Conns), f2(row.SteadyGbps), f2(row.CapacityGbps), pct(row.Utilization),
			f3(row.Linear), f3(row.PlaneSpread), f2(row.GoodputGbps), fmt.Sprint(row.Retransmits), errCell(row.Errors, row.Error), data)
	}
	maxConns := p.conns[len(p.conns)-1] * hosts
	maxPlanes := p.planes[len(p.planes)-1]
	for _, row := range rows {
		if row.Planes == maxPlanes && row.Conns == maxConns {
			c := check(fmt.Sprintf("throughput at %d planes with %d connections", maxPlanes, maxConns),
				"within 5% of linear (ratio >= 0.95)", row.Linear, 0.95, true, fmt.Sprintf("%.3f of linear", row.Linear))
			if !c.Met {
				c.Note = fmt.Sprintf("missed by %.1f points", 100*(0.95-row.Linear))
			}
			r.Checks = append(r.Checks, c)
		}
		if row.Errors > 0 || row.Error != "" {
			r.Notes = append(r.Notes, fmt.Sprintf("%d planes, %d connections: %d application errors %s", row.Planes, row.Conns, row.Errors, row.Error))
		}
	}
	fig := figure{file: "plane-scaling", title: "Aggregate throughput vs planes (MetaRoCE)",
		xlabel: "planes", ylabel: "steady aggregate throughput (Gb/s)", legendLeft: true}
	for ci, c := range p.conns {
		var xs, ys []float64
		for _, row := range rows {
			if row.Conns == c*hosts {
				xs, ys = append(xs, float64(row.Planes)), append(ys, row.SteadyGbps)
			}
		}
		name := fmt.Sprintf("%d connections", c*hosts)
		fig.lines = append(fig.lines, figLine{name: name, x: xs, y: ys, points: true, color: ci + 1})
		r.Series = append(r.Series, Series{Plot: "plane-scaling", Name: name, X: xs, Y: ys})
		if b := one[c*hosts]; b > 0 && ci == len(p.conns)-1 {
			lx := []float64{float64(p.planes[0]), float64(maxPlanes)}
			fig.lines = append(fig.lines, figLine{name: fmt.Sprintf("linear (%d conns)", c*hosts), x: lx,
				y: []float64{b * lx[0], b * lx[1]}, dashed: true, color: -1})
		}
	}
	r.plots = append(r.plots, fig)
	return r, nil
}

func planeRun(p planeParams, planes, conns int) (PlaneRow, error) {
	b := p.bed
	b.planes = planes
	tb, err := b.build()
	if err != nil {
		return PlaneRow{}, err
	}
	row := PlaneRow{Planes: planes, Conns: conns * b.hosts(), CapacityGbps: float64(b.hosts()*planes) * b.rate / 1e9}
	tr := newTraffic(tb.cl.NICs)
	s := startSampler(tb.loop, 0, p.sample, sim.Never, tr.sample)
	size, qd := p.size, p.qd
	if conns == 1 {
		size, qd = p.bigSize, p.bigQD
	}
	res, runErr := workload.Run(tb.cl, workload.Spec{
		Name: workload.Permutation, Transport: transport.MetaRoCE, Size: size, QueueDepth: qd,
		Conns: conns, Iterations: planes * max(1, p.perHost/(size*conns)), Seed: b.seed, Payload: b.payload, Timeout: 100 * sim.Millisecond,
	})
	s.stop()
	tr.sample(tb.loop.Now())
	if res == nil {
		return row, runErr
	}
	if runErr != nil {
		row.Error = runErr.Error()
	}
	row.GoodputGbps, row.Retransmits, row.Errors, row.DataOK = res.GoodputGbps, res.Retransmits, res.Errors, res.Check.OK
	t0 := tb.loop.Now() - res.Elapsed
	from := tr.index(t0 + res.Elapsed/5)
	to := tr.index(t0 + res.Elapsed*4/5)
	if to >= len(tr.times) {
		to = len(tr.times) - 1
	}
	recv := tr.receivers()
	row.SteadyGbps = gbpsBetween(tr.times, total(recv, len(tr.times)), from, to)
	row.Utilization = row.SteadyGbps / row.CapacityGbps
	last := tr.planeRx[len(tr.planeRx)-1]
	lo, hi := last[0], last[0]
	for _, v := range last {
		lo, hi = min(lo, v), max(hi, v)
	}
	if hi > 0 {
		row.PlaneSpread = float64(lo) / float64(hi)
	}
	return row, nil
}
