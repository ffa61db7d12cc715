package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/experiment"
)

const sweepHelp = `
Sweeps that outgrow one box run in three steps, on any scheduler:
  --plan                  print the points (JSON: id, lab, seed, mrlab sim command)
  --point ID --out DIR    run one point, write DIR/point-ID.json (and DIR/plan.json)
  --merge DIR             build the report from DIR's results (into --out, default DIR);
                          refuses missing, duplicated and foreign points
  --status DIR            done / running / failed / missing points of DIR's plan
  --slurm --out DIR       submit a Slurm job array (points packed into tasks of --min-task, --per-task auto) and a merge
                          job after it; --dry-run prints the scripts instead
The local run is the same three steps on this machine's cores. See docs/sweeps.md.
`

func sweepFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "plan", Usage: "print the experiment's points as JSON and run nothing"},
		&cli.StringFlag{Name: "point", Usage: "run only point `ID` of the plan (or several in turn: 3,7-9) and write each result into --out"},
		&cli.StringFlag{Name: "merge", Usage: "build the report from the point results in `DIR`"},
		&cli.StringFlag{Name: "status", Usage: "report the state of every point of the plan in `DIR`"},
		&cli.BoolFlag{Name: "slurm", Usage: "submit the points as a Slurm job array, results and report into --out (a directory every node sees)"},
		&cli.StringFlag{Name: "partition", Usage: "Slurm partition (sbatch --partition)"},
		&cli.StringFlag{Name: "time", Usage: "Slurm time limit per array task and for the merge (sbatch --time)", DefaultText: "twice the longest task's estimate + 1 min"},
		&cli.IntFlag{Name: "max-parallel", Usage: "at most `N` array tasks running at once on Slurm (array %N)"},
		&cli.StringFlag{Name: "per-task", Usage: "with --slurm: `K` points one after another in each array task, or auto: enough that a task runs --min-task by the probe's estimate, and few enough tasks for the cluster's MaxArraySize", Value: "auto"},
		&cli.DurationFlag{Name: "min-task", Usage: "with --slurm --per-task auto: the shortest array task to aim for (Slurm's scheduling and start-up outlast shorter ones)", Value: experiment.DefaultMinTask},
		&cli.DurationFlag{Name: "probe", Usage: "with --slurm: time spent here running sample points (the first of each lab) to estimate the tasks' length for --per-task auto and --time; 0 runs none", Value: 30 * time.Second},
		&cli.StringSliceFlag{Name: "sbatch-arg", Usage: "extra sbatch option for both jobs, e.g. --sbatch-arg=--account=A (repeatable)"},
		&cli.StringFlag{Name: "points", Usage: "with --slurm: only these point `IDS` (e.g. 3,7-9: rerun failed ones)"},
		&cli.StringFlag{Name: "mrlab", Usage: "with --slurm: the mrlab binary the jobs run, at the same `PATH` on every node", DefaultText: "this one"},
		&cli.BoolFlag{Name: "dry-run", Usage: "with --slurm: print the batch scripts and the submit commands, submit nothing"},
		&cli.BoolFlag{Name: "wait", Usage: "with --slurm: wait for the merge job and print its output (exit status 1 if it failed)"},
	}
}

// sweepMode returns which sweep step the flags ask for ("" for a local
// run).
func sweepMode(c *cli.Context) string {
	for _, m := range []string{"plan", "point", "merge", "status", "slurm"} {
		if c.IsSet(m) {
			return m
		}
	}
	return ""
}

