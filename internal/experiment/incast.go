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
		Name:   "incast",
		Title:  "N-to-1 incast for N = 8, 32, 63: RTTs until the senders settle to fair share, peak queue, Jain fairness",
		Claim:  "with receiver-driven fair-share rate hints, incast resolves in one or two round trips",
		Target: "MetaRoCE senders at fair share within 2 RTTs",
		run:    runIncast,
	})
}

// IncastRow is one (N, transport) incast run.
type IncastRow struct {
	Senders   int    `json:"senders"`
	Transport string `json:"transport"`
	// SettleRTTs is how many base RTTs after the senders start every
	// sender is at fair share for the rest of the run (see settleIndex);
	// -1 if some sender never settles.
	SettleRTTs float64  `json:"settle_rtts"`
	Settle     sim.Time `json:"settle_ns"`
	// SendSettleRTTs is the same measure on what each sender put on the
	// wire (its NIC's bytes sent on the connection, retransmissions
	// included) against the senders' second-half aggregate / N: how long
	// until the senders' own rates sit at fair share, which is what the
	// receiver's rate hint steers. The delivered-bytes figure also waits
	// for the first flight's queue to drain.
	SendSettleRTTs float64 `json:"send_settle_rtts"`
	// Utilization is the receiver link's data throughput over the second
	// half of the run as a fraction of its rate.
	Utilization float64 `json:"utilization"`
	// PeakQueue is the largest queue at the receiver's downlink (the
	// bottleneck) in bytes; QueueDrops the packets it dropped.
	PeakQueue  int    `json:"peak_queue_bytes"`
	QueueDrops uint64 `json:"queue_drops"`
	// Jain is Jain's fairness index of the bytes each sender delivered
	// over the whole run; JainLate over its second half.
	Jain     float64 `json:"jain"`
	JainLate float64 `json:"jain_second_half"`
	// Retransmits and Timeouts are the transports' counters.
	Retransmits uint64 `json:"retransmits"`
	Timeouts    uint64 `json:"timeouts"`
	Errors      int    `json:"app_errors"`
	Error       string `json:"error,omitempty"`
	DataOK      bool   `json:"data_ok"`
}

type incastParams struct {
	bed      bed
	senders  []int
	duration sim.Time
	size, qd int
	sample   sim.Time
}

func incastParamsFor(cfg Config) incastParams {
	b := defaultBed("incast", cfg.Seed)
	b.payload = cfg.Payload
	b.leaves, b.hpl, b.spines = 4, 16, 4
	p := incastParams{bed: b, senders: []int{8, 32, 63}, duration: 2 * sim.Millisecond, size: 64 << 10, qd: 16}
	switch cfg.Scale {
	case Quick:
		p.duration = sim.Millisecond
	case Tiny:
		p.bed.leaves, p.bed.hpl, p.bed.spines = 2, 4, 2
		p.senders = []int{2, 7}
		p.duration = 300 * sim.Microsecond
		p.size = 16 << 10
		p.qd = 8
	}
	p.sample = p.bed.baseRTT() / 2
	return p
}

// incastSenders picks n senders spread over the leaves, round robin,
// leaving out the receiver h0.
func incastSenders(b bed, n int) []string {
	var out []string
	for k := 0; len(out) < n && k < b.hpl; k++ {
		for l := 1; l <= b.leaves && len(out) < n; l++ {
			leaf := l % b.leaves
			h := leaf*b.hpl + k
			if h == 0 {
				continue
			}
			out = append(out, fmt.Sprintf("h%d", h))
		}
	}
	return out
}

type incastRun struct {
	row IncastRow
	// rtts are sample times in base RTTs since the start; rates[i] is
	// sender i's delivered rate (Gb/s) over a sliding window; fair the
	// fair share (Gb/s); queue the bottleneck queue (KiB).
	rtts  []float64
	rates [][]float64
	fair  float64
	queue []float64
}

