package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/labs/live"
)

func newPerfCommand() *cli.Command {
	return &cli.Command{
		Name:  "perf",
		Usage: "run an RDMA workload (write_bw, send_bw, read_bw) between two live lab hosts' NICs, with perftest's flags",
		Description: "The result gives the run's lab time next to its wall time and the lab's worst\n" +
			"lateness. If the lab fell behind the wall clock by more than 1% of the run, its\n" +
			"figures are not true in wall time: the first line says LAGGING and perf exits\n" +
			"non-zero, unless --allow-lag. Ctrl-C ends the run in the lab too.",
		// perftest's flags, as sim's (perfFlags), and live's own.
		Flags: append(append([]cli.Flag{runDirFlag(), labFlag()}, perfFlags()...),
			&cli.BoolFlag{Name: "allow-lag", Usage: "exit 0 even if the lab could not keep real time during the run (the result still says so)"}),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("perf: unexpected argument %q", c.Args().First())
			}
			req, err := perfRequest(c)
			if err != nil {
				return err
			}
			cl, _, err := client(c)
			if err != nil {
				return err
			}
			// Ctrl-C closes the request, and the lab cancels the run.
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, err := cl.Perf(ctx, req)
			if err != nil {
				if ctx.Err() != nil {
					return errors.New("perf: interrupted; the run was cancelled in the lab")
				}
				return err
			}
			return writePerf(c.App.Writer, req, res, c.Bool("json"), c.Bool("allow-lag"))
		},
	}
}

// writePerf prints a perf result, the lab's timing first, and returns the
// error that makes perf exit non-zero: a failed run, unverified data, or a
// lagging lab without allowLag.
func writePerf(w io.Writer, req live.PerfRequest, res live.PerfResult, asJSON, allowLag bool) error {
	t := res.Timing
	lagging := t.Lagging()
	r := &Report{}
	if lagging && !asJSON {
		// The first line of the output, before any figure.
		if _, err := fmt.Fprintln(w, t.Verdict()); err != nil {
			return err
		}
	}
	r.Fact("lagging", "lagging", lagging)
	r.Fact("from", "from", req.From)
	r.Fact("to", "to", req.To)
	r.Fact("op", "op", req.Op)
	r.Fact("messages", "messages", res.Messages)
	r.Fact("bytes", "bytes", res.Bytes)
	r.Fact("elapsed", "elapsed (lab time)", res.Elapsed.String())
	r.Fact("goodput_gbps", "goodput (Gbit/s)", fmt.Sprintf("%.3f", res.Goodput/1e9))
	r.Fact("run_lab_time", "run: lab time", t.LabTime.String())
	r.Fact("run_wall_time", "run: wall time", t.WallTime.String())
	r.Fact("max_lateness", "lab's worst lateness", t.MaxLateness.String())
	r.Fact("verified", "verified", res.Verified)
	r.Fact("errors", "errors", res.Errors)
	r.Fact("status", "status", res.Status)
	if len(res.Counters) > 0 {
		keys := make([]string, 0, len(res.Counters))
		for k := range res.Counters {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		tb := r.Table("counters", "Transport counters", Col("name", "counter", ""), Col("value", "value", ""))
		for _, k := range keys {
			tb.Add(k, res.Counters[k])
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
	failed := res.Errors > 0 || (req.Verify && !res.Verified) || (res.Status != "ok" && !(lagging && res.Status == t.Verdict()))
	switch {
	case failed:
		return fmt.Errorf("perf %s->%s: %s, %d errors, verified=%v", req.From, req.To, res.Status, res.Errors, res.Verified)
	case lagging && !allowLag:
		return fmt.Errorf("perf %s->%s: the lab could not keep real time during the run (worst lateness %v over %v of lab time); its figures are not true in wall time (--allow-lag accepts them)",
			req.From, req.To, t.MaxLateness, t.LabTime)
	}
	return nil
}
