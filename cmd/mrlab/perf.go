package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs/live"
	"github.com/mrlab/mrlab/verbs"
	"github.com/mrlab/mrlab/workload"
	"github.com/mrlab/mrlab/workload/verbsperf"
)

func newPerfCommand() *cli.Command {
	return &cli.Command{
		Name:  "perf",
		Usage: "run an RDMA test (write_bw, send_bw, read_bw, write_lat) between two live lab hosts through their verbs endpoints, with perftest's flags",
		Description: "perf runs itself in the two hosts, the server in --to and the client in --from, each a\n" +
			"program driving its host's NIC through the verbs endpoint as yours would (package verbs).\n" +
			"It takes the same perftest flags as mrlab sim. Every byte is checked unless --verify=false.\n" +
			"The result gives the run's lab time next to its wall time and the lab's worst lateness:\n" +
			"if the lab fell behind the wall clock by more than 1% of the run, its figures are not true\n" +
			"in wall time, the first line says LAGGING and perf exits non-zero, unless --allow-lag.\n" +
			"Ctrl-C ends both sides, and the lab frees what they held.",
		Flags: append([]cli.Flag{runDirFlag(), labFlag(),
			&cli.BoolFlag{Name: "allow-lag", Usage: "exit 0 even if the lab could not keep real time during the run (the result still says so)"},
		}, perfFlags()...),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("perf: unexpected argument %q", c.Args().First())
			}
			req, pt, err := perfRequest(c)
			if err != nil {
				return err
			}
			cl, name, err := client(c)
			if err != nil {
				return err
			}
			// The fabric's counters around the run: what the lab dropped
			// and marked meanwhile, which no client of a NIC can see.
			before, err := cl.Status(c.Context)
			if err != nil {
				return err
			}
			// Ctrl-C kills both sides; the lab closes their connections.
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, srv, err := verbsPerf(ctx, c.String("run-dir"), name, req, perfOptions{Events: c.Bool("use-event"), CQMod: pt.Spec.CQMod, NoPeak: pt.NoPeak}, c.App.ErrWriter)
			if err != nil {
				if ctx.Err() != nil && !errors.Is(err, errLabStopped) {
					if !labAlive(c.String("run-dir"), name) {
						return fmt.Errorf("perf: interrupted; both sides stopped, but lab %s is not running (its process is gone): `mrlab down %s` removes what it left", name, name)
					}
					return errors.New("perf: interrupted; both sides stopped and the lab released what they held")
				}
				return err
			}
			var fabric map[string]uint64
			if after, err := cl.Status(c.Context); err == nil {
				fabric = fabricDelta(before.Engine.Counters, after.Engine.Counters)
			}
			if err := writeOutJSON(pt, liveResult(req, res)); err != nil {
				return err
			}
			return writePerf(c.App.Writer, req, pt.Format, res, srv, fabric, c.Bool("json"), c.Bool("allow-lag"))
		},
	}
}

// fabricDelta is what the lab's fabric counters (live.EngineStatus's
// Counters) grew by, named as sim's workload results name them
// ("drops_fabric link-down").
func fabricDelta(before, after map[string]uint64) map[string]uint64 {
	d := map[string]uint64{}
	for k, v := range after {
		if v <= before[k] {
			continue
		}
		name := k
		if reason, ok := strings.CutPrefix(k, "drops_"); ok {
			name = "drops_fabric " + reason
		}
		d[name] = v - before[k]
	}
	return d
}