func sweepAction(c *cli.Context, mode string, args []string) error {
	var set []string
	for _, m := range []string{"plan", "point", "merge", "status", "slurm"} {
		if c.IsSet(m) {
			set = append(set, "--"+m)
		}
	}
	if len(set) > 1 {
		return usagef("%s: one sweep step at a time", strings.Join(set, " and "))
	}
	if len(args) > 1 {
		return usagef("experiment takes one NAME, got %d", len(args))
	}
	if len(args) == 1 && args[0] == "all" {
		return usagef("--%s takes one experiment, not all (one plan per experiment: loop over the names)", mode)
	}
	if mode == "slurm" || mode == "point" {
		if !c.IsSet("out") {
			return usagef("--%s needs --out DIR: the sweep directory that holds the plan and the points' results", mode)
		}
	}
	switch mode {
	case "merge":
		return sweepMerge(c, args, c.String("merge"))
	case "status":
		return sweepStatus(c, args, c.String("status"))
	}
	dir := ""
	if mode != "plan" {
		dir = c.String("out")
	}
	e, cfg, p, err := sweepPlan(c, args, dir)
	if err != nil {
		return err
	}
	switch mode {
	case "plan":
		b, err := experiment.MarshalPlan(p)
		if err != nil {
			return err
		}
		_, err = c.App.Writer.Write(b)
		return err
	case "point":
		ids, err := experiment.ParseIDs(c.String("point"), len(p.Points))
		if err != nil {
			return usagef("--point: %v (%s)", err, p.Describe())
		}
		var failed []string
		for _, id := range ids {
			if err := sweepPoint(c, e, cfg, p, id, dir); err != nil {
				if errors.Is(err, errStopped) || len(ids) == 1 {
					return err
				}
				fmt.Fprintf(c.App.ErrWriter, "mrlab: %v\n", err)
				failed = append(failed, strconv.Itoa(id))
			}
		}
		if len(failed) > 0 {
			return fmt.Errorf("points %s failed (marked in %s)", strings.Join(failed, ","), dir)
		}
		return nil
	}
	return sweepSlurm(c, p, dir)
}

// sweepPlan returns the plan NAME and the flags make, checked against
// dir's plan.json if there is one; without NAME, dir's plan.
func sweepPlan(c *cli.Context, args []string, dir string) (experiment.Experiment, experiment.Config, *experiment.Plan, error) {
	var have *experiment.Plan
	if dir != "" {
		p, err := experiment.ReadPlan(dir)
		switch {
		case err == nil:
			have = p
		case !errors.Is(err, fs.ErrNotExist):
			return experiment.Experiment{}, experiment.Config{}, nil, err
		}
	}
	if len(args) == 0 {
		if have == nil {
			return experiment.Experiment{}, experiment.Config{}, nil, usagef("experiment needs a NAME, or a DIR holding %s", experiment.PlanFile)
		}
		e, cfg, err := have.Config()
		if w := experimentWhatIf(c); !w.IsZero() && w.String() != have.WhatIf.String() {
			return e, cfg, nil, usagef("%s holds %s; the what-if flags give %s: leave them out, or give the plan's", dir, have.Describe(), w)
		}
		return e, cfg, have, err
	}
	e, err := experiment.Lookup(args[0])
	if err != nil {
		return e, experiment.Config{}, nil, usageError{err}
	}
	scale, err := experiment.ParseScale(c.String("scale"))
	if err != nil {
		return e, experiment.Config{}, nil, usageError{err}
	}
	if c.Int("seeds") < 1 {
		return e, experiment.Config{}, nil, usagef("--seeds %d: want at least 1", c.Int("seeds"))
	}
	cfg := experiment.Config{Seed: c.Uint64("seed"), Seeds: c.Int("seeds"), Scale: scale, WhatIf: experimentWhatIf(c), Partitions: c.Int("partitions")}
	p, err := e.Plan(cfg)
	if err != nil {
		return e, cfg, nil, whatIfError(err)
	}
	if have != nil && have.ID != p.ID {
		return e, cfg, nil, fmt.Errorf("%s holds %s; NAME and the flags make %s: give the flags the points ran with (or none: %s)",
			dir, have.Describe(), p.Describe(), have.Invocation())
	}
	return e, cfg, p, nil
}

// errStopped is a point stopped by a signal: the points after it in a
// list are not run.
var errStopped = errors.New("stopped by signal")

// sweepPoint runs one point into dir, marking it running, then done or
// failed (a signal from the scheduler marks it failed before exiting).
func sweepPoint(c *cli.Context, e experiment.Experiment, cfg experiment.Config, p *experiment.Plan, id int, dir string) error {
	if err := experiment.WritePlan(dir, p); err != nil {
		return err
	}
	mark := experiment.NewMark(id, schedulerJob())
	if err := experiment.MarkRunning(dir, mark); err != nil {
		return err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	type outcome struct {
		r   *experiment.PointResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := e.RunPoint(cfg, id)
		done <- outcome{r, err}
	}()
	var o outcome
	select {
	case o = <-done:
	case sig := <-sigs:
		reason := "stopped by signal " + sig.String()
		if err := experiment.MarkFailed(dir, mark, reason); err != nil {
			return err
		}
		return fmt.Errorf("point %d (%s): %w %s", id, p.Points[id].Command, errStopped, sig)
	}
	if o.err != nil {
		if err := experiment.MarkFailed(dir, mark, o.err.Error()); err != nil {
			return errors.Join(o.err, err)
		}
		return o.err
	}
	if err := experiment.WriteResult(dir, o.r); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "point %d of %s done in %.1fs: %s\n", id, p.Describe(), o.r.WallSeconds, filepath.Join(dir, fmt.Sprintf("point-%d.json", id)))
	return nil
}

