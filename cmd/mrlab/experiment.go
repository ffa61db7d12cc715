package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/experiment"
	"github.com/mrlab/mrlab/softnic"
)

func init() { register(newExperimentCommand) }

func newExperimentCommand() *cli.Command {
	var desc strings.Builder
	desc.WriteString("Reproduces one of the seeds' claims in virtual time, MetaRoCE side by side with\n" +
		"RoCEv2, prints the table and the checks against the targets, and writes NAME.csv,\n" +
		"NAME.json and PNG/SVG plots to --out. Every case runs with --seeds seeds (median and\n" +
		"min-max in the table); every row of NAME.json carries the mrlab sim command that\n" +
		"reproduces it. The beds are built-in labs (mrlab lab list). NAME is one of:\n\n")
	for _, e := range experiment.All() {
		fmt.Fprintf(&desc, "  %-14s %s\n", e.Name, e.Title)
	}
	desc.WriteString("  all            every experiment (with --doc, also a Markdown summary)\n")
	desc.WriteString("  A,B,...        those experiments (reports and pages in this order)\n")
	desc.WriteString("\nThe points of every experiment named run in one pool of --jobs simulations, the\n" +
		"largest beds first; --also adds more runs to the same pool, each with its own scale,\n" +
		"files and --doc page (the seeds, jobs, partitions, payload and what-if are the run's):\n" +
		"  mrlab experiment all --out d --doc d.md --also 'all scale=quick out=q doc=q.md'\n" +
		"Reports, files and pages are those of the runs made one by one, byte for byte.\n")
	desc.WriteString(whatIfExperimentHelp())
	desc.WriteString(sweepHelp)
	return &cli.Command{
		Name:        "experiment",
		Usage:       "reproduce a claim of the seeds: " + strings.Join(experiment.Names(), ", ") + " or all",
		ArgsUsage:   "NAME",
		Description: desc.String(),
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object with the rows instead of the table"},
			&cli.StringFlag{Name: "out", Usage: "write CSV, JSON and plots into `DIR`", Value: "results"},
			&cli.Uint64Flag{Name: "seed", Usage: "first seed of the fabric, transports and workloads", Value: 1},
			&cli.IntFlag{Name: "seeds", Usage: "seeds per case (seed, seed+1, ...)", Value: experiment.DefaultSeeds},
			&cli.StringFlag{Name: "scale", Usage: "full, quick or tiny (smaller runs for a first look)", Value: "full"},
			&cli.IntFlag{Name: "jobs", Usage: "simulations to run at once (results do not depend on it)", DefaultText: "one per CPU"},
			&cli.StringFlag{Name: "payload", Usage: "payload mode: synthetic (content tracked, not stored) or bytes (every byte real); results do not depend on it", Value: "synthetic"},
			&cli.StringFlag{Name: "doc", Usage: "also write a Markdown summary of the results to `FILE` (plots linked relative to it)"},
			&cli.GenericFlag{Name: "also", Value: &repeated{}, Usage: "another run in the same pool of simulations: `'NAME scale=S out=DIR doc=FILE'` (words split at spaces; scale and out default to this run's, doc to none): its files and page, not its tables; repeatable"},
			&cli.IntFlag{Name: "partitions", DefaultText: "the cores --jobs leaves",
				Usage: "partitions of the event engine per simulation, at most one per 16 hosts of its bed (one goroutine each; a point whose workload or probe is not partition-safe runs on one); results do not depend on it"},
		}, append(experimentWhatIfFlags(), sweepFlags()...)...),
		Action: experimentAction,
	}
}

