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
		Name:  "plane-failure",
		Title: "one of 4 planes fails mid-run: throughput over time, time to recover, application errors",
		Claim: "after a simulated plane failure traffic redistributes to the other planes with no application involvement and no operator action",
		Target: "MetaRoCE: zero application errors, and throughput back to >= 90% of the surviving planes' capacity within a few RTTs " +
			"(after the fabric's failure-detection delay)",
		run: runPlaneFailure,
	})
}

// FailureRow is one transport's plane-failure run.
type FailureRow struct {
	Transport string `json:"transport"`
	Planes    int    `json:"planes"`
	// FailedPlane fails at FailAt (virtual time since the workload
	// started).
	FailedPlane int      `json:"failed_plane"`
	FailAt      sim.Time `json:"fail_at_ns"`
	// BeforeGbps and AfterGbps are the receivers' data throughput (IPv4
	// bytes of data packets) before the failure and over the last third
	// of the run.
	BeforeGbps float64 `json:"before_gbps"`
	AfterGbps  float64 `json:"after_gbps"`
	// SurvivingGbps is the capacity of the planes left: hosts x
	// (planes-1) x rate. AfterFraction = AfterGbps / SurvivingGbps.
	SurvivingGbps float64 `json:"surviving_capacity_gbps"`
	AfterFraction float64 `json:"after_fraction_of_surviving"`
	// Recover is the time from the failure until throughput, averaged
	// over a sliding window of three samples, reaches 90% of the surviving
	// capacity and stays there to the end of the run; -1 if it never
	// does. RecoverRTTs is the same in base RTTs.
	Recover     sim.Time `json:"recover_ns"`
	RecoverRTTs float64  `json:"recover_rtts"`
	// Detection is the fabric's failure-detection delay: until it passes,
	// switches keep hashing onto the dead plane's links.
	Detection sim.Time `json:"detection_ns"`
	// Errors counts failed completions; Error is the run's error, if any.
	Errors      int    `json:"app_errors"`
	Error       string `json:"error,omitempty"`
	Retransmits uint64 `json:"retransmits"`
	Timeouts    uint64 `json:"timeouts"`
	DataOK      bool   `json:"data_ok"`
}

type failureParams struct {
	bed            bed
	duration, fail sim.Time
	size, qd       int
	sample         sim.Time
	plane          int
	conns          int
}

func planeFailureParams(cfg Config) failureParams {
	b := defaultBed("plane-failure", cfg.Seed)
	b.payload = cfg.Payload
	b.planes, b.leaves, b.hpl, b.spines = 4, 2, 8, 2
	b.detect = 100 * sim.Microsecond
	p := failureParams{bed: b, duration: 3 * sim.Millisecond, fail: sim.Millisecond, size: 64 << 10, qd: 16,
		sample: 10 * sim.Microsecond, plane: 1, conns: 1}
	switch cfg.Scale {
	case Quick:
		p.duration, p.fail = 1500*sim.Microsecond, 500*sim.Microsecond
	case Tiny:
		p.bed.leaves, p.bed.hpl = 2, 2
		p.duration, p.fail = 600*sim.Microsecond, 200*sim.Microsecond
		p.bed.detect = 20 * sim.Microsecond
		p.size = 16 << 10
		p.sample = 5 * sim.Microsecond
	}
	return p
}

// failureRun is one transport's run with its time series.
type failureRun struct {
	row   FailureRow
	times []float64   // us since the workload started
	total []float64   // data Gb/s
	plane [][]float64 // [plane] Gb/s received (data and ACKs)
}