// schedulerJob names the scheduler's job running this process, if any.
func schedulerJob() string {
	if a, t := os.Getenv("SLURM_ARRAY_JOB_ID"), os.Getenv("SLURM_ARRAY_TASK_ID"); a != "" && t != "" {
		return "slurm " + a + "_" + t
	}
	if j := os.Getenv("SLURM_JOB_ID"); j != "" {
		return "slurm " + j
	}
	if i := os.Getenv("JOB_COMPLETION_INDEX"); i != "" {
		return "kubernetes index " + i
	}
	return ""
}

func sweepMerge(c *cli.Context, args []string, dir string) error {
	e, cfg, _, err := sweepPlan(c, args, dir)
	if err != nil {
		return err
	}
	results, err := experiment.ReadResults(dir)
	if err != nil {
		return err
	}
	r, err := e.Merge(cfg, results)
	if err != nil {
		return err
	}
	out := dir
	if c.IsSet("out") {
		out = c.String("out")
	}
	if err := writeReport(c, r, out); err != nil {
		return err
	}
	return writeDoc(c, []*experiment.Report{r}, out, c.String("doc"))
}

func sweepStatus(c *cli.Context, args []string, dir string) error {
	if _, _, _, err := sweepPlan(c, args, dir); err != nil {
		return err
	}
	st, err := experiment.Status(dir)
	if err != nil {
		return err
	}
	w := c.App.Writer
	fmt.Fprintf(w, "%s in %s: %s\n", st.Plan.Describe(), dir, st.Summary())
	for _, ps := range st.Points {
		if ps.State != experiment.StateDone {
			fmt.Fprintf(w, "%-8s point %d: %s", ps.State, ps.ID, ps.Command)
			if ps.Detail != "" {
				fmt.Fprintf(w, " — %s", ps.Detail)
			}
			fmt.Fprintln(w)
		}
	}
	for _, f := range st.Foreign {
		fmt.Fprintf(w, "foreign  %s (not this plan's; merge refuses it)\n", f)
	}
	if ids := st.IDs(experiment.StateFailed, experiment.StateMissing); len(ids) > 0 {
		list := experiment.FormatIDs(ids)
		fmt.Fprintf(w, "rerun: %s --point ID --out %s (for ID in %s), or on Slurm: %s --slurm --points %s --out %s\n",
			st.Plan.Invocation(), dir, list, st.Plan.Invocation(), list, dir)
	} else if st.Count(experiment.StateRunning) == 0 {
		fmt.Fprintf(w, "every point is done: mrlab experiment --merge %s\n", dir)
	}
	return nil
}

