package experiment

import (
	"cmp"
	"io"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/mrlab/mrlab/labs"
)

// Batch is one run of a batch: an experiment and its configuration.
type Batch struct {
	Experiment Experiment
	Config     Config
}

// RunBatch runs several experiment runs (other experiments, scales or
// seeds) as one sweep and returns their reports in the order of runs,
// each the report Experiment.Run gives for it: every point runs the same
// function and its row is decoded the same way, whatever runs beside it.
//
// Every run is planned once; then every point of every run goes into one
// pool, jobs simulations at a time (jobs < 1: one per CPU; it replaces
// every run's Jobs, and so the partitions a point picks when Partitions is
// 0), so no core idles at the end of one experiment while the last of its
// points finishes; then each run is merged. The pool starts points in
// schedule order (largest bed first), so the small points come last and
// fill the cores while the last big ones finish, instead of one long point
// running alone at the end.
//
// A report's Wall is the time from the start of its run's first point to
// the end of its merge (with other runs' points beside them), and its
// PointTime the sum of its points' run times.
func RunBatch(runs []Batch, jobs int, progress io.Writer) ([]*Report, error) {
	if jobs < 1 {
		jobs = runtime.NumCPU()
	}
	start := time.Now()
	type planned struct {
		cfg Config
		d   *planDriver
		// first is when its first point started; took sums its points' run
		// times (guarded by mu).
		first time.Time
		took  time.Duration
	}
	var mu sync.Mutex
	ps := make([]planned, len(runs))
	var all []job[[]byte]
	var at []scheduled
	for r, b := range runs {
		cfg := b.Config.withDefaults()
		cfg.Jobs, cfg.Progress = jobs, progress
		_, d, err := b.Experiment.planRun(cfg, true)
		if err != nil {
			return nil, err
		}
		ps[r] = planned{cfg: cfg, d: d}
		for i, pt := range d.pts {
			at = append(at, scheduled{run: r, point: i, hosts: bedHosts(pt.Lab)})
			all = append(all, job[[]byte]{exp: b.Experiment.Name, name: pt.Command(), run: func() ([]byte, error) {
				t0 := time.Now()
				mu.Lock()
				if ps[r].first.IsZero() {
					ps[r].first = t0
				}
				mu.Unlock()
				row, err := d.run(i)
				mu.Lock()
				ps[r].took += time.Since(t0)
				mu.Unlock()
				return row, err
			}})
		}
	}
	order := schedule(at)
	sorted := make([]job[[]byte], len(all))
	for k, j := range order {
		sorted[k] = all[j]
	}
	out, err := runJobs(Config{Jobs: jobs, Progress: progress}, sorted)
	if err != nil {
		return nil, err // runJobs names the experiment and the point
	}
	rows := make([][][]byte, len(runs))
	for r := range runs {
		rows[r] = make([][]byte, len(ps[r].d.pts))
	}
	for k, j := range order {
		rows[at[j].run][at[j].point] = out[k]
	}
	reports := make([]*Report, len(runs))
	for r, b := range runs {
		rep, err := b.Experiment.merge(ps[r].cfg, rows[r])
		if err != nil {
			return nil, err
		}
		first := ps[r].first
		if first.IsZero() {
			first = start
		}
		rep.Wall, rep.PointTime, rep.Points = time.Since(first), ps[r].took, len(ps[r].d.pts)
		reports[r] = rep
	}
	return reports, nil
}

// scheduled is a point of a batch: its run, its index in the run's plan,
// and its bed's size.
type scheduled struct {
	run, point int
	hosts      int
}

// schedule returns the order in which a batch starts its points, as
// indices into pts: largest bed (most hosts) first, ties in run order and
// then plan order. A point's time grows with its bed (more hosts, more
// packets per simulated second), so this is longest first, roughly,
// without running anything to find out. The order changes only when
// points start, never a row: every row lands at its own run and index.
func schedule(pts []scheduled) []int {
	order := make([]int, len(pts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(pts[b].hosts, pts[a].hosts)
	})
	return order
}

var bedSizes sync.Map // lab name -> hosts

// bedHosts returns how many hosts the built-in lab name has (0 if it does
// not resolve: the point's run says why).
func bedHosts(name string) int {
	if n, ok := bedSizes.Load(name); ok {
		return n.(int)
	}
	n := 0
	if lab, err := labs.Resolve(name); err == nil {
		n = len(lab.Topology().Hosts)
	}
	bedSizes.Store(name, n)
	return n
}
