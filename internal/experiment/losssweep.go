package experiment

import (
	"fmt"
	"math"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

func init() {
	register(Experiment{
		Name:  "loss-sweep",
		Title: "goodput under random loss on every link, MetaRoCE vs RoCEv2 (go-back-N), with RoCEv2 on a lossless PFC fabric for reference",
		Claim: "MetaRoCE keeps ~86% of its loss-free throughput at 1% loss and useful bandwidth up to 10%; RoCEv2 collapses under the same loss",
		Target: "MetaRoCE >= 90% of loss-free goodput at 1% loss and > 50% at 10%; " +
			"RoCEv2 go-back-N visibly collapsing at 1% (below 50% of loss-free)",
		run: runLossSweep,
	})
}

// LossRates are the random loss probabilities of the sweep, in percent.
var LossRates = []float64{0, 0.1, 0.5, 1, 2, 5, 10}

// Fabric kinds in LossRow.Fabric.
const (
	FabricLossy    = "lossy"
	FabricLossless = "lossless+pfc"
)

// LossRow is one (loss rate, transport, fabric) run of the loss sweep.
type LossRow struct {
	// LossPct is the random loss on every link direction, in percent.
	LossPct   float64 `json:"loss_pct"`
	Transport string  `json:"transport"`
	// Fabric is "lossy" (drop-tail, random loss) or "lossless+pfc" (no
	// random loss, PFC pause instead of queue-full drops).
	Fabric string `json:"fabric"`
	// GoodputGbps is application bytes completed per second over the run,
	// all flows together.
	GoodputGbps float64 `json:"goodput_gbps"`
	// Fraction is GoodputGbps over the same transport's loss-free goodput
	// on the lossy fabric (the 0% row), measured in the same sweep.
	Fraction float64 `json:"fraction_of_loss_free"`
	// Bytes and Elapsed are what the goodput divides.
	Bytes   int64    `json:"bytes"`
	Elapsed sim.Time `json:"elapsed_ns"`
	// Retransmits and Timeouts are the transports' counters.
	Retransmits uint64 `json:"retransmits"`
	Timeouts    uint64 `json:"timeouts"`
	// LossDrops are packets the random loss dropped; QueueDrops packets
	// dropped by full queues.
	LossDrops  uint64 `json:"loss_drops"`
	QueueDrops uint64 `json:"queue_drops"`
	// Errors counts failed completions (application errors); Error is
	// the run's error, if it failed (e.g. a QP out of retries).
	Errors int    `json:"app_errors"`
	Error  string `json:"error,omitempty"`
	// DataOK is the workload's end-to-end data check.
	DataOK bool `json:"data_ok"`
	// PFCPauses counts pause events on the lossless fabric.
	PFCPauses uint64 `json:"pfc_pauses,omitempty"`
}

// lossParams are the loss sweep's sizes at one scale.
type lossParams struct {
	bed      bed
	duration sim.Time
	size     int
	qd       int
	rates    []float64
}

func lossSweepParams(cfg Config) lossParams {
	b := defaultBed("loss-sweep", cfg.Seed)
	p := lossParams{bed: b, duration: 2 * sim.Millisecond, size: 64 << 10, qd: 16, rates: LossRates}
	switch cfg.Scale {
	case Quick:
		p.duration = 500 * sim.Microsecond
	case Tiny:
		p.bed.leaves, p.bed.hpl, p.bed.spines = 2, 1, 2
		p.duration = 100 * sim.Microsecond
		p.size = 16 << 10
		p.qd = 8
		p.rates = []float64{0, 1, 10}
	}
	return p
}

type lossCase struct {
	loss float64 // percent
	kind transport.Kind
	pfc  bool
}

func (c lossCase) name() string {
	fab := FabricLossy
	if c.pfc {
		fab = FabricLossless
	}
	return fmt.Sprintf("%v %s loss %g%%", c.kind, fab, c.loss)
}

func runLossSweep(cfg Config) (*Report, error) {
	p := lossSweepParams(cfg)
	var cases []lossCase
	for _, k := range []transport.Kind{transport.MetaRoCE, transport.RoCEv2} {
		for _, l := range p.rates {
			cases = append(cases, lossCase{loss: l, kind: k})
		}
	}
	cases = append(cases, lossCase{loss: 0, kind: transport.RoCEv2, pfc: true})
	jobs := make([]job[LossRow], len(cases))
	for i, c := range cases {
		c := c
		jobs[i] = job[LossRow]{name: c.name(), run: func() (LossRow, error) { return lossRun(p, c) }}
	}
	rows, err := runJobs(cfg, "loss-sweep", jobs)
	if err != nil {
		return nil, err
	}
	base := map[transport.Kind]float64{}
	for i, c := range cases {
		if c.loss == 0 && !c.pfc {
			base[c.kind] = rows[i].GoodputGbps
		}
	}
	for i, c := range cases {
		if b := base[c.kind]; b > 0 {
			rows[i].Fraction = rows[i].GoodputGbps / b
		}
	}
	r := &Report{Rows: rows}
	r.Setup = []string{
		p.bed.describe(),
		fmt.Sprintf("workload: permutation, every host WRITEs %s messages (%d in flight) to one other host for %v of virtual time; goodput = application bytes completed / time from first post to last completion",
			sizeString(p.size), p.qd, p.duration),
		"loss: netem-style random loss with probability p on every link direction, so data packets and ACKs both see it; a packet between leaves crosses 4 links (end-to-end loss 1-(1-p)^4, 3.9% at p=1%)",
		"fraction: goodput over the same transport's goodput at 0% loss on the same fabric, measured in the same run (same seed)",
		rocev2Timeout,
	}
	r.Setup = append(r.Setup, "reference: RoCEv2 on a lossless fabric — no random loss, PFC pause instead of queue-full drops — its fraction is over RoCEv2's 0% row on the lossy fabric")
	if cfg.Scale != Full {
		r.Setup = append(r.Setup, fmt.Sprintf("scaled down (%s scale): fewer hosts, shorter runs; figures are indicative only", cfg.Scale))
	}
	r.table = Table{Columns: []string{"loss", "transport", "fabric", "goodput Gb/s", "fraction", "retx", "timeouts", "loss drops", "queue drops", "app errors", "data"}}
	for _, row := range rows {
		data := "ok"
		if !row.DataOK {
			data = "FAIL"
			if row.Error != "" {
				data = "not checked"
			}
		}
		loss := fmt.Sprintf("%g%%", row.LossPct)
		if row.Fabric == FabricLossless {
			loss = "none"
		}
		r.table.add(loss, row.Transport, row.Fabric, f2(row.GoodputGbps), f3(row.Fraction),
			fmt.Sprint(row.Retransmits), fmt.Sprint(row.Timeouts), fmt.Sprint(row.LossDrops),
			fmt.Sprint(row.QueueDrops), errCell(row.Errors, row.Error), data)
	}
	lossChecks(r, rows)
	lossPlots(r, rows, p.rates)
	return r, nil
}

// lossRun runs one case.
func lossRun(p lossParams, c lossCase) (LossRow, error) {
	b := p.bed
	b.loss = c.loss / 100
	b.pfc = c.pfc
	tb, err := b.build()
	if err != nil {
		return LossRow{}, err
	}
	res, runErr := workload.Run(tb.cl, workload.Spec{
		Name: workload.Permutation, Transport: c.kind, Size: p.size, QueueDepth: p.qd,
		Duration: p.duration, Seed: b.seed, Timeout: 200 * p.duration,
	})
	row := LossRow{LossPct: c.loss, Transport: c.kind.String(), Fabric: FabricLossy}
	if c.pfc {
		row.Fabric = FabricLossless
	}
	if res == nil {
		return row, runErr
	}
	if runErr != nil {
		row.Error = runErr.Error()
	}
	row.GoodputGbps = res.GoodputGbps
	row.Bytes, row.Elapsed = res.Bytes, res.Elapsed
	row.Retransmits, row.Timeouts = res.Retransmits, res.Timeouts
	row.Errors = res.Errors
	row.DataOK = res.Check.OK
	snap := tb.net.Counters()
	d := snap.Drops()
	row.LossDrops, row.QueueDrops = d[fabric.DropImpairment], d[fabric.DropQueueFull]
	row.PFCPauses = snap.PFCPauses()
	return row, nil
}

// lossFraction returns the fraction of the lossy-fabric row of kind at
// loss l, or NaN.
func lossFraction(rows []LossRow, kind string, l float64) float64 {
	for _, r := range rows {
		if r.Transport == kind && r.Fabric == FabricLossy && r.LossPct == l {
			return r.Fraction
		}
	}
	return math.NaN()
}

func lossChecks(r *Report, rows []LossRow) {
	mr, ro := transport.MetaRoCE.String(), transport.RoCEv2.String()
	if f := lossFraction(rows, mr, 1); !math.IsNaN(f) {
		c := check("MetaRoCE goodput at 1% loss", ">= 90% of loss-free (seeds: ~86%)", f, 0.9, true, pct(f))
		if !c.Met {
			c.Note = fmt.Sprintf("missed by %.1f points", 100*(0.9-f))
		}
		r.Checks = append(r.Checks, c)
	}
	if f := lossFraction(rows, mr, 10); !math.IsNaN(f) {
		c := check("MetaRoCE goodput at 10% loss", "> 50% of loss-free (seeds: useful bandwidth)", f, 0.5, true, pct(f))
		if !c.Met {
			c.Note = fmt.Sprintf("missed by %.1f points", 100*(0.5-f))
		}
		r.Checks = append(r.Checks, c)
	}
	if f := lossFraction(rows, ro, 1); !math.IsNaN(f) {
		c := check("RoCEv2 (go-back-N) goodput at 1% loss", "< 50% of loss-free (collapse)", f, 0.5, false, pct(f))
		if !c.Met {
			c.Note = "go-back-N did not collapse at this scale"
		}
		r.Checks = append(r.Checks, c)
	}
	for _, row := range rows {
		if row.Transport == mr && row.Errors > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("MetaRoCE had %d application errors at %g%% loss", row.Errors, row.LossPct))
		}
		if row.Transport == mr && row.Error != "" {
			r.Notes = append(r.Notes, fmt.Sprintf("MetaRoCE run at %g%% loss failed: %s", row.LossPct, row.Error))
		}
	}
	// What each transport paid per lost packet: selective retransmission
	// resends about one packet per loss; go-back-N resends everything
	// sent after it.
	for _, l := range []float64{1, 10} {
		for _, row := range rows {
			if row.Fabric != FabricLossy || row.LossPct != l || row.LossDrops == 0 {
				continue
			}
			r.Notes = append(r.Notes, fmt.Sprintf("%g%% loss, %s: %d packets lost (data and ACKs), %d data packets retransmitted (%.1f per loss), %d retransmission timeouts",
				l, row.Transport, row.LossDrops, row.Retransmits, float64(row.Retransmits)/float64(row.LossDrops), row.Timeouts))
		}
	}
	for _, row := range rows {
		if row.Fabric == FabricLossless {
			r.Notes = append(r.Notes, fmt.Sprintf("lossless fabric: %d PFC pauses during the RoCEv2 run (%d queue drops)", row.PFCPauses, row.QueueDrops))
		}
		if row.Transport == ro && row.Error != "" {
			r.Notes = append(r.Notes, fmt.Sprintf("RoCEv2 at %g%% loss (%s): %s", row.LossPct, row.Fabric, row.Error))
		}
	}
}

