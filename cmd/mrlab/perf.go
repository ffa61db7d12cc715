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

	"github.com/mrlab/mrlab/labs/live"
	"github.com/mrlab/mrlab/verbs"
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
			req, err := perfRequest(c)
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
			res, _, err := verbsPerf(ctx, c.String("run-dir"), name, req, c.Bool("use-event"), c.App.ErrWriter)
			if err != nil {
				if ctx.Err() != nil {
					return errors.New("perf: interrupted; both sides stopped and the lab released what they held")
				}
				return err
			}
			var fabric map[string]uint64
			if after, err := cl.Status(c.Context); err == nil {
				fabric = fabricDelta(before.Engine.Counters, after.Engine.Counters)
			}
			return writePerf(c.App.Writer, req, res, fabric, c.Bool("json"), c.Bool("allow-lag"))
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

// writePerf prints a perf result, the lab's timing verdict first when it
// lagged, and returns the error that makes perf exit non-zero: a failed
// run, unverified data, or a lagging lab without allowLag. fabric holds
// the lab's fabric counters' growth during the run.
func writePerf(w io.Writer, req live.PerfRequest, res *verbsperf.Result, fabric map[string]uint64, asJSON, allowLag bool) error {
	var t verbs.Timing
	if res.Timing != nil {
		t = *res.Timing
	}
	if t.Lagging && !asJSON {
		// The first line of the output, before any figure.
		if _, err := fmt.Fprintln(w, t); err != nil {
			return err
		}
	}
	r := &Report{}
	r.Fact("lagging", "lagging", t.Lagging)
	r.Fact("from", "from", req.From)
	r.Fact("to", "to", req.To)
	r.Fact("op", "op", req.Op)
	r.Fact("transport", "transport", res.Transport)
	r.Fact("messages", "messages", res.Messages)
	r.Fact("bytes", "bytes", res.Bytes)
	if l := res.Latency; l != nil {
		us := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/1e3) }
		r.Fact("lat_typical_us", "one-way latency, typical (us)", us(l.P50))
		r.Fact("lat_min_us", "one-way latency, min (us)", us(l.Min))
		r.Fact("lat_p99_us", "one-way latency, 99% (us)", us(l.P99))
	} else {
		r.Fact("elapsed", "elapsed (wall time)", res.Elapsed.String())
		r.Fact("goodput_gbps", "goodput (Gbit/s)", fmt.Sprintf("%.3f", res.Goodput/1e9))
	}
	r.Fact("run_lab_time", "run: lab time", t.LabTime.String())
	r.Fact("run_wall_time", "run: wall time", t.WallTime.String())
	r.Fact("max_lateness", "lab's worst lateness", t.MaxLateness.String())
	r.Fact("verified", "verified", res.Verified)
	r.Fact("errors", "errors", res.Errors)
	r.Fact("status", "status", res.Status)
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