func runPlaneFailure(cfg Config) (*Report, error) {
	p := planeFailureParams(cfg)
	kinds := []transport.Kind{transport.MetaRoCE, transport.RoCEv2}
	jobs := make([]job[failureRun], len(kinds))
	for i, k := range kinds {
		k := k
		jobs[i] = job[failureRun]{name: k.String(), run: func() (failureRun, error) { return failureOne(p, k) }}
	}
	runs, err := runJobs(cfg, "plane-failure", jobs)
	if err != nil {
		return nil, err
	}
	rows := make([]FailureRow, len(runs))
	for i, fr := range runs {
		rows[i] = fr.row
	}
	r := &Report{Rows: rows}
	rtt := p.bed.baseRTT()
	r.Setup = []string{
		p.bed.describe(),
		fmt.Sprintf("workload: permutation, every host WRITEs %s messages (%d in flight) to one other host for %v; plane %d (every link in it) fails %v after the workload starts; the fabric notices after %v (switches black-hole until then)",
			sizeString(p.size), p.qd, p.duration, p.plane, p.fail, p.bed.detect),
		fmt.Sprintf("throughput: IPv4 bytes of data packets arriving at the receivers, sampled every %v (%.1f base RTTs)", p.sample, float64(p.sample)/float64(rtt)),
		"RoCEv2 runs for comparison: a queue pair uses one plane (chosen at random per queue pair); " + rocev2Timeout,
	}
	if cfg.Scale != Full {
		r.Setup = append(r.Setup, fmt.Sprintf("scaled down (%s scale): fewer hosts, shorter run", cfg.Scale))
	}
	r.table = Table{Columns: []string{"transport", "before Gb/s", "after Gb/s", "surviving cap Gb/s", "after/surviving", "recover", "recover RTTs", "app errors", "retx", "timeouts", "data"}}
	for _, row := range rows {
		rec, rtts := "never", "-"
		if row.Recover >= 0 {
			rec, rtts = row.Recover.String(), fmt.Sprintf("%.1f", row.RecoverRTTs)
		}
		data := "ok"
		if !row.DataOK {
			data = "FAIL"
			if row.Error != "" {
				data = "not checked"
			}
		}
		r.table.add(row.Transport, f2(row.BeforeGbps), f2(row.AfterGbps), f2(row.SurvivingGbps), pct(row.AfterFraction),
			rec, rtts, errCell(row.Errors, row.Error), fmt.Sprint(row.Retransmits), fmt.Sprint(row.Timeouts), data)
	}
	for _, row := range rows {
		if row.Transport != transport.MetaRoCE.String() {
			if row.Errors > 0 || row.Error != "" {
				r.Notes = append(r.Notes, fmt.Sprintf("%s: %d application errors; %s", row.Transport, row.Errors, row.Error))
			}
			continue
		}
		errs := float64(row.Errors)
		if row.Error != "" {
			errs = math.Max(errs, 1)
		}
		c := check("MetaRoCE application errors", "0", errs, 0, false, fmt.Sprint(row.Errors))
		if row.Error != "" {
			c.Note = row.Error
		}
		r.Checks = append(r.Checks, c)
		c = check("MetaRoCE throughput after the failure", ">= 90% of the surviving planes' capacity", row.AfterFraction, 0.9, true, pct(row.AfterFraction))
		if !c.Met {
			c.Note = fmt.Sprintf("missed by %.1f points", 100*(0.9-row.AfterFraction))
		}
		r.Checks = append(r.Checks, c)
		// "A few RTTs" after the fabric stops black-holing: the detection
		// delay is the fabric's, not the transport's.
		limit := float64(p.bed.detect)/float64(rtt) + 10
		v := row.RecoverRTTs
		if row.Recover < 0 {
			v = math.Inf(1)
		}
		c = check("MetaRoCE time to recover", fmt.Sprintf("<= detection delay + 10 RTTs (%.0f RTTs)", limit), v, limit, false,
			fmt.Sprintf("%v (%.1f RTTs)", row.Recover, row.RecoverRTTs))
		if row.Recover < 0 {
			c.Measured, c.Value = "never", -1
			c.Note = "throughput never held 90% of the surviving capacity"
		} else if !c.Met {
			c.Note = fmt.Sprintf("missed by %.1f RTTs", v-limit)
		}
		r.Checks = append(r.Checks, c)
	}
	for i, fr := range runs {
		name := fr.row.Transport
		fig := figure{file: "plane-failure-" + name, title: fmt.Sprintf("Plane %d of %d fails (%s)", p.plane, p.bed.planes, name),
			xlabel: "time since start (us)", ylabel: "received (Gb/s)", legendBottom: true, legendLeft: true}
		fig.lines = append(fig.lines, figLine{name: "data, all planes", x: fr.times, y: fr.total, color: 1})
		for pl := range fr.plane {
			fig.lines = append(fig.lines, figLine{name: fmt.Sprintf("plane %d (data+ACKs)", pl), x: fr.times, y: fr.plane[pl], color: pl + 2})
		}
		surv := fr.row.SurvivingGbps
		fig.lines = append(fig.lines, figLine{name: "90% of surviving capacity", x: []float64{0, fr.times[len(fr.times)-1]}, y: []float64{0.9 * surv, 0.9 * surv}, dashed: true, color: -1})
		fig.vlines = append(fig.vlines, figMark{x: p.fail.Micros(), label: "plane fails"})
		if i == 0 {
			fig.file = "plane-failure"
		}
		r.plots = append(r.plots, fig)
		r.Series = append(r.Series, Series{Plot: fig.file, Name: name + " data", X: fr.times, Y: fr.total})
	}
	return r, nil
}