func lossPlots(r *Report, rows []LossRow, rates []float64) {
	ticks := make([]string, len(rates))
	for i, l := range rates {
		ticks[i] = fmt.Sprintf("%g%%", l)
	}
	frac := figure{file: "loss-sweep", title: "Goodput under random loss on every link",
		xlabel: "random loss per link direction", ylabel: "goodput / loss-free goodput", xticks: ticks, ymin: 0, ymax: 1.1}
	abs := figure{file: "loss-sweep-gbps", title: "Goodput under random loss on every link",
		xlabel: "random loss per link direction", ylabel: "goodput (Gb/s)", xticks: ticks, legendBottom: true}
	for ci, kind := range []string{transport.MetaRoCE.String(), transport.RoCEv2.String() + " (go-back-N)"} {
		var xs, fs, gs []float64
		for i, l := range rates {
			for _, row := range rows {
				if row.Fabric == FabricLossy && row.LossPct == l && (row.Transport == kind || row.Transport+" (go-back-N)" == kind) {
					xs, fs, gs = append(xs, float64(i)), append(fs, row.Fraction), append(gs, row.GoodputGbps)
				}
			}
		}
		frac.lines = append(frac.lines, figLine{name: kind, x: xs, y: fs, points: true, color: ci + 1})
		abs.lines = append(abs.lines, figLine{name: kind, x: xs, y: gs, points: true, color: ci + 1})
		r.Series = append(r.Series, Series{Plot: "loss-sweep", Name: kind, X: ratesAt(rates, xs), Y: fs})
	}
	for _, row := range rows {
		if row.Fabric != FabricLossless {
			continue
		}
		x := []float64{0, float64(len(rates) - 1)}
		frac.lines = append(frac.lines, figLine{name: "rocev2, lossless fabric + PFC (no loss)", x: x, y: []float64{row.Fraction, row.Fraction}, dashed: true, color: 3})
		abs.lines = append(abs.lines, figLine{name: "rocev2, lossless fabric + PFC (no loss)", x: x, y: []float64{row.GoodputGbps, row.GoodputGbps}, dashed: true, color: 3})
	}
	frac.lines = append(frac.lines, figLine{name: "seeds: MetaRoCE 86% at 1%", x: []float64{indexOf(rates, 1)}, y: []float64{0.86}, points: true, color: -1})
	r.plots = append(r.plots, frac, abs)
}

func ratesAt(rates, idx []float64) []float64 {
	out := make([]float64, len(idx))
	for i, x := range idx {
		out[i] = rates[int(x)]
	}
	return out
}

func indexOf(rates []float64, v float64) float64 {
	for i, r := range rates {
		if r == v {
			return float64(i)
		}
	}
	return 0
}