func runIncast(cfg Config) (*Report, error) {
	p := incastParamsFor(cfg)
	type icase struct {
		n    int
		kind transport.Kind
	}
	var cases []icase
	for _, k := range []transport.Kind{transport.MetaRoCE, transport.RoCEv2} {
		for _, n := range p.senders {
			cases = append(cases, icase{n, k})
		}
	}
	jobs := make([]job[incastRun], len(cases))
	for i, c := range cases {
		c := c
		jobs[i] = job[incastRun]{name: fmt.Sprintf("%v %d-to-1", c.kind, c.n), run: func() (incastRun, error) { return incastOne(p, c.n, c.kind) }}
	}
	runs, err := runJobs(cfg, "incast", jobs)
	if err != nil {
		return nil, err
	}
	rows := make([]IncastRow, len(runs))
	for i := range runs {
		rows[i] = runs[i].row
	}
	rtt := p.bed.baseRTT()
	r := &Report{Rows: rows}
	r.Setup = []string{
		p.bed.describe(),
		fmt.Sprintf("workload: N senders spread over the leaves WRITE %s messages (%d in flight each) to h0 for %v (%.0f base RTTs)",
			sizeString(p.size), p.qd, p.duration, float64(p.duration)/float64(rtt)),
		fmt.Sprintf("settled (delivered): from time ts on, every sender's delivered bytes (IPv4 bytes of its data packets at the receiver, sampled every %v) stay within 2 packets + 10%% of the fair-share line (second-half aggregate / N) through the end of the run; the figure is ts in base RTTs after the senders start", p.sample),
		"settled (sent): the same test on the bytes each sender's NIC put on the wire for its connection to h0 (retransmissions included): when the senders' own rates sit at fair share, which the receiver's rate hint steers",
		"bottleneck: the receiver's downlink h0-p0 (leaf to host)",
		rocev2Timeout,
	}
	if cfg.Scale != Full {
		r.Setup = append(r.Setup, fmt.Sprintf("scaled down (%s scale): fewer hosts and senders, shorter runs", cfg.Scale))
	}
	r.table = Table{Columns: []string{"N", "transport", "settle RTTs (delivered)", "settle RTTs (sent)", "utilization", "peak queue", "queue drops", "Jain", "Jain 2nd half", "retx", "timeouts", "app errors", "data"}}
	for _, row := range rows {
		settle := "never"
		if row.SettleRTTs >= 0 {
			settle = fmt.Sprintf("%.1f", row.SettleRTTs)
		}
		data := "ok"
		if !row.DataOK {
			data = "FAIL"
			if row.Error != "" {
				data = "not checked"
			}
		}
		sendSettle := "never"
		if row.SendSettleRTTs >= 0 {
			sendSettle = fmt.Sprintf("%.1f", row.SendSettleRTTs)
		}
		r.table.add(fmt.Sprint(row.Senders), row.Transport, settle, sendSettle, pct(row.Utilization), kib(row.PeakQueue),
			fmt.Sprint(row.QueueDrops), f3(row.Jain), f3(row.JainLate), fmt.Sprint(row.Retransmits), fmt.Sprint(row.Timeouts),
			errCell(row.Errors, row.Error), data)
	}
	for _, row := range rows {
		if row.Transport != transport.MetaRoCE.String() {
			continue
		}
		v := row.SettleRTTs
		meas := fmt.Sprintf("%.1f RTTs", v)
		if v < 0 {
			v, meas = math.Inf(1), "never"
		}
		if sv := row.SendSettleRTTs; sv >= 0 {
			sc := check(fmt.Sprintf("MetaRoCE %d-to-1 senders' rates settle to fair share", row.Senders), "<= 2 RTTs", sv, 2, false, fmt.Sprintf("%.1f RTTs", sv))
			if !sc.Met {
				sc.Note = fmt.Sprintf("missed by %.1f RTTs", sv-2)
			}
			r.Checks = append(r.Checks, sc)
		} else {
			r.Checks = append(r.Checks, Check{What: fmt.Sprintf("MetaRoCE %d-to-1 senders' rates settle to fair share", row.Senders),
				Target: "<= 2 RTTs", Measured: "never", Value: -1, Note: "some sender's sending rate never stayed within the fair-share band"})
		}
		c := check(fmt.Sprintf("MetaRoCE %d-to-1 delivered rates settle to fair share", row.Senders), "<= 2 RTTs", v, 2, false, meas)
		if math.IsInf(v, 1) {
			c.Value = -1
			c.Note = "some sender never stayed within the fair-share band"
		} else if !c.Met {
			c.Note = fmt.Sprintf("missed by %.1f RTTs", v-2)
		}
		r.Checks = append(r.Checks, c)
		r.Notes = append(r.Notes, fmt.Sprintf("MetaRoCE %d-to-1: the bottleneck queue peaked at %s, %.1f base RTTs of line rate to drain; %d queue drops, %d retransmission timeouts",
			row.Senders, kib(row.PeakQueue), float64(serialize(row.PeakQueue, p.bed.rate))/float64(rtt), row.QueueDrops, row.Timeouts))
		if row.Errors > 0 || row.Error != "" {
			r.Notes = append(r.Notes, fmt.Sprintf("MetaRoCE %d-to-1: %d application errors %s", row.Senders, row.Errors, row.Error))
		}
	}
	// Per-sender rates for the smallest N of each transport; the queue for
	// every run.
	qfig := figure{file: "incast-queue", title: "Bottleneck queue during incast", xlabel: "time (base RTTs)", ylabel: "queue at h0's downlink (KiB)"}
	for i, run := range runs {
		c := cases[i]
		qfig.lines = append(qfig.lines, figLine{name: fmt.Sprintf("%v N=%d", c.kind, c.n), x: run.rtts, y: run.queue, dashed: c.kind == transport.RoCEv2})
		if c.n != p.senders[0] {
			continue
		}
		file := "incast"
		if c.kind != transport.MetaRoCE {
			file = "incast-" + c.kind.String()
		}
		fig := figure{file: file, title: fmt.Sprintf("%d-to-1 incast, per-sender delivered rate (%v)", c.n, c.kind),
			xlabel: "time (base RTTs)", ylabel: "delivered rate (Gb/s)"}
		// The first rateRTTs base RTTs: where the incast resolves.
		const rateRTTs = 60
		k := len(run.rtts)
		for k > 0 && run.rtts[k-1] > rateRTTs {
			k--
		}
		fig.title += fmt.Sprintf(", first %d RTTs", rateRTTs)
		for s, rate := range run.rates {
			fig.lines = append(fig.lines, figLine{name: fmt.Sprintf("sender %d", s+1), x: run.rtts[:k], y: rate[:k]})
			r.Series = append(r.Series, Series{Plot: file, Name: fmt.Sprintf("sender %d", s+1), X: run.rtts, Y: rate})
		}
		if k > 0 {
			fig.lines = append(fig.lines, figLine{name: "fair share", x: []float64{0, run.rtts[k-1]}, y: []float64{run.fair, run.fair}, dashed: true, color: -1})
		}
		r.plots = append(r.plots, fig)
	}
	r.plots = append(r.plots, qfig)
	return r, nil
}

