package experiment

import (
	"fmt"
	"path/filepath"
	"strings"
)

// SlurmOptions says how a plan runs on Slurm.
type SlurmOptions struct {
	// Dir is the sweep directory (plan, point results, the merged report),
	// on a file system every node sees; absolute.
	Dir string
	// Mrlab is the mrlab binary the jobs run; absolute, and at that path
	// on every node.
	Mrlab string
	// Partition and Time are sbatch's --partition and --time ("" for the
	// cluster's defaults); MergeTime is the merge job's --time ("": Time).
	Partition, Time, MergeTime string
	// MaxParallel caps the array tasks running at once (0: no cap).
	MaxParallel int
	// Args are extra sbatch options, one per #SBATCH line of both
	// scripts (e.g. --account=A, --mem=2G, --qos=Q).
	Args []string
	// Points are the point ids to run (nil: every point of the plan).
	Points []int
	// PerTask is how many points each array task runs, one after another
	// (0 or 1: one; more for points shorter than the scheduler's
	// start-up cost per job).
	PerTask int
	// MaxArraySize is the cluster's MaxArraySize (0: Slurm's default,
	// DefaultMaxArraySize): an array whose indices reach it is refused.
	MaxArraySize int
}

// SlurmJobs are the two batch scripts of a sweep on Slurm: a job array,
// one task per point ($SLURM_ARRAY_TASK_ID is the point's id), and the
// merge, which runs after every task has ended (afterany: a failed point
// makes the merge say which are missing, rather than leave it pending
// for ever).
type SlurmJobs struct {
	// ArrayFile and MergeFile are where the scripts go, under Dir/slurm.
	ArrayFile, MergeFile string
	Array, Merge         string
	// Tasks is the array's size.
	Tasks int
}

// Submit returns the shell commands that submit the scripts, the merge
// depending on the array ($array holds its job id).
func (j SlurmJobs) Submit() string {
	return fmt.Sprintf("array=$(sbatch --parsable %s)\nsbatch --parsable --dependency=afterany:${array%%%%;*} %s\n",
		shellQuote(j.ArrayFile), shellQuote(j.MergeFile))
}

// SlurmScripts writes p's batch scripts.
func SlurmScripts(p *Plan, o SlurmOptions) (SlurmJobs, error) {
	if !filepath.IsAbs(o.Dir) || !filepath.IsAbs(o.Mrlab) {
		return SlurmJobs{}, fmt.Errorf("slurm scripts: the sweep directory (%q) and mrlab (%q) must be absolute paths", o.Dir, o.Mrlab)
	}
	ids := o.Points
	if ids == nil {
		for _, pt := range p.Points {
			ids = append(ids, pt.ID)
		}
	}
	if len(ids) == 0 {
		return SlurmJobs{}, fmt.Errorf("slurm scripts: %s has no points to run", p.Describe())
	}
	if _, err := SizeTasks(ids, nil, 0, o.MaxArraySize, max(o.PerTask, 1)); err != nil {
		return SlurmJobs{}, fmt.Errorf("slurm scripts: %w", err)
	}
	for _, a := range append([]string{o.Partition, o.Time, o.MergeTime}, o.Args...) {
		if strings.ContainsAny(a, "\n\r") {
			return SlurmJobs{}, fmt.Errorf("slurm scripts: sbatch option %q spans lines", a)
		}
	}
	logs := filepath.Join(o.Dir, "slurm")
	// One task per point, the task id the point's; or chunks of PerTask
	// points, the task id an index into them.
	array, tasks, output := FormatIDs(ids), len(ids), "point-%a-%A.out"
	var chunks []string
	if o.PerTask > 1 {
		for i := 0; i < len(ids); i += o.PerTask {
			chunks = append(chunks, FormatIDs(ids[i:min(i+o.PerTask, len(ids))]))
		}
		array, tasks, output = fmt.Sprintf("0-%d", len(chunks)-1), len(chunks), "task-%a-%A.out"
	}
	if o.MaxParallel > 0 {
		array += fmt.Sprintf("%%%d", o.MaxParallel)
	}
	head := func(b *strings.Builder, what, job, output, limit string) {
		fmt.Fprintf(b, "#!/bin/bash\n# %s of mrlab experiment %s.\n", what, p.Describe())
		fmt.Fprintf(b, "# Written by mrlab experiment --slurm; follow it with: %s experiment --status %s\n", shellQuote(o.Mrlab), shellQuote(o.Dir))
		fmt.Fprintf(b, "#SBATCH --job-name=%s\n#SBATCH --output=%s\n#SBATCH --ntasks=1\n#SBATCH --cpus-per-task=1\n", job, output)
		if o.Partition != "" {
			fmt.Fprintf(b, "#SBATCH --partition=%s\n", o.Partition)
		}
		if limit != "" {
			fmt.Fprintf(b, "#SBATCH --time=%s\n", limit)
		}
		for _, a := range o.Args {
			fmt.Fprintf(b, "#SBATCH %s\n", a)
		}
	}
	var a, m strings.Builder
	what := fmt.Sprintf("Points %s (one array task each)", FormatIDs(ids))
	if chunks != nil {
		what = fmt.Sprintf("Points %s (%d per array task)", FormatIDs(ids), o.PerTask)
	}
	head(&a, what, "mrlab-"+p.Experiment, filepath.Join(logs, output), o.Time)
	fmt.Fprintf(&a, "#SBATCH --array=%s\n", array)
	// exec: Slurm's signals (scancel, the time limit) reach mrlab, which
	// marks the point failed before it goes.
	point := `"$SLURM_ARRAY_TASK_ID"`
	if chunks != nil {
		fmt.Fprintf(&a, "chunks=(%s)\n", strings.Join(chunks, " "))
		point = `"${chunks[$SLURM_ARRAY_TASK_ID]}"`
	}
	fmt.Fprintf(&a, "exec %s %s --point %s --out %s\n", shellQuote(o.Mrlab), shellJoin(p.Args), point, shellQuote(o.Dir))
	mergeTime := o.MergeTime
	if mergeTime == "" {
		mergeTime = o.Time
	}
	head(&m, "The merge", "mrlab-"+p.Experiment+"-merge", filepath.Join(logs, "merge-%j.out"), mergeTime)
	fmt.Fprintf(&m, "exec %s %s --merge %s --out %s\n", shellQuote(o.Mrlab), shellJoin(p.Args), shellQuote(o.Dir), shellQuote(o.Dir))
	return SlurmJobs{
		ArrayFile: filepath.Join(logs, "points-"+p.ID+".sbatch"), MergeFile: filepath.Join(logs, "merge-"+p.ID+".sbatch"),
		Array: a.String(), Merge: m.String(), Tasks: tasks,
	}, nil
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}
