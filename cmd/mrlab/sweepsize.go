package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/experiment"
)

// sizeSlurmTasks fills o's PerTask (when auto), Time and MergeTime (when
// --time is not given) and MaxArraySize, from the cluster's limit and a
// probe of sample points on this machine, and says what it chose on
// stderr: a plan of many short points becomes a few tasks of at least
// --min-task, an array past MaxArraySize is packed (or, with a fixed
// --per-task, refused), and every task asks for a time it can keep.
func sizeSlurmTasks(c *cli.Context, p *experiment.Plan, o *experiment.SlurmOptions) error {
	ids := o.Points
	if ids == nil {
		for _, pt := range p.Points {
			ids = append(ids, pt.ID)
		}
	}
	maxArray, from := slurmMaxArraySize()
	o.MaxArraySize = maxArray
	var cost map[int]time.Duration
	var probed string
	if o.PerTask == 0 || o.Time == "" {
		var err error
		if cost, probed, err = probePoints(c, p, ids, c.Duration("probe")); err != nil {
			return err
		}
	}
	sz, err := experiment.SizeTasks(ids, cost, c.Duration("min-task"), maxArray, o.PerTask)
	if err != nil {
		return usageError{err}
	}
	auto := o.PerTask == 0
	o.PerTask = sz.PerTask
	how := fmt.Sprintf("%d per task", sz.PerTask)
	if auto {
		how += fmt.Sprintf(" (--per-task auto: tasks of at least %v, at most %d of them: MaxArraySize %d, %s)", c.Duration("min-task"), maxArray, maxArray, from)
	}
	ew := c.App.ErrWriter
	if probed != "" {
		fmt.Fprintf(ew, "mrlab: %s\n", probed)
	}
	fmt.Fprintf(ew, "mrlab: %d points in %d array tasks, %s\n", len(ids), sz.Tasks, how)
	switch {
	case o.Time == "" && sz.Longest > 0:
		o.Time, o.MergeTime = experiment.TimeLimit(sz.Longest), "0:10:00"
		fmt.Fprintf(ew, "mrlab: --time %s per task (the longest is estimated at %v here; twice that plus a minute), 0:10:00 for the merge\n",
			o.Time, sz.Longest.Round(100*time.Millisecond))
	case o.Time == "":
		fmt.Fprintf(ew, "mrlab: no --time and no estimate (--probe 0): the partition's default time limit applies\n")
	case sz.Longest > 0:
		if limit, err := slurmDuration(o.Time); err == nil && limit < sz.Longest {
			fmt.Fprintf(ew, "mrlab: warning: --time %s is less than the longest task's estimate here (%v): its points may be killed at the limit\n",
				o.Time, sz.Longest.Round(100*time.Millisecond))
		}
	}
	return nil
}

// slurmMaxArraySize reads MaxArraySize from `scontrol show config`, or
// assumes Slurm's default when scontrol is not there or says nothing.
func slurmMaxArraySize() (int, string) {
	// A cluster whose controller does not answer should not hold up a
	// submission for long; Slurm's default is then as good a guess.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "scontrol", "show", "config").Output()
	if err == nil {
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), "=")
			if ok && strings.TrimSpace(k) == "MaxArraySize" {
				if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
					return n, "from scontrol show config"
				}
			}
		}
	}
	return experiment.DefaultMaxArraySize, "Slurm's default: scontrol show config did not say"
}

// probePoints runs sample points of ids on this machine, each in its own
// mrlab process into a scratch directory, for at most budget in all: the
// first point of each lab, in order, as the points of one lab differ only
// in their seeds. It returns each probed point's wall time and a line
// saying what it measured. A probe that outlasts the budget stops there
// (its time so far is a lower bound: enough to know its points want a task
// each); a point that fails here would fail on the cluster too, so its
// error is returned.
func probePoints(c *cli.Context, p *experiment.Plan, ids []int, budget time.Duration) (map[int]time.Duration, string, error) {
	if budget <= 0 {
		return nil, "", nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, "", fmt.Errorf("--probe: finding this mrlab: %w (or --probe 0)", err)
	}
	tmp, err := os.MkdirTemp("", "mrlab-probe-")
	if err != nil {
		return nil, "", fmt.Errorf("--probe: %w", err)
	}
	defer os.RemoveAll(tmp)
	seen := map[string]bool{}
	cost := map[int]time.Duration{}
	var labs []string
	start, cut := time.Now(), false
	for _, id := range ids {
		lab := p.Points[id].Lab
		if seen[lab] {
			continue
		}
		seen[lab] = true
		left := budget - time.Since(start)
		if left <= 0 {
			break
		}
		ctx, cancel := context.WithTimeout(c.Context, left)
		cmd := exec.CommandContext(ctx, exe, p.PointArgs(id, tmp)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		t0 := time.Now()
		err := cmd.Run()
		d := time.Since(t0)
		timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
		cancel()
		cost[id] = d
		labs = append(labs, lab)
		if timedOut {
			cut = true
			break
		}
		if err != nil {
			return nil, "", fmt.Errorf("--probe: point %d (%s) failed here: %w\n%s", id, p.Points[id].Command, err, strings.TrimSpace(out.String()))
		}
	}
	ds := make([]time.Duration, 0, len(cost))
	for _, d := range cost {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	line := fmt.Sprintf("--probe ran %d sample points here (%s) in %v: %v to %v each",
		len(cost), strings.Join(labs, ", "), time.Since(start).Round(100*time.Millisecond), ds[0].Round(10*time.Millisecond), ds[len(ds)-1].Round(10*time.Millisecond))
	if cut {
		line += fmt.Sprintf("; the last was stopped at the %v budget (its points run longer)", budget)
	}
	return cost, line, nil
}

// slurmDuration reads sbatch's --time forms: MM, MM:SS, HH:MM:SS, D-HH,
// D-HH:MM, D-HH:MM:SS.
func slurmDuration(s string) (time.Duration, error) {
	days := 0
	if d, rest, ok := strings.Cut(s, "-"); ok {
		n, err := strconv.Atoi(d)
		if err != nil {
			return 0, err
		}
		days, s = n, rest
	}
	var parts []int
	for _, f := range strings.Split(s, ":") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return 0, err
		}
		parts = append(parts, n)
	}
	var h, m, sec int
	switch {
	case days > 0 && len(parts) == 1:
		h = parts[0]
	case days > 0 && len(parts) == 2:
		h, m = parts[0], parts[1]
	case len(parts) == 1:
		m = parts[0]
	case len(parts) == 2:
		m, sec = parts[0], parts[1]
	case len(parts) == 3:
		h, m, sec = parts[0], parts[1], parts[2]
	default:
		return 0, fmt.Errorf("time %q: want sbatch's --time form", s)
	}
	return time.Duration(days)*24*time.Hour + time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(sec)*time.Second, nil
}