func failureOne(p failureParams, kind transport.Kind) (failureRun, error) {
	b := p.bed
	tb, err := b.build()
	if err != nil {
		return failureRun{}, err
	}
	fr := failureRun{row: FailureRow{Transport: kind.String(), Planes: b.planes, FailedPlane: p.plane, FailAt: p.fail,
		SurvivingGbps: float64(b.hosts()*(b.planes-1)) * b.rate / 1e9, Detection: b.detect}}
	tr := newTraffic(tb.cl.NICs)
	var t0 sim.Time = -1
	var s *sampler
	var failErr error
	done := false
	var res *workload.Result
	var runErr error
	err = workload.Start(tb.cl, workload.Spec{
		Name: workload.Permutation, Transport: kind, Size: p.size, QueueDepth: p.qd, Conns: p.conns,
		Duration: p.duration, Seed: b.seed, Payload: b.payload, Timeout: 20 * p.duration,
	}, func(r *workload.Result, e error) { res, runErr, done = r, e, true })
	if err != nil {
		return fr, err
	}
	// The runner posts its first work the moment the last connection is
	// established: anchor the failure and the samples to that moment.
	want := 2 * p.conns * b.hosts()
	var poll sim.Timer
	poll.Init(func(now sim.Time, _ any) {
		if done {
			return
		}
		if established(tb) == want {
			t0 = now
			tb.loop.At(t0+p.fail, func(now sim.Time) { failErr = tb.net.SetPlaneUp(now, p.plane, false) })
			s = startSampler(tb.loop, t0, p.sample, t0+p.duration, tr.sample)
			return
		}
		tb.loop.Arm(&poll, now+100)
	}, nil)
	tb.loop.Arm(&poll, 0)
	for !done && tb.loop.Step() {
	}
	if s != nil {
		s.stop()
	}
	if !done {
		return fr, fmt.Errorf("%v: %w", kind, workload.ErrStalled)
	}
	if failErr != nil {
		return fr, failErr
	}
	if res == nil {
		return fr, runErr
	}
	row := &fr.row
	if runErr != nil {
		row.Error = runErr.Error()
	}
	row.Errors, row.Retransmits, row.Timeouts, row.DataOK = res.Errors, res.Retransmits, res.Timeouts, res.Check.OK
	if t0 < 0 || len(tr.times) < 4 {
		return fr, fmt.Errorf("%v: the workload never started sampling", kind)
	}
	recv := tr.receivers()
	tot := total(recv, len(tr.times))
	n := len(tr.times)
	for i := 1; i < n; i++ {
		fr.times = append(fr.times, (tr.times[i] - t0).Micros())
		fr.total = append(fr.total, gbpsBetween(tr.times, tot, i-1, i))
	}
	fr.plane = make([][]float64, b.planes)
	for pl := range fr.plane {
		cum := make([]uint64, n)
		for i := range cum {
			cum[i] = tr.planeRx[i][pl]
		}
		for i := 1; i < n; i++ {
			fr.plane[pl] = append(fr.plane[pl], gbpsBetween(tr.times, cum, i-1, i))
		}
	}
	fail := tr.index(t0 + p.fail)
	// Before: from a fifth of the way to the failure up to it (skip the
	// ramp).
	row.BeforeGbps = gbpsBetween(tr.times, tot, tr.index(t0+p.fail/5), fail)
	row.AfterGbps = gbpsBetween(tr.times, tot, tr.index(t0+p.duration-(p.duration-p.fail)/3), n-1)
	row.AfterFraction = row.AfterGbps / row.SurvivingGbps
	// Recovery: fr.total[j] is the rate over samples j..j+1; smooth over
	// three intervals and find the first interval after the failure from
	// which the smoothed rate stays at or above 90% of the surviving
	// capacity to the end of the run.
	thr := 0.9 * row.SurvivingGbps
	row.Recover = -1
	rec := -1
	for j := len(fr.total) - 3; j >= fail; j-- {
		if (fr.total[j]+fr.total[j+1]+fr.total[j+2])/3 < thr {
			break
		}
		rec = j
	}
	if rec >= 0 {
		row.Recover = tr.times[rec] - (t0 + p.fail)
		row.RecoverRTTs = float64(row.Recover) / float64(b.baseRTT())
	}
	return fr, nil
}

// established counts the cluster's established connection ends.
func established(tb *testbed) int {
	n := 0
	for _, nic := range tb.cl.NICs {
		for _, c := range nic.Conns() {
			if c.State() == transport.StateEstablished {
				n++
			}
		}
	}
	return n
}