func incastOne(p incastParams, n int, kind transport.Kind) (incastRun, error) {
	b := p.bed
	tb, err := b.build()
	if err != nil {
		return incastRun{}, err
	}
	run := incastRun{row: IncastRow{Senders: n, Transport: kind.String(), SettleRTTs: -1, Settle: -1, SendSettleRTTs: -1}}
	senders := incastSenders(b, n)
	if len(senders) != n {
		return run, fmt.Errorf("incast: %d senders asked, the bed has %d hosts", n, b.hosts())
	}
	bottleneck, err := tb.net.LinkPort("h0-p0", fabric.BtoA)
	if err != nil {
		return run, err
	}
	tr := newTraffic(tb.cl.NICs)
	var queue []int
	var t0 sim.Time = -1
	var s *sampler
	done := false
	var res *workload.Result
	var runErr error
	if err := workload.Start(tb.cl, workload.Spec{
		Name: workload.Incast, Transport: kind, Size: p.size, QueueDepth: p.qd,
		From: senders, To: []string{"h0"}, Duration: p.duration, Seed: b.seed, Payload: b.payload, Timeout: 50 * p.duration,
	}, func(r *workload.Result, e error) { res, runErr, done = r, e, true }); err != nil {
		return run, err
	}
	want := 2 * n
	var poll sim.Timer
	poll.Init(func(now sim.Time, _ any) {
		if done {
			return
		}
		if established(tb) == want {
			t0 = now
			s = startSampler(tb.loop, t0, p.sample, t0+p.duration, func(now sim.Time) {
				tr.sample(now)
				queue = append(queue, bottleneck.QueueBytes())
			})
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
		return run, fmt.Errorf("%v: %w", kind, workload.ErrStalled)
	}
	if res == nil {
		return run, runErr
	}
	row := &run.row
	if runErr != nil {
		row.Error = runErr.Error()
	}
	row.Errors, row.Retransmits, row.Timeouts, row.DataOK = res.Errors, res.Retransmits, res.Timeouts, res.Check.OK
	snap := tb.net.Counters()
	lc, _ := snap.Link("h0-p0", fabric.BtoA)
	row.PeakQueue, row.QueueDrops = lc.QueueMaxBytes, lc.Drops[fabric.DropQueueFull]
	if t0 < 0 || len(tr.times) < 4 {
		return run, fmt.Errorf("%v: the incast never started", kind)
	}
	// The receiver's connection ends, one per sender, in sender order.
	// The senders' ends: each sender's connection to h0.
	var cum, sent [][]uint64
	for _, name := range senders {
		for _, t := range tr.tracks {
			if h := hostByAddr(tb, t.conn.Peer()); t.nic == 0 && h >= 0 && tb.cl.Hosts[h] == name {
				cum = append(cum, t.rx)
			}
			if t.nic >= 0 && t.nic < len(tb.cl.Hosts) && tb.cl.Hosts[t.nic] == name && hostByAddr(tb, t.conn.Peer()) == 0 {
				sent = append(sent, t.tx)
			}
		}
	}
	if len(cum) != n || len(sent) != n {
		return run, fmt.Errorf("%v: found %d receiver and %d sender connections for %d senders", kind, len(cum), len(sent), n)
	}
	m := len(tr.times)
	half := tr.index(t0 + p.duration/2)
	if half >= m-1 {
		half = m / 2 // the run ended early (failed): use what was sampled
	}
	agg := make([]uint64, m)
	for _, c := range cum {
		for i := range agg {
			agg[i] += c[i]
		}
	}
	aggRate := float64(agg[m-1]-agg[half]) / float64(tr.times[m-1]-tr.times[half]) // bytes per ns
	row.Utilization = aggRate * 8 / b.rate * 1e9
	fair := aggRate / float64(n)
	var whole, late []float64
	for _, c := range cum {
		whole = append(whole, float64(c[m-1]-c[0]))
		late = append(late, float64(c[m-1]-c[half]))
	}
	row.Jain, row.JainLate = jain(whole), jain(late)
	pkt := float64(b.mtu + 64 + 28)
	k := settleIndex(tr.times, cum, fair, 2*pkt, 0.1)
	rtt := b.baseRTT()
	if k >= 0 {
		row.Settle = tr.times[k] - t0
		row.SettleRTTs = float64(row.Settle) / float64(rtt)
	}
	var sentAgg uint64
	for _, c := range sent {
		sentAgg += c[m-1] - c[half]
	}
	sendFair := float64(sentAgg) / float64(tr.times[m-1]-tr.times[half]) / float64(n)
	if ks := settleIndex(tr.times, sent, sendFair, 2*pkt, 0.1); ks >= 0 {
		row.SendSettleRTTs = float64(tr.times[ks]-t0) / float64(rtt)
	}
	// Series: rates over a sliding window of 4 samples (2 RTTs).
	const win = 4
	run.fair = fair * 8
	for i := 0; i < m; i++ {
		run.rtts = append(run.rtts, float64(tr.times[i]-t0)/float64(rtt))
		run.queue = append(run.queue, float64(queue[i])/1024)
	}
	run.rates = make([][]float64, n)
	for s, c := range cum {
		for i := 0; i < m; i++ {
			j := max(0, i-win)
			run.rates[s] = append(run.rates[s], gbpsBetween(tr.times, c, j, i))
		}
	}
	return run, nil
}

// settleIndex returns the first sample k, in the first half of the
// samples, such that for every sender and every later sample j the bytes
// the sender delivered between k and j are within slackBytes + slackFrac x
// ideal of the fair share's ideal = fair x (t_j - t_k); -1 if there is
// none. Requiring k in the first half keeps a few samples at the end, too
// short to tell, from counting as settled.
func settleIndex(times []sim.Time, cum [][]uint64, fair, slackBytes, slackFrac float64) int {
	m := len(times)
	for k := 0; k < m/2; k++ {
		ok := true
		for _, c := range cum {
			for j := k + 1; j < m && ok; j++ {
				ideal := fair * float64(times[j]-times[k])
				if math.Abs(float64(c[j]-c[k])-ideal) > slackBytes+slackFrac*ideal {
					ok = false
				}
			}
			if !ok {
				break
			}
		}
		if ok {
			return k
		}
	}
	return -1
}

// hostByAddr returns the cluster index of the host with address a, or -1.
func hostByAddr(tb *testbed, a netip.Addr) int {
	for i, n := range tb.cl.NICs {
		if n.Addr() == a {
			return i
		}
	}
	return -1
}