func experimentAction(c *cli.Context) error {
	args, err := cmdArgs(c)
	if err != nil {
		return err
	}
	if mode := sweepMode(c); mode != "" {
		if c.IsSet("also") {
			return usagef("experiment: --also runs in the local pool; it does not go with --%s", mode)
		}
		return sweepAction(c, mode, args)
	}
	if len(args) != 1 {
		return usagef("experiment needs one NAME (one of %s, or all)", strings.Join(experiment.Names(), ", "))
	}
	if n := c.Int("partitions"); c.IsSet("partitions") && n < 1 {
		return usagef("experiment: --partitions %d: want 1 or more", n)
	}
	scale, err := experiment.ParseScale(c.String("scale"))
	if err != nil {
		return usageError{err}
	}
	main, err := experimentRun(args[0], scale, c.String("out"), c.String("doc"))
	if err != nil {
		return err
	}
	runs := []experimentRunSpec{main}
	for _, a := range flagValues(c, "also") {
		r, err := parseAlso(a, scale, c.String("out"))
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	if c.IsSet("jobs") && c.Int("jobs") < 1 {
		return usagef("--jobs %d: want at least 1", c.Int("jobs"))
	}
	if c.Int("seeds") < 1 {
		return usagef("--seeds %d: want at least 1", c.Int("seeds"))
	}
	if c.Bool("json") && (len(main.exps) > 1 || len(runs) > 1) {
		return usagef("--json prints one experiment's object: name one experiment, not all (and no --also)")
	}
	payload, err := softnic.ParsePayloadMode(c.String("payload"))
	if err != nil {
		return usageError{fmt.Errorf("experiment: --payload: %w", err)}
	}
	cfg := experiment.Config{Seed: c.Uint64("seed"), Seeds: c.Int("seeds"), Jobs: c.Int("jobs"), Progress: c.App.ErrWriter,
		Payload: payload, WhatIf: experimentWhatIf(c), Partitions: c.Int("partitions")}
	var batch []experiment.Batch
	for _, r := range runs {
		rc := cfg
		rc.Scale = r.scale
		if err := checkWhatIf(r.exps, rc); err != nil {
			return err
		}
		for _, e := range r.exps {
			batch = append(batch, experiment.Batch{Experiment: e, Config: rc})
		}
	}
	start := time.Now()
	reports, err := experiment.RunBatch(batch, cfg.Jobs, cfg.Progress)
	if err != nil {
		return err
	}
	if len(reports) > 1 {
		batchSummary(c.App.ErrWriter, reports, time.Since(start), cfg.Jobs)
	}
	var errs []error
	for k, r := range runs {
		rs := reports[:len(r.exps)]
		reports = reports[len(r.exps):]
		for _, rep := range rs {
			if k > 0 {
				// An --also run writes its files and page; the tables
				// printed are the command's own run's.
				paths, err := rep.WriteFiles(r.out)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "wrote %s\n", strings.Join(paths, ", "))
				continue
			}
			if err := writeReport(c, rep, r.out); err != nil {
				return err
			}
		}
		errs = append(errs, writeDoc(c, rs, r.out, r.doc))
	}
	return errors.Join(errs...)
}

// batchSummary prints where a batch's time went: every experiment run's
// points, their summed run time and the wall time from its first point to
// its merge, then the whole batch's, and how busy its jobs were (summed
// point time over wall x jobs: the rest is planning, merging and cores
// left idle).
func batchSummary(w io.Writer, reports []*experiment.Report, wall time.Duration, jobs int) {
	if jobs < 1 {
		jobs = runtime.NumCPU()
	}
	var pts int
	var sum time.Duration
	for _, r := range reports {
		fmt.Fprintf(w, "experiment %s (%s): %d points, %.1f s of point time, %.1f s wall\n",
			r.Experiment, r.Scale, r.Points, r.PointTime.Seconds(), r.Wall.Seconds())
		pts += r.Points
		sum += r.PointTime
	}
	fmt.Fprintf(w, "experiment batch: %d points, %.1f s of point time in %.1f s wall on %d jobs (%.0f%% busy)\n",
		pts, sum.Seconds(), wall.Seconds(), jobs, 100*sum.Seconds()/(wall.Seconds()*float64(jobs)))
}

