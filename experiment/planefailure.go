package experiment

import (
	"fmt"
	"math"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/workload"
)

func init() {
	register(Experiment{
		Name:  "plane-failure",
		Title: "one of 4 planes fails mid-run: goodput over time, time to recover, application errors",
		Claim: "after a simulated plane failure traffic redistributes to the other planes with no application involvement and no operator action",
		Target: "MetaRoCE: zero application errors, and goodput back to >= 90% of the surviving planes' capacity within a few RTTs " +
			"after the fabric's failure-detection delay (median and every seed)",
		Varies: []Knob{faultKnob("its beds take plane 1 down mid-run, the failure it measures"), pfcKnob("it runs RoCEv2 on lossy beds and on lossless (PFC) ones")},
		run:    runPlaneFailure,
	})
}

// FailureRow is one (transport, seed) plane-failure run.
type FailureRow struct {
	Transport string `json:"transport"`
	Fabric    string `json:"fabric"`
	Seed      uint64 `json:"seed"`
	Command   string `json:"command"`
	Planes    int    `json:"planes"`
	// FailedPlane fails at FailAt (the lab's fault timeline, from the
	// start of the run).
	FailedPlane int      `json:"failed_plane"`
	FailAt      sim.Time `json:"fail_at_ns"`
	// BeforeGbps and AfterGbps are goodput (application bytes completed
	// per second) before the failure and over the last third of the run.
	BeforeGbps float64 `json:"before_goodput_gbps"`
	AfterGbps  float64 `json:"after_goodput_gbps"`
	// GoodputGbps is the whole run's goodput, as `mrlab sim` reports it.
	GoodputGbps float64 `json:"goodput_gbps"`
	// SurvivingGbps is the capacity of the planes left: the hosts' links
	// outside the failed plane. AfterFraction = AfterGbps / SurvivingGbps.
	SurvivingGbps float64 `json:"surviving_capacity_gbps"`
	AfterFraction float64 `json:"after_fraction_of_surviving"`
	// Recover is the time from the failure until goodput, averaged over
	// three samples, reaches 90% of the surviving capacity and stays there
	// to the end of the run; -1 if it never does. RecoverRTTs is the same
	// in base RTTs.
	Recover     sim.Time `json:"recover_ns"`
	RecoverRTTs float64  `json:"recover_rtts"`
	// Detection is the fabric's failure-detection delay: until it passes,
	// switches keep hashing onto the dead plane's links.
	Detection sim.Time `json:"detection_ns"`
	// BaseRTT is the bed's unloaded round trip between leaves.
	BaseRTT     sim.Time `json:"base_rtt_ns"`
	Errors      int      `json:"app_errors"`
	Error       string   `json:"error,omitempty"`
	Retransmits uint64   `json:"retransmits"`
	Timeouts    uint64   `json:"timeouts"`
	DataOK      bool     `json:"data_ok"`
	// Sanity says why the run failed goodput sanity (pointRun.sanityFailure).
	Sanity string `json:"sanity,omitempty"`

	// Times (us) and Goodput (Gb/s) are the series for the plot: not in
	// the report's JSON (its series are), but a point's result carries
	// them to the merge.
	Times   []float64 `json:"-"`
	Goodput []float64 `json:"-"`
}

type failureParams struct {
	lossy, lossless string // beds
	duration        sim.Time
	size            int
	sample          sim.Time
}

func planeFailureParams(s Scale) failureParams {
	p := failureParams{lossy: "plane-failure/lossy", lossless: "plane-failure/pfc", duration: 3 * sim.Millisecond,
		size: 64 << 10, sample: 10 * sim.Microsecond}
	switch s {
	case Quick:
		p.duration = 1500 * sim.Microsecond
	case Tiny:
		p.lossy, p.lossless = "plane-failure/tiny-lossy", "plane-failure/tiny-pfc"
		p.duration, p.sample = 600*sim.Microsecond, 5*sim.Microsecond
	}
	return p
}

