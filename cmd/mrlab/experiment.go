package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/internal/experiment"
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
	desc.WriteString("  all            every experiment in turn (with --doc, also a Markdown summary)\n")
	desc.WriteString("  A,B,...        those experiments in turn\n")
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
		}, sweepFlags()...),
		Action: experimentAction,
	}
}

func experimentAction(c *cli.Context) error {
	args, err := cmdArgs(c)
	if err != nil {
		return err
	}
	if mode := sweepMode(c); mode != "" {
		return sweepAction(c, mode, args)
	}
	if len(args) != 1 {
		return usagef("experiment needs one NAME (one of %s, or all)", strings.Join(experiment.Names(), ", "))
	}
	name := args[0]
	var exps []experiment.Experiment
	if name == "all" {
		exps = experiment.All()
	} else {
		// NAME or NAME,NAME,...: those experiments in turn.
		for _, n := range strings.Split(name, ",") {
			e, err := experiment.Lookup(n)
			if err != nil {
				return usageError{err}
			}
			exps = append(exps, e)
		}
	}
	scale, err := experiment.ParseScale(c.String("scale"))
	if err != nil {
		return usageError{err}
	}
	if c.IsSet("jobs") && c.Int("jobs") < 1 {
		return usagef("--jobs %d: want at least 1", c.Int("jobs"))
	}
	if c.Int("seeds") < 1 {
		return usagef("--seeds %d: want at least 1", c.Int("seeds"))
	}
	if c.Bool("json") && len(exps) > 1 {
		return usagef("--json prints one experiment's object: name one experiment, not all")
	}
	payload, err := softnic.ParsePayloadMode(c.String("payload"))
	if err != nil {
		return usageError{fmt.Errorf("experiment: --payload: %w", err)}
	}
	cfg := experiment.Config{Seed: c.Uint64("seed"), Seeds: c.Int("seeds"), Scale: scale, Jobs: c.Int("jobs"), Progress: c.App.ErrWriter, Payload: payload}
	out := c.String("out")
	var reports []*experiment.Report
	for _, e := range exps {
		r, err := e.Run(cfg)
		if err != nil {
			return err
		}
		reports = append(reports, r)
		if err := writeReport(c, r, out); err != nil {
			return err
		}
	}
	return writeDoc(c, reports, out)
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

// writeDoc writes the --doc summary of reports, whose files are in out.
func writeDoc(c *cli.Context, reports []*experiment.Report, out string) error {
	if doc := c.String("doc"); doc != "" {
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
	return nil
}
