package experiment

import (
	"fmt"
	"math"
	"strconv"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

func init() {
	register(Experiment{
		Name:   "plane-scaling",
		Title:  "aggregate throughput over 1, 2, 4 and 8 planes, with up to 4,000 concurrent connections",
		Claim:  "throughput scales linearly with plane count on 4- and 8-plane topologies with up to 4,000 concurrent connections",
		Target: "MetaRoCE aggregate throughput within 5% of linear at 4 and 8 planes with 4,000 connections (median and every seed)",
		run:    runPlaneScaling,
	})
}

// PlaneRow is one (planes, connections, seed) run, MetaRoCE.
type PlaneRow struct {
	Planes int `json:"planes"`
	// Conns is the number of concurrent connections (all hosts).
	Conns   int    `json:"connections"`
	Seed    uint64 `json:"seed"`
	Command string `json:"command"`
	// SteadyGbps is the aggregate rate of data packets (IPv4 bytes)
	// arriving at the receivers over the middle of the run (from 20% to
	// 80% of it), when every connection is active.
	SteadyGbps float64 `json:"steady_gbps"`
	// GoodputGbps is application bytes over the whole run (first post to
	// last completion), ramp-up and tail included.
	GoodputGbps float64 `json:"goodput_gbps"`
	// CapacityGbps is the receivers' line rate: hosts x planes x rate.
	CapacityGbps float64 `json:"capacity_gbps"`
	Utilization  float64 `json:"utilization"`
	// Linear is SteadyGbps / (planes x the 1-plane run's SteadyGbps with
	// the same connection count and seed).
	Linear Float `json:"ratio_to_linear"`
	// PlaneSpread is the smallest plane's share of received bytes over
	// the largest's (1 = perfectly even).
	PlaneSpread float64 `json:"plane_spread"`
	Retransmits uint64  `json:"retransmits"`
	Errors      int     `json:"app_errors"`
	Error       string  `json:"error,omitempty"`
	DataOK      bool    `json:"data_ok"`
	// Sanity says why the run failed goodput sanity (pointRun.sanityFailure).
	Sanity string `json:"sanity,omitempty"`
}

type planeParams struct {
	hosts  int
	planes []int
	conns  []int // connections per host pair (permutation: one pair per host)
	// size and qd are the message size and messages in flight per
	// connection with many connections; one connection per pair uses
	// bigSize and bigQD so that it alone can fill 8 planes.
	size, bigSize, bigQD, qd int
	// perHost is the bytes each host sends per plane, so runs with more
	// planes move proportionally more and last about as long.
	perHost int
	sample  sim.Time
}

func planeScalingParams(s Scale) planeParams {
	p := planeParams{hosts: 16, planes: []int{1, 2, 4, 8}, conns: []int{1, 250},
		size: 16 << 10, bigSize: 256 << 10, bigQD: 8, qd: 2, perHost: 4 << 20, sample: 5 * sim.Microsecond}
	switch s {
	case Quick:
		// Fewer connections need more messages in flight each to fill 8
		// planes (25 x 4 x 16 KiB is about twice their BDP).
		p.conns, p.qd = []int{1, 25}, 4
		p.perHost = 1 << 20
	case Tiny:
		p.planes = []int{1, 4, 8}
		p.conns = []int{1}
		p.perHost = 1 << 20
		p.sample = 2 * sim.Microsecond
	}
	return p
}

type planeCase struct{ planes, conns int }

func (p planeParams) point(c planeCase, seed uint64) Point {
	size, qd := p.size, p.qd
	if c.conns == 1 {
		size, qd = p.bigSize, p.bigQD
	}
	// Each host sends about perHost per plane, at least a message per
	// connection, striped over its connections.
	iters := c.conns * c.planes * max(1, p.perHost/(size*c.conns))
	return Point{Lab: "plane-scaling/planes-" + strconv.Itoa(c.planes), Seed: seed, Spec: workload.Spec{
		Name: workload.Permutation, Transport: transport.MetaRoCE, Size: size, QueueDepth: qd, Conns: c.conns,
		Iterations: iters, Timeout: 100 * sim.Millisecond,
	}}
}

func runPlaneScaling(cfg Config) (*Report, error) {
	p := planeScalingParams(cfg.Scale)
	var cases []planeCase
	for _, c := range p.conns {
		for _, pl := range p.planes {
			cases = append(cases, planeCase{pl, c})
		}
	}
	rows, err := runCases(cfg, "plane-scaling", cases, p.point, func(c planeCase, pt Point) (PlaneRow, error) { return planeRun(p, c, pt) })
	if err != nil {
		return nil, err
	}
	one := map[string]float64{}
	key := func(conns int, seed uint64) string { return fmt.Sprint(conns, "/", seed) }
	for _, row := range rows {
		if row.Planes == 1 {
			one[key(row.Conns, row.Seed)] = row.SteadyGbps
		}
	}
	for i := range rows {
		rows[i].Linear = Float(math.NaN())
		if b := one[key(rows[i].Conns, rows[i].Seed)]; b > 0 {
			rows[i].Linear = Float(rows[i].SteadyGbps / (float64(rows[i].Planes) * b))
		}
	}
	r := &Report{Rows: rows}
	r.Setup = []string{
		fmt.Sprintf("beds: built-in labs plane-scaling/planes-N: %d hosts, N planes of 2 leaves x 8 hosts and 4 spines (non-blocking), 100 Gbit/s links, 1 us per link, 512 KiB queues, ECN step marking above 64 KiB", p.hosts),
		fmt.Sprintf("workload: MetaRoCE permutation (every host WRITEs to one other host); with one connection per host pair %s messages, %d in flight; with more, %s messages, %d in flight per connection; each host sends about %s per plane (at least one message per connection), so every run lasts about as long",
			sizeString(p.bigSize), p.bigQD, sizeString(p.size), p.qd, sizeString(p.perHost)),
		fmt.Sprintf("connections: %v per host pair x %d hosts", p.conns, p.hosts),
		fmt.Sprintf("steady throughput: IPv4 bytes of data packets arriving at the receivers, sampled every %v, over the middle 60%% of the run; ratio to linear = steady(P) / (P x steady(1 plane)) at the same connection count and seed", p.sample),
	}
	if cfg.Scale != Full {
		r.Setup = append(r.Setup, fmt.Sprintf("scaled down (%s scale): fewer connections and planes, fewer bytes", cfg.Scale))
	}
	g := groupBy(rows, func(r PlaneRow) string { return fmt.Sprint(r.Planes, "/", r.Conns) })
	r.table = Table{Columns: []string{"planes", "conns", "steady Gb/s", "capacity Gb/s", "utilization", "ratio to linear", "plane spread", "goodput Gb/s", "retx", "app errors", "data"}}
	for _, k := range g.keys {
		rs := g.rows[k]
		r.table.add(fmt.Sprint(rs[0].Planes), fmt.Sprint(rs[0].Conns),
			statRows(rs, func(r PlaneRow) float64 { return r.SteadyGbps }).cell(f2), f2(rs[0].CapacityGbps),
			statRows(rs, func(r PlaneRow) float64 { return r.Utilization }).cell(pct),
			statRows(rs, func(r PlaneRow) float64 { return float64(r.Linear) }).cell(f3),
			statRows(rs, func(r PlaneRow) float64 { return r.PlaneSpread }).cell(f3),
			statRows(rs, func(r PlaneRow) float64 { return r.GoodputGbps }).cell(f2),
			statRows(rs, func(r PlaneRow) float64 { return float64(r.Retransmits) }).cell(n0),
			errorsCell(rs, func(r PlaneRow) (int, string) { return r.Errors, r.Error }),
			dataCellRows(rs, func(r PlaneRow) (bool, string) { return r.DataOK, r.Error }))
	}
	maxConns := p.conns[len(p.conns)-1] * p.hosts
	for _, planes := range []int{4, 8} {
		rs, ok := g.rows[fmt.Sprint(planes, "/", maxConns)]
		if !ok {
			continue
		}
		r.Checks = append(r.Checks, statCheck(fmt.Sprintf("throughput at %d planes with %d connections", planes, maxConns),
			"within 5% of linear (ratio >= 0.95), median and every seed",
			statRows(rs, func(r PlaneRow) float64 { return float64(r.Linear) }), goal{median: 0.95, floor: 0.95, atLeast: true}, f3))
	}
	for _, row := range rows {
		if row.Errors > 0 || row.Error != "" {
			r.Notes = append(r.Notes, fmt.Sprintf("%d planes, %d connections, seed %d: %d application errors %s", row.Planes, row.Conns, row.Seed, row.Errors, row.Error))
		}
	}
	fig := figure{file: "plane-scaling", title: "Aggregate throughput vs planes (MetaRoCE, median of seeds)",
		xlabel: "planes", ylabel: "steady aggregate throughput (Gb/s)", legendLeft: true}
	for ci, c := range p.conns {
		var xs, ys []float64
		for _, pl := range p.planes {
			if rs, ok := g.rows[fmt.Sprint(pl, "/", c*p.hosts)]; ok {
				xs = append(xs, float64(pl))
				ys = append(ys, statRows(rs, func(r PlaneRow) float64 { return r.SteadyGbps }).Median)
			}
		}
		name := fmt.Sprintf("%d connections", c*p.hosts)
		fig.lines = append(fig.lines, figLine{name: name, x: xs, y: ys, points: true, color: ci + 1})
		r.Series = append(r.Series, Series{Plot: "plane-scaling", Name: name, X: xs, Y: ys})
		if ci == len(p.conns)-1 && len(ys) > 0 && xs[0] == 1 {
			lx := []float64{xs[0], xs[len(xs)-1]}
			fig.lines = append(fig.lines, figLine{name: fmt.Sprintf("linear (%d conns)", c*p.hosts), x: lx,
				y: []float64{ys[0] * lx[0], ys[0] * lx[1]}, dashed: true, color: -1})
		}
	}
	r.plots = append(r.plots, fig)
	return r, nil
}

func planeRun(p planeParams, c planeCase, pt Point) (PlaneRow, error) {
	var tr *traffic
	var s *sampler
	run, err := pt.run(probe{start: func(r *pointRun) {
		tr = newTraffic(r.cl.NICs)
		s = startSampler(r.loop, 0, p.sample, sim.Never, tr.sample)
	}})
	if err != nil {
		return PlaneRow{}, err
	}
	s.stop()
	tr.sample(run.end)
	res := run.res
	row := PlaneRow{Planes: c.planes, Conns: c.conns * p.hosts, Seed: pt.Seed, Command: pt.Command(),
		CapacityGbps: hostCapacity(run.lab) / 1e9,
		GoodputGbps:  res.GoodputGbps, Retransmits: res.Retransmits, Errors: res.Errors, Error: errText(run.err), DataOK: res.Check.OK, Sanity: run.sanityFailure()}
	from := tr.index(run.t0 + res.Elapsed/5)
	to := min(tr.index(run.t0+res.Elapsed*4/5), len(tr.times)-1)
	row.SteadyGbps = gbpsBetween(tr.times, total(tr.receivers(), len(tr.times)), from, to)
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

// sizeString formats a size exactly: MiB or KiB when it divides, else
// bytes.
func sizeString(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