// experimentRunSpec is one run of `mrlab experiment`: its experiments,
// scale, output directory and --doc page ("" for none).
type experimentRunSpec struct {
	exps     []experiment.Experiment
	scale    experiment.Scale
	out, doc string
}

// experimentRun reads NAME (one experiment, A,B,... or all).
func experimentRun(name string, scale experiment.Scale, out, doc string) (experimentRunSpec, error) {
	r := experimentRunSpec{scale: scale, out: out, doc: doc}
	if name == "all" {
		r.exps = experiment.All()
		return r, nil
	}
	// NAME or NAME,NAME,...: those experiments, in that order.
	for _, n := range strings.Split(name, ",") {
		e, err := experiment.Lookup(n)
		if err != nil {
			return r, usageError{err}
		}
		r.exps = append(r.exps, e)
	}
	return r, nil
}

// parseAlso reads an --also run: "NAME scale=S out=DIR doc=FILE", scale
// and out defaulting to the command's.
func parseAlso(s string, scale experiment.Scale, out string) (experimentRunSpec, error) {
	words := strings.Fields(s)
	if len(words) == 0 || strings.Contains(words[0], "=") {
		return experimentRunSpec{}, usagef("--also %q: want 'NAME [scale=S] [out=DIR] [doc=FILE]'", s)
	}
	var doc string
	for _, w := range words[1:] {
		k, v, ok := strings.Cut(w, "=")
		switch {
		case !ok || v == "":
			return experimentRunSpec{}, usagef("--also %q: %q is not KEY=VALUE (scale, out or doc)", s, w)
		case k == "scale":
			sc, err := experiment.ParseScale(v)
			if err != nil {
				return experimentRunSpec{}, usagef("--also %q: %v", s, err)
			}
			scale = sc
		case k == "out":
			out = v
		case k == "doc":
			doc = v
		default:
			return experimentRunSpec{}, usagef("--also %q: unknown key %q (want scale, out or doc)", s, k)
		}
	}
	r, err := experimentRun(words[0], scale, out, doc)
	if err != nil {
		return r, usagef("--also %q: %v", s, err)
	}
	return r, nil
}

// writeReport writes r's files into out and prints it (as JSON with
// --json).
func writeReport(c *cli.Context, r *experiment.Report, out string) error {
	paths, err := r.WriteFiles(out)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return r.WriteJSON(c.App.Writer)
	}
	if err := r.WriteText(c.App.Writer); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "wrote %s\n\n", strings.Join(paths, ", "))
	return nil
}

// writeDoc writes the summary of reports, whose files are in out, to doc
// (none if "").
func writeDoc(c *cli.Context, reports []*experiment.Report, out, doc string) error {
	if doc != "" {
		rel, err := filepath.Rel(filepath.Dir(doc), out)
		if err != nil {
			return fmt.Errorf("writing %s: %w", doc, err)
		}
		var b bytes.Buffer
		if err := experiment.WriteMarkdown(&b, reports, filepath.ToSlash(rel)); err != nil {
			return err
		}
		if err := os.WriteFile(doc, b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", doc, err)
		}
		fmt.Fprintf(c.App.Writer, "wrote %s\n", doc)
	}
	return sanityError(reports)
}

// sanityError fails the command, once every report is written, when a
// run failed goodput sanity on a loss-free bed (Report.SanityFailures).
func sanityError(reports []*experiment.Report) error {
	var errs []error
	for _, r := range reports {
		if n := len(r.SanityFailures); n > 0 {
			errs = append(errs, fmt.Errorf("experiment %s: goodput sanity failed in %d runs on loss-free beds (first: %s: %s)",
				r.Experiment, n, r.SanityFailures[0].Command, r.SanityFailures[0].Why))
		}
	}
	return errors.Join(errs...)
}