func (p failureParams) point(sd side, seed uint64) Point {
	lab := p.lossy
	if sd.pfc {
		lab = p.lossless
	}
	return Point{Lab: lab, Seed: seed, Spec: workload.Spec{
		Name: workload.Permutation, Transport: sd.kind, Size: p.size, QueueDepth: 16,
		Duration: p.duration, Timeout: sim.Second,
	}}
}

func runPlaneFailure(cfg Config) (*Report, error) {
	p := planeFailureParams(cfg.Scale)
	sides := []side{metaroceLossy, rocev2Lossless}
	rows, err := runCases(cfg, "plane-failure", sides, p.point, func(sd side, pt Point) (FailureRow, error) { return failureRun(p, sd, pt) })
	if err != nil {
		return nil, err
	}
	r := &Report{Rows: rows}
	first := rows[0]
	r.Setup = []string{
		fmt.Sprintf("beds: built-in labs %s (MetaRoCE) and %s (RoCEv2, PFC on every link, as deployed): the same fabric, 4 planes, 100 Gbit/s links; plane %d fails (every link in it) %v into the run and the fabric notices after %v (switches black-hole until then)",
			p.lossy, p.lossless, first.FailedPlane, first.FailAt, first.Detection),
		"capacity: the same for both: every host has one port per plane; MetaRoCE sprays one connection per host pair over all planes, RoCEv2 opens one queue pair per plane per host pair and stripes messages over them (multi-rail)",
		fmt.Sprintf("workload: permutation, every host WRITEs %s messages (16 in flight per connection) to one other host for %v", sizeString(p.size), p.duration),
		fmt.Sprintf("goodput: application bytes completed, in %v buckets (%.1f base RTTs of %v); recovery: the 3-bucket average stays >= 90%% of the surviving planes' capacity", p.sample, float64(p.sample)/float64(first.BaseRTT), first.BaseRTT),
	}
	if cfg.Scale != Full {
		r.Setup = append(r.Setup, fmt.Sprintf("scaled down (%s scale): shorter run (tiny: a 4-host bed)", cfg.Scale))
	}
	g := groupBy(rows, func(r FailureRow) string { return r.Transport + r.Fabric })
	r.table = Table{Columns: []string{"transport", "fabric", "before Gb/s", "after Gb/s", "surviving cap Gb/s", "after/surviving", "recover", "app errors", "retx", "timeouts", "data"}}
	for _, k := range g.keys {
		rs := g.rows[k]
		r.table.add(rs[0].Transport, rs[0].Fabric,
			statRows(rs, func(r FailureRow) float64 { return r.BeforeGbps }).cell(f2),
			statRows(rs, func(r FailureRow) float64 { return r.AfterGbps }).cell(f2), f2(rs[0].SurvivingGbps),
			statRows(rs, func(r FailureRow) float64 { return r.AfterFraction }).cell(pct),
			recoverCell(rs),
			errorsCell(rs, func(r FailureRow) (int, string) { return r.Errors, r.Error }),
			statRows(rs, func(r FailureRow) float64 { return float64(r.Retransmits) }).cell(n0),
			statRows(rs, func(r FailureRow) float64 { return float64(r.Timeouts) }).cell(n0),
			dataCellRows(rs, func(r FailureRow) (bool, string) { return r.DataOK, r.Error }))
	}
	if rs, ok := g.rows[metaroceLossy.kind.String()+metaroceLossy.fabric()]; ok {
		errs := statRows(rs, func(r FailureRow) float64 {
			if r.Error != "" {
				return float64(max(r.Errors, 1))
			}
			return float64(r.Errors)
		})
		r.Checks = append(r.Checks, statCheck("MetaRoCE application errors", "0 in every seed", errs, goal{}, n0))
		r.Checks = append(r.Checks, statCheck("MetaRoCE goodput after the failure", ">= 90% of the surviving planes' capacity, median and every seed",
			statRows(rs, func(r FailureRow) float64 { return r.AfterFraction }), goal{median: 0.9, floor: 0.9, atLeast: true}, pct))
		// "A few RTTs" after the fabric stops black-holing: the detection
		// delay is the fabric's, not the transport's.
		limit := float64(first.Detection)/float64(first.BaseRTT) + 10
		rec := statRows(rs, func(r FailureRow) float64 {
			if r.Recover < 0 {
				return math.Inf(1)
			}
			return r.RecoverRTTs
		})
		r.Checks = append(r.Checks, statCheck("MetaRoCE time to recover",
			fmt.Sprintf("<= detection delay + 10 base RTTs (%.0f RTTs), median and every seed", limit), rec, goal{median: limit, floor: limit}, f1))
	}
	for _, row := range rows {
		if row.Error != "" || row.Errors > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%s %s, seed %d: %d application errors %s", row.Transport, row.Fabric, row.Seed, row.Errors, row.Error))
		}
	}
	for i, k := range g.keys {
		fr := g.rows[k][0] // the first seed's series
		fig := figure{file: "plane-failure-" + fr.Transport, title: fmt.Sprintf("Plane %d of %d fails (%s, %s, seed %d)", fr.FailedPlane, fr.Planes, fr.Transport, fr.Fabric, fr.Seed),
			xlabel: "time since start (us)", ylabel: "goodput (Gb/s)", legendBottom: true, legendLeft: true}
		if i == 0 {
			fig.file = "plane-failure"
		}
		fig.lines = append(fig.lines, figLine{name: "goodput", x: fr.Times, y: fr.Goodput, color: 1})
		if n := len(fr.Times); n > 0 {
			surv := 0.9 * fr.SurvivingGbps
			fig.lines = append(fig.lines, figLine{name: "90% of surviving capacity", x: []float64{0, fr.Times[n-1]}, y: []float64{surv, surv}, dashed: true, color: -1})
		}
		fig.vlines = append(fig.vlines, figMark{x: fr.FailAt.Micros(), label: "plane fails"})
		r.plots = append(r.plots, fig)
		r.Series = append(r.Series, Series{Plot: fig.file, Name: fr.Transport + " goodput", X: fr.Times, Y: fr.Goodput})
	}
	return r, nil
}