// writePerf prints a perf result as perftest prints it (the test
// information, the column header and the result line: BW peak, BW
// average and MsgRate, or the latency statistics), the lab's timing verdict
// first when it lagged, then what perftest cannot say: whether every byte
// arrived intact, the run's lab and wall time, the connection's and the
// fabric's counters, and each side's CPU time per GB moved. With asJSON it
// prints one JSON object instead. It returns the error that makes perf
// exit non-zero: a failed run, unverified data, or a lagging lab without
// allowLag. srv is the server's result (nil: not known); fabric holds the
// lab's fabric counters' growth during the run.
func writePerf(w io.Writer, req live.PerfRequest, f workload.Format, res, srv *verbsperf.Result, fabric map[string]uint64, asJSON, allowLag bool) error {
	var t verbs.Timing
	if res.Timing != nil {
		t = *res.Timing
	}
	status := res.Status
	if status == "ok" && t.Lagging {
		status = "lagging: its figures are not true in wall time (first line)"
	}
	wr := liveResult(req, res)
	r := &Report{}
	if asJSON {
		r.Fact("lagging", "lagging", t.Lagging)
		r.Fact("loop_starved", "loop starved", t.LoopStarved)
		r.Fact("from", "from", req.From)
		r.Fact("to", "to", req.To)
		r.Fact("op", "op", req.Op)
		r.Fact("transport", "transport", res.Transport)
		r.Fact("messages", "messages", res.Messages)
		r.Fact("bytes", "bytes", res.Bytes)
		r.Fact("elapsed", "elapsed (wall time)", res.Elapsed.String())
		if l := wr.Latency; l != nil {
			for _, x := range []struct {
				key string
				v   sim.Time
			}{{"t_min_us", l.Min}, {"t_max_us", l.Max}, {"t_typical_us", l.P50}, {"t_avg_us", l.Mean}, {"t_stdev_us", l.Stdev}, {"percentile_99_us", l.P99}, {"percentile_99.9_us", l.P999}} {
				r.Fact(x.key, x.key, fmt.Sprintf("%.2f", x.v.Micros()))
			}
		} else {
			r.Fact("bw_peak_gbps", "BW peak (Gbit/s)", fmt.Sprintf("%.3f", wr.BWPeakGbps))
			r.Fact("bw_average_gbps", "BW average (Gbit/s)", fmt.Sprintf("%.3f", wr.BWAverageGbps))
			r.Fact("msg_rate_mpps", "MsgRate (Mpps)", fmt.Sprintf("%.6f", wr.MsgRateMpps))
			r.Fact("goodput_gbps", "goodput (Gbit/s)", fmt.Sprintf("%.3f", res.Goodput/1e9))
		}
	} else {
		if t.Lagging || t.LoopStarved || t.ClientStarved() {
			// The first line of the output, before any figure.
			if _, err := fmt.Fprintln(w, t); err != nil {
				return err
			}
		}
		if err := workload.WritePerftest(w, []*workload.Result{wr}, f, false); err != nil {
			return err
		}
	}
	timingFacts(r, t, res, srv)
	verified := "off (--verify=false)"
	switch {
	case res.Verified:
		verified = fmt.Sprintf("every byte of %d messages checked", res.Checked)
	case req.Verify:
		verified = fmt.Sprintf("NOT verified: %d of %d messages checked, %d errors", res.Checked, res.Messages, res.Errors)
		if res.FirstBad != "" {
			verified += " (first: " + res.FirstBad + ")"
		}
	}
	if asJSON {
		r.Fact("verified", "verified", res.Verified)
		r.Fact("errors", "errors", res.Errors)
	} else {
		r.Fact("data", "data", verified)
	}
	r.Fact("status", "status", status)
	counters := perfCounters(res)
	tb := r.Table("counters", "Connection counters (client side)", Col("name", "counter", ""), Col("value", "value", ""))
	for _, k := range slices.Sorted(maps.Keys(counters)) {
		tb.Add(k, counters[k])
	}
	if len(fabric) > 0 {
		ft := r.Table("fabric", "Fabric counters during the run (the whole lab)", Col("name", "counter", ""), Col("value", "value", ""))
		for _, k := range slices.Sorted(maps.Keys(fabric)) {
			ft.Add(k, fabric[k])
		}
	}
	var err error
	if asJSON {
		err = r.WriteJSON(w)
	} else {
		err = r.WriteText(w)
	}
	if err != nil {
		return err
	}
	switch {
	case res.Errors > 0 || res.Status != "ok" || (req.Verify && !res.Verified):
		return fmt.Errorf("perf %s->%s: %s, %d errors, verified=%v", req.From, req.To, res.Status, res.Errors, res.Verified)
	case t.Lagging && !allowLag:
		return fmt.Errorf("perf %s->%s: the lab could not keep real time during the run (worst lateness %v over %v of lab time); its figures are not true in wall time (--allow-lag accepts them)",
			req.From, req.To, t.MaxLateness, t.LabTime)
	}
	return nil
}