func sweepSlurm(c *cli.Context, p *experiment.Plan, dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	bin := c.String("mrlab")
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return fmt.Errorf("finding this mrlab for the jobs: %w (pass --mrlab PATH)", err)
		}
		if b, err := filepath.EvalSymlinks(bin); err == nil {
			bin = b
		}
		if strings.Contains(bin, string(filepath.Separator)+"go-build") {
			return usagef("this mrlab (%s) is a temporary `go run` build the jobs cannot run: go build -o DIR/mrlab ./cmd/mrlab and run that, or pass --mrlab PATH", bin)
		}
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return err
	}
	var ids []int
	if s := c.String("points"); s != "" {
		if ids, err = experiment.ParseIDs(s, len(p.Points)); err != nil {
			return usageError{err}
		}
	}
	if c.IsSet("max-parallel") && c.Int("max-parallel") < 1 {
		return usagef("--max-parallel %d: want at least 1", c.Int("max-parallel"))
	}
	perTask := 0
	if s := c.String("per-task"); s != "auto" {
		if perTask, err = strconv.Atoi(s); err != nil || perTask < 1 {
			return usagef("--per-task %s: want at least 1, or auto", s)
		}
	}
	o := experiment.SlurmOptions{Dir: abs, Mrlab: bin, Partition: c.String("partition"), Time: c.String("time"),
		MaxParallel: c.Int("max-parallel"), Args: c.StringSlice("sbatch-arg"), Points: ids, PerTask: perTask}
	if err := sizeSlurmTasks(c, p, &o); err != nil {
		return err
	}
	jobs, err := experiment.SlurmScripts(p, o)
	if err != nil {
		return usageError{err}
	}
	w := c.App.Writer
	if c.Bool("dry-run") {
		fmt.Fprintf(w, "# %s\n%s\n# %s\n%s\n# submit (the merge after every point has ended):\n%s", jobs.ArrayFile, jobs.Array, jobs.MergeFile, jobs.Merge, jobs.Submit())
		return nil
	}
	sbatch, err := exec.LookPath("sbatch")
	if err != nil {
		return fmt.Errorf("--slurm: sbatch is not on PATH (run on a Slurm login node, or --dry-run to see the scripts): %w", err)
	}
	if err := experiment.WritePlan(abs, p); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(jobs.ArrayFile), 0o755); err != nil {
		return fmt.Errorf("--slurm: %w", err)
	}
	for _, f := range []struct{ path, text string }{{jobs.ArrayFile, jobs.Array}, {jobs.MergeFile, jobs.Merge}} {
		if err := os.WriteFile(f.path, []byte(f.text), 0o755); err != nil {
			return fmt.Errorf("--slurm: %w", err)
		}
	}
	submit := func(args ...string) (string, error) {
		cmd := exec.Command(sbatch, append([]string{"--parsable"}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("sbatch %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
		return id, nil
	}
	array, err := submit(jobs.ArrayFile)
	if err != nil {
		return err
	}
	merge, err := submit("--dependency=afterany:"+array, jobs.MergeFile)
	if err != nil {
		return fmt.Errorf("array job %s is submitted, the merge is not (run mrlab experiment --merge %s once it is done): %w", array, abs, err)
	}
	n := len(ids)
	if ids == nil {
		n = len(p.Points)
	}
	fmt.Fprintf(w, "submitted %s: array job %s (%d points in %d tasks), merge job %s after it; logs in %s\n",
		p.Describe(), array, n, jobs.Tasks, merge, filepath.Dir(jobs.ArrayFile))
	if !c.Bool("wait") {
		fmt.Fprintf(w, "follow: mrlab experiment --status %s   (submitted %s)\n", abs, time.Now().Format(time.RFC3339))
		return nil
	}
	return slurmWait(c, merge, filepath.Join(filepath.Dir(jobs.ArrayFile), "merge-"+merge+".out"))
}

// slurmWait waits until the merge job has ended (squeue, once a
// second), prints its output, and fails if the job did not complete.
func slurmWait(c *cli.Context, job, output string) error {
	squeue, err := exec.LookPath("squeue")
	if err != nil {
		return fmt.Errorf("--wait: squeue is not on PATH: %w", err)
	}
	state := ""
	for {
		// -t all: an ended job stays listed (its final state) until the
		// controller forgets it (MinJobAge); then squeue lists nothing.
		out, err := exec.Command(squeue, "-h", "-t", "all", "-j", job, "-o", "%T").Output()
		state = strings.TrimSpace(string(out))
		if err != nil || state == "" || !slurmActive[state] {
			break
		}
		time.Sleep(time.Second)
	}
	if b, err := os.ReadFile(output); err == nil {
		c.App.Writer.Write(b)
	}
	if state != "COMPLETED" {
		if state == "" {
			state = "gone from the queue"
		}
		return fmt.Errorf("merge job %s: %s (its output: %s)", job, state, output)
	}
	return nil
}

// slurmActive are the states of a Slurm job that has not ended.
var slurmActive = map[string]bool{"PENDING": true, "CONFIGURING": true, "RUNNING": true, "COMPLETING": true,
	"SUSPENDED": true, "REQUEUED": true, "REQUEUE_HOLD": true, "REQUEUE_FED": true, "RESIZING": true, "SIGNALING": true, "STAGE_OUT": true}