func recoverCell(rs []FailureRow) string {
	never := 0
	var xs []float64
	for _, r := range rs {
		if r.Recover < 0 {
			never++
			continue
		}
		xs = append(xs, r.RecoverRTTs)
	}
	s := statOf(xs)
	switch {
	case never == len(rs):
		return "never"
	case never > 0:
		return fmt.Sprintf("%s RTTs; never in %d of %d", s.cell(f1), never, len(rs))
	}
	return s.cell(f1) + " RTTs"
}

// failedPlane returns the plane the lab's timeline takes down, and when.
func failedPlane(lab *labs.Lab) (int, sim.Time, bool) {
	for _, f := range lab.Faults {
		if f.Target == labs.TargetPlane && f.Action == labs.ActionDown {
			return f.Plane, f.At, true
		}
	}
	return 0, 0, false
}

func failureRun(p failureParams, sd side, pt Point) (FailureRow, error) {
	var buckets []int64 // application bytes completed per sample, from time 0
	add := func(now sim.Time, bytes int) {
		i := int(now / p.sample)
		for len(buckets) <= i {
			buckets = append(buckets, 0)
		}
		buckets[i] += int64(bytes)
	}
	run, err := pt.run(probe{onMessage: add})
	if err != nil {
		return FailureRow{}, err
	}
	plane, at, ok := failedPlane(run.lab)
	if !ok {
		return FailureRow{}, fmt.Errorf("%s: the lab fails no plane", pt.Lab)
	}
	topo := run.lab.Topology()
	linkPlane := run.lab.LinkPlanes()
	hosts := map[string]bool{}
	for _, h := range topo.Hosts {
		hosts[h.Name] = true
	}
	var surviving float64
	for _, k := range topo.Links {
		if (hosts[k.A.Node] || hosts[k.B.Node]) && linkPlane[k.Name] != plane {
			surviving += k.Params.Rate
		}
	}
	res := run.res
	row := FailureRow{Transport: sd.kind.String(), Fabric: sd.fabric(), Seed: pt.Seed, Command: pt.Command(),
		Planes: topo.Planes, FailedPlane: plane, FailAt: at, SurvivingGbps: surviving / 1e9,
		Detection: run.lab.DetectionDelay, GoodputGbps: res.GoodputGbps, Errors: res.Errors, Error: errText(run.err),
		Retransmits: res.Retransmits, Timeouts: res.Timeouts, DataOK: res.Check.OK, Sanity: run.sanityFailure(), Recover: -1}
	switch {
	case row.Detection == 0:
		row.Detection = fabric.DefaultDetectionDelay
	case row.Detection < 0:
		row.Detection = 0
	}
	row.BaseRTT = labBaseRTT(run.lab)
	end := run.t0 + p.duration
	n := int(end / p.sample)
	for len(buckets) < n {
		buckets = append(buckets, 0)
	}
	buckets = buckets[:n]
	gb := func(i int) float64 { return float64(buckets[i]) * 8 / float64(p.sample) }
	mean := func(from, to int) float64 {
		if to <= from {
			return 0
		}
		var s float64
		for i := from; i < to; i++ {
			s += gb(i)
		}
		return s / float64(to-from)
	}
	fail := int(at / p.sample)
	row.BeforeGbps = mean(int((run.t0+at/5)/p.sample), fail)
	row.AfterGbps = mean(n-(n-fail)/3, n)
	row.AfterFraction = row.AfterGbps / row.SurvivingGbps
	for i := 0; i < n; i++ {
		row.Times = append(row.Times, (sim.Time(i) * p.sample).Micros())
		row.Goodput = append(row.Goodput, gb(i))
	}
	// Recovery: the first bucket after the failure from which the 3-bucket
	// average stays at or above 90% of the surviving capacity.
	thr := 0.9 * row.SurvivingGbps
	rec := -1
	for j := n - 3; j >= fail; j-- {
		if (gb(j)+gb(j+1)+gb(j+2))/3 < thr {
			break
		}
		rec = j
	}
	if rec >= 0 {
		row.Recover = sim.Time(rec)*p.sample - at
		row.RecoverRTTs = float64(row.Recover) / float64(row.BaseRTT)
	}
	return row, nil
}

// labBaseRTT is the round trip of an unloaded path between hosts on
// different leaves of a leaf/spine lab (two host links and two fabric
// links each way; one switch and two host links without fabric links): a
// full data packet (4096-byte payload) out and a small ACK back, each
// serialized once per hop.
func labBaseRTT(lab *labs.Lab) sim.Time {
	topo := lab.Topology()
	hosts := map[string]bool{}
	for _, h := range topo.Hosts {
		hosts[h.Name] = true
	}
	var host, fab *fabric.LinkParams
	for i := range topo.Links {
		k := &topo.Links[i]
		switch {
		case hosts[k.A.Node] || hosts[k.B.Node]:
			if host == nil {
				host = &k.Params
			}
		case fab == nil:
			fab = &k.Params
		}
	}
	if host == nil {
		return 0
	}
	const data, ack = 4096 + 64 + 28, 128 // payload, transport headers (approx.), IPv4/UDP
	hop := func(p *fabric.LinkParams) float64 {
		return float64(2*p.Delay) + serialize(data, p.Rate) + serialize(ack, p.Rate)
	}
	rtt := 2 * hop(host)
	if fab != nil {
		rtt += 2 * hop(fab)
	}
	return sim.Time(rtt)
}