// timingFacts adds the run's lab and wall time, the lab's worst lateness,
// the client's waits for a CPU and each side's CPU per GB to r.
func timingFacts(r *Report, t verbs.Timing, res, srv *verbsperf.Result) {
	r.Fact("run_lab_time", "run: lab time", t.LabTime.String())
	r.Fact("run_wall_time", "run: wall time", t.WallTime.String())
	r.Fact("max_lateness", "lab's worst lateness", t.MaxLateness.String())
	if t.ClientWait >= 0 {
		// What the lab's lateness cannot see: the client's own waits
		// for a CPU, which a latency figure includes.
		r.Fact("client_cpu_wait", "client's CPU wait", t.ClientWait.String())
	}
	// What each program's side cost: CPU time (user and system, every
	// thread) per 10^9 bytes moved, which the machine's load hardly
	// changes; what a side spends beside the lab's loop on a shared box.
	if d := res.CPUPerGB(); d > 0 {
		r.Fact("client_cpu_per_gb", "client's CPU per GB", d.Round(time.Microsecond).String())
	}
	if srv != nil {
		if d := srv.CPUPerGB(); d > 0 {
			r.Fact("server_cpu_per_gb", "server's CPU per GB", d.Round(time.Microsecond).String())
		}
	}
	// How each side waited (workload/verbsperf's pacer): a run far below
	// the others with as much CPU says here which side slept or spun.
	pacing := func(x *verbsperf.Result) string {
		return fmt.Sprintf("%d sleeps for %v (%v asked), %d empty polls", x.Sleeps, x.Slept.Round(time.Millisecond), x.Asked.Round(time.Millisecond), x.Looks)
	}
	r.Fact("client_pacing", "client's pacing", pacing(res))
	if srv != nil {
		r.Fact("server_pacing", "server's pacing", pacing(srv))
	}
}

// liveResult is a live run's result in the shape mrlab sim's perftest
// output and --out_json take, so that live and sim print the same table
// for the same flags. A live run's figures are wall-clock ones.
func liveResult(req live.PerfRequest, res *verbsperf.Result) *workload.Result {
	name := workload.Name(req.Op)
	if !strings.HasSuffix(req.Op, "_lat") {
		name = workload.Name(req.Op + "_bw")
	}
	r := &workload.Result{
		Workload: name, Transport: res.Transport, Hosts: 2, Flows: 1, Size: res.Spec.Size, Iterations: res.Spec.Count,
		QueueDepth: res.Spec.Depth, MTU: res.MTU, Messages: res.Messages, Bytes: res.Bytes, Elapsed: sim.Time(res.Elapsed),
		BWPeakGbps: res.BWPeakGbps, CQMod: res.CQMod, Duration: sim.Time(res.Spec.Duration), WindowMessages: res.Messages,
		GoodputGbps: res.Goodput / 1e9, Retransmits: res.QP.Retransmits, Errors: res.Errors,
	}
	if r.CQMod == 0 {
		r.CQMod = 1
		if r.Size <= 8192 {
			r.CQMod = 100
		}
	}
	if s := res.Elapsed.Seconds(); s > 0 {
		r.BWAverageGbps = float64(res.Bytes) * 8 / s / 1e9
		r.MsgRateMpps = float64(res.Messages) / s / 1e6
		r.TPS = float64(res.Messages) / s
	}
	if l := res.Latency; l != nil {
		r.Latency = &workload.Dist{N: l.N, Min: sim.Time(l.Min), P50: sim.Time(l.P50), P99: sim.Time(l.P99), P999: sim.Time(l.P999),
			Max: sim.Time(l.Max), Mean: sim.Time(l.Mean), Stdev: sim.Time(l.Stdev)}
	}
	return r
}