// experimentWhatIfFlags are --set, --impair and --fault as experiment
// takes them: for every bed of the run.
func experimentWhatIfFlags() []cli.Flag {
	const cat = "what-if (every bed of the run, both transports alike; see the description)"
	return []cli.Flag{
		&cli.GenericFlag{Name: "set", Value: &repeated{}, Category: cat,
			Usage: "set a lab-file key in every bed: `KEY=VALUE` as mrlab sim takes it (links.default.rate=25gbit, links.fabric.delay=3us); repeatable"},
		&cli.GenericFlag{Name: "impair", Value: &repeated{}, Category: cat,
			Usage: "impair links of every bed, netem spelling: `TARGET=NETEM` as mrlab sim takes it ('fabric=delay 5us'); repeatable"},
		&cli.GenericFlag{Name: "fault", Value: &repeated{}, Category: cat,
			Usage: "add a fault to every bed's timeline: `'AT TARGET NAME ACTION [NETEM]'` as mrlab sim takes it ('1ms link h6-p0 down'); repeatable"},
	}
}

// experimentWhatIf reads --set, --impair and --fault as the run's change
// to every bed.
func experimentWhatIf(c *cli.Context) experiment.WhatIf {
	return experiment.WhatIf{Set: flagValues(c, "set"), Impair: flagValues(c, "impair"), Fault: flagValues(c, "fault")}
}

// checkWhatIf plans every experiment of the run with cfg's what-if before
// anything runs, and returns every refusal at once (a usage error): one
// experiment of a list may refuse what another takes.
func checkWhatIf(exps []experiment.Experiment, cfg experiment.Config) error {
	if cfg.WhatIf.IsZero() {
		return nil
	}
	var errs []error
	var take []string
	for _, e := range exps {
		if _, err := e.Plan(cfg); err != nil {
			errs = append(errs, err)
		} else {
			take = append(take, e.Name)
		}
	}
	if len(errs) > 0 && len(take) > 0 {
		errs = append(errs, fmt.Errorf("these take it: mrlab experiment %s %s", strings.Join(take, ","), cfg.WhatIf))
	}
	return whatIfError(errors.Join(errs...))
}

// whatIfError makes an error in a what-if a usage error.
func whatIfError(err error) error {
	if errors.Is(err, experiment.ErrWhatIf) {
		return usageError{err}
	}
	return err
}

// whatIfExperimentHelp is experiment's help on --set, --impair and
// --fault: what they do and what each experiment refuses.
func whatIfExperimentHelp() string {
	var b strings.Builder
	b.WriteString("\nWhat-ifs: --set KEY=VALUE, --impair TARGET=NETEM and --fault 'AT TARGET NAME ACTION'\n" +
		"(as mrlab sim takes them, repeatable) change every bed of the run after the bed's\n" +
		"own settings, alike for every transport and fabric: does the claim still hold at\n" +
		"25 Gbit/s (--set links.default.rate=25gbit), with 5 us more on every fabric link\n" +
		"(--impair 'fabric=delay 5us'), with a spine down at 1 ms? Every row's command, the\n" +
		"plan and its points carry them; the table, JSON, plots and --doc page say the run\n" +
		"is a what-if and list them (the setup names the beds' settings as their files have\n" +
		"them). An --impair replaces a link's impairment, it does not add to it. A what-if\n" +
		"touching what an experiment sets itself is refused, naming the flag (a --set of a\n" +
		"key that holds such a setting, such as links.default={...}, too):\n")
	for _, k := range experiment.FixedKnobs() {
		fmt.Fprintf(&b, "  %-14s %s: %s\n", "every", k.Refuses(), k.Why)
		if k.Hint != "" {
			fmt.Fprintf(&b, "  %-14s (%s)\n", "", k.Hint)
		}
	}
	for _, e := range experiment.All() {
		for _, k := range e.Varies {
			fmt.Fprintf(&b, "  %-14s %s: %s\n  %-14s (%s)\n", e.Name, k.Name, k.Why, "", k.Refuses())
		}
	}
	return b.String()
}
