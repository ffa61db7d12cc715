package experiment

import (
	"bytes"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"
)

// An experiment is a sweep of points, run in three steps that may happen
// in different processes on different machines:
//
//   - plan: the points, as data (Experiment.Plan);
//   - point: run one point and encode its row (Experiment.RunPoint);
//   - merge: decode every point's row, in plan order, and build the
//     report (Experiment.Merge).
//
// Experiment.Run is the three in one process, the points on the local
// cores, so a report merged from points run anywhere is the report of a
// local run, byte for byte: both decode the same encoded rows.
//
// An experiment's run function hands its points to the sweep through
// runCases, once; what runCases does with them is the driver's choice:
// keep them and the function that runs one (planDriver: a plan, a point
// or a batch runs them from there, so an experiment is planned once
// however many of its points run), or decode rows run elsewhere
// (mergeDriver).

// driver decides what runCases does with an experiment's points: run is
// the function that runs point i and returns its row encoded.
type driver interface {
	rows(pts []Point, run func(i int) ([]byte, error)) ([][]byte, error)
}

// errStop ends an experiment's run function once its driver has what it
// wanted from runCases (the points and their run function).
var errStop = errors.New("sweep stopped after runCases")

// planDriver keeps the points and the function that runs one (a batch
// runs them later, from many goroutines: runCases' run function only
// reads what it closes over, and every point builds its own simulation).
type planDriver struct {
	pts []Point
	run func(i int) ([]byte, error)
}

func (d *planDriver) rows(pts []Point, run func(int) ([]byte, error)) ([][]byte, error) {
	d.pts, d.run = pts, run
	return nil, errStop
}

// mergeDriver hands over rows run elsewhere, in plan order.
type mergeDriver struct{ enc [][]byte }

func (d mergeDriver) rows(pts []Point, _ func(int) ([]byte, error)) ([][]byte, error) {
	if len(pts) != len(d.enc) {
		return nil, fmt.Errorf("%d rows for a plan of %d points", len(d.enc), len(pts))
	}
	return d.enc, nil
}

// runCases hands the experiment's points to cfg's driver: every case with
// every seed of cfg, case by case, seeds in order within a case. point
// gives the simulation, measure runs it and makes the row. Rows come back
// in that order.
func runCases[C, R any](cfg Config, exp string, cases []C, point func(c C, seed uint64) Point, measure func(c C, p Point) (R, error)) ([]R, error) {
	var cs []C
	var pts []Point
	for _, c := range cases {
		for _, seed := range cfg.seeds() {
			p := point(c, seed)
			p.Spec.Payload = cfg.Payload            // results do not depend on it
			p.parts, p.partsAuto = cfg.partitions() // nor on this
			p.WhatIf = p.WhatIf.with(cfg.WhatIf)
			cs, pts = append(cs, c), append(pts, p)
		}
	}
	if cfg.drive == nil {
		return nil, fmt.Errorf("%s: no sweep driver (run an experiment with Run, Plan, RunPoint or Merge)", exp)
	}
	enc, err := cfg.drive.rows(pts, func(i int) ([]byte, error) {
		r, err := measure(cs[i], pts[i])
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		if err := gob.NewEncoder(&b).Encode(&r); err != nil {
			return nil, fmt.Errorf("encoding the row of %s: %w", pts[i].Command(), err)
		}
		return b.Bytes(), nil
	})
	if err != nil {
		return nil, err
	}
	rows := make([]R, len(enc))
	for i, b := range enc {
		if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&rows[i]); err != nil {
			return nil, fmt.Errorf("decoding the row of point %d (%s): %w", i, pts[i].Command(), err)
		}
	}
	return rows, nil
}

// Plan is an experiment's points for one scale and set of seeds.
type Plan struct {
	Experiment string   `json:"experiment"`
	Scale      string   `json:"scale"`
	Seeds      []uint64 `json:"seeds"`
	// WhatIf is the run's change to every bed, if any.
	WhatIf WhatIf `json:"what_if,omitzero"`
	// ID names the plan: a hash of the experiment, scale, seeds, what-if
	// and every point's command. Point results carry it; a merge refuses
	// results of another plan.
	ID string `json:"plan"`
	// Args are the mrlab arguments that select this plan; a point runs
	// with Args + "--point ID --out DIR".
	Args   []string    `json:"args"`
	Points []PlanPoint `json:"points"`
}

// PlanPoint is one point of a plan.
type PlanPoint struct {
	ID   int    `json:"id"`
	Lab  string `json:"lab"`
	Seed uint64 `json:"seed"`
	// Command is the `mrlab sim` command that runs the same simulation.
	Command string `json:"command"`
}

// Config returns the experiment and configuration the plan was made
// with.
func (p *Plan) Config() (Experiment, Config, error) {
	e, err := Lookup(p.Experiment)
	if err != nil {
		return e, Config{}, err
	}
	s, err := ParseScale(p.Scale)
	if err != nil {
		return e, Config{}, err
	}
	if len(p.Seeds) == 0 {
		return e, Config{}, fmt.Errorf("plan %s lists no seeds", p.ID)
	}
	return e, Config{Seed: p.Seeds[0], Seeds: len(p.Seeds), Scale: s, WhatIf: p.WhatIf}, nil
}

// Describe names the plan for people: "loss-sweep (scale tiny, seeds 1-2,
// plan 0123abcd4567)", with "what-if --set ..." before the plan id when
// it has one.
func (p *Plan) Describe() string {
	return describePlan(p.Experiment, p.Scale, p.Seeds, p.WhatIf, p.ID)
}

func describePlan(exp, scale string, seeds []uint64, w WhatIf, id string) string {
	what := ""
	if !w.IsZero() {
		what = ", what-if " + w.String()
	}
	return fmt.Sprintf("%s (scale %s, seeds %s%s, plan %s)", exp, scale, seedList(seeds), what, id)
}

// Invocation returns the mrlab command that selects the plan, quoted
// for a shell.
func (p *Plan) Invocation() string { return "mrlab " + shellJoin(p.Args) }

// PointArgs returns the mrlab arguments that run point id into dir.
func (p *Plan) PointArgs(id int, dir string) []string {
	return append(append([]string(nil), p.Args...), "--point", strconv.Itoa(id), "--out", dir)
}

// Plan returns the experiment's points for cfg (Jobs and Progress do not
// matter), without running any. A what-if is checked here: its flags, the
// settings the experiment varies, and every bed with it applied; an error
// wraps ErrWhatIf and names the flag (and the bed).
func (e Experiment) Plan(cfg Config) (*Plan, error) {
	p, _, err := e.planRun(cfg, true)
	return p, err
}

// plan is Plan; checkBeds resolves every bed with the what-if (RunPoint
// and Merge skip it: a point resolves its own bed, and Run planned first).
func (e Experiment) plan(cfg Config, checkBeds bool) (*Plan, error) {
	p, _, err := e.planRun(cfg, checkBeds)
	return p, err
}

// planRun is plan, and also returns the points and the function that
// runs point i and returns its row encoded, as RunPoint's would be.
func (e Experiment) planRun(cfg Config, checkBeds bool) (*Plan, *planDriver, error) {
	cfg = cfg.withDefaults()
	if err := cfg.WhatIf.check(e); err != nil {
		return nil, nil, err
	}
	d := &planDriver{}
	cfg.drive = d
	if _, err := e.run(cfg); !errors.Is(err, errStop) {
		if err == nil {
			err = errors.New("it never handed its points to runCases")
		}
		return nil, nil, fmt.Errorf("planning experiment %s: %w", e.Name, err)
	}
	if checkBeds && !cfg.WhatIf.IsZero() {
		if err := cfg.WhatIf.checkBeds(e, d.pts); err != nil {
			return nil, nil, err
		}
	}
	p := &Plan{Experiment: e.Name, Scale: cfg.Scale.String(), Seeds: cfg.seeds(), WhatIf: cfg.WhatIf,
		Args: append([]string{"experiment", e.Name, "--scale", cfg.Scale.String(), "--seed", strconv.FormatUint(cfg.Seed, 10), "--seeds", strconv.Itoa(cfg.Seeds)},
			cfg.WhatIf.Args()...)}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%v\n", p.Experiment, p.Scale, p.Seeds)
	if !cfg.WhatIf.IsZero() {
		fmt.Fprintf(h, "what-if %q\n", cfg.WhatIf.Args())
	}
	for i, pt := range d.pts {
		c := pt.Command()
		p.Points = append(p.Points, PlanPoint{ID: i, Lab: pt.Lab, Seed: pt.Seed, Command: c})
		fmt.Fprintf(h, "%s\n", c)
	}
	p.ID = hex.EncodeToString(h.Sum(nil))[:16]
	return p, d, nil
}

// ResultFormat is the version of PointResult's encoding.
const ResultFormat = 1

// PointResult is one point's outcome: its row, encoded, and where it
// came from.
type PointResult struct {
	Format     int      `json:"format"`
	Experiment string   `json:"experiment"`
	Scale      string   `json:"scale"`
	Seeds      []uint64 `json:"seeds"`
	// WhatIf is the plan's, for people reading the file and errors.
	WhatIf  WhatIf `json:"what_if,omitzero"`
	Plan    string `json:"plan"`
	Point   int    `json:"point"`
	Command string `json:"command"`
	// Build names the mrlab that ran the point (Go version, platform, VCS
	// revision): a merge refuses points of different builds, since only
	// the same build promises the same rows.
	Build string `json:"build"`
	Host  string `json:"host"`
	// WallSeconds is how long the point took; it is not part of the
	// report.
	WallSeconds float64 `json:"wall_seconds"`
	// Row is the experiment's row (gob: exact for every float, NaN and
	// infinities included, and for the plot data the report's JSON leaves
	// out).
	Row []byte `json:"row"`

	// File is where the result was read from, for errors.
	File string `json:"-"`
}

// RunPoint runs point id of the plan for cfg and returns its result.
func (e Experiment) RunPoint(cfg Config, id int) (*PointResult, error) {
	p, d, err := e.planRun(cfg, false)
	if err != nil {
		return nil, err
	}
	if id < 0 || id >= len(d.pts) {
		return nil, fmt.Errorf("experiment %s, point %d: no point %d (the plan has points 0-%d)", e.Name, id, id, len(d.pts)-1)
	}
	start := time.Now()
	row, err := d.run(id)
	if err != nil {
		return nil, fmt.Errorf("experiment %s, point %d: %w", e.Name, id, err)
	}
	host, _ := os.Hostname()
	return &PointResult{Format: ResultFormat, Experiment: e.Name, Scale: p.Scale, Seeds: p.Seeds, WhatIf: p.WhatIf, Plan: p.ID,
		Point: id, Command: p.Points[id].Command, Build: Build(), Host: host,
		WallSeconds: time.Since(start).Seconds(), Row: row}, nil
}

// Merge builds the report from every point's result. It refuses results
// of another plan, a point given twice or missing, and points of
// different builds, naming them.
func (e Experiment) Merge(cfg Config, results []*PointResult) (*Report, error) {
	p, err := e.plan(cfg, false)
	if err != nil {
		return nil, err
	}
	rows, err := p.order(results)
	if err != nil {
		return nil, err
	}
	return e.merge(cfg, rows)
}

// merge builds the report from every point's encoded row, in plan order.
func (e Experiment) merge(cfg Config, rows [][]byte) (*Report, error) {
	cfg = cfg.withDefaults()
	cfg.drive = mergeDriver{enc: rows}
	r, err := e.run(cfg)
	if err != nil {
		return nil, fmt.Errorf("experiment %s: %w", e.Name, err)
	}
	r.Experiment, r.Title, r.Claim, r.Target = e.Name, e.Title, e.Claim, e.Target
	r.Seeds, r.Scale, r.WhatIf = cfg.seeds(), cfg.Scale.String(), cfg.WhatIf
	r.SanityFailures = sanityFailures(r.Rows)
	if !cfg.WhatIf.IsZero() {
		// A plot travels alone: it says so too.
		for i := range r.plots {
			r.plots[i].title += "\nwhat-if, not the standard results: " + cfg.WhatIf.String()
		}
	}
	return r, nil
}

// order checks results against the plan and returns their rows in plan
// order.
func (p *Plan) order(results []*PointResult) ([][]byte, error) {
	name := func(r *PointResult) string {
		if r.File != "" {
			return r.File
		}
		return fmt.Sprintf("the result of point %d", r.Point)
	}
	rows := make([][]byte, len(p.Points))
	from := make([]*PointResult, len(p.Points))
	builds := map[string][]int{}
	for _, r := range results {
		switch {
		case r.Format != ResultFormat:
			return nil, fmt.Errorf("%s: result format %d, want %d", name(r), r.Format, ResultFormat)
		case r.Plan != p.ID:
			return nil, fmt.Errorf("%s is from another plan: %s, not %s",
				name(r), describePlan(r.Experiment, r.Scale, r.Seeds, r.WhatIf, r.Plan), p.Describe())
		case r.Point < 0 || r.Point >= len(p.Points):
			return nil, fmt.Errorf("%s: point %d is not in %s (points 0-%d)", name(r), r.Point, p.Describe(), len(p.Points)-1)
		case r.Command != p.Points[r.Point].Command:
			return nil, fmt.Errorf("%s: point %d ran %q, the plan says %q", name(r), r.Point, r.Command, p.Points[r.Point].Command)
		case from[r.Point] != nil:
			return nil, fmt.Errorf("point %d is there twice: %s and %s (remove one)", r.Point, name(from[r.Point]), name(r))
		}
		from[r.Point], rows[r.Point] = r, r.Row
		builds[r.Build] = append(builds[r.Build], r.Point)
	}
	var missing []int
	for i, r := range from {
		if r == nil {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s: %d of %d points have no result: %s (run them with --point ID, or --slurm --points %s)",
			p.Describe(), len(missing), len(p.Points), FormatIDs(missing), FormatIDs(missing))
	}
	if len(builds) > 1 {
		var parts []string
		for b, ids := range builds {
			parts = append(parts, fmt.Sprintf("%s: points %s", b, FormatIDs(ids)))
		}
		sort.Strings(parts)
		return nil, fmt.Errorf("%s: points ran on different mrlab builds (%s); rerun them with one build so that every row is that build's",
			p.Describe(), strings.Join(parts, "; "))
	}
	return rows, nil
}

// Run runs the experiment and returns its report: the plan, every point
// on the local cores (cfg.Jobs at a time), the merge. It is RunBatch of
// one run.
func (e Experiment) Run(cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	rs, err := RunBatch([]Batch{{Experiment: e, Config: cfg}}, cfg.Jobs, cfg.Progress)
	if err != nil {
		return nil, err
	}
	return rs[0], nil
}

// Build names this mrlab build: Go version, platform and, when the
// binary carries it, the VCS revision ("+dirty" for uncommitted changes,
// which it cannot tell apart).
func Build() string {
	s := runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return s
	}
	var rev, dirty string
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			rev = kv.Value
		case "vcs.modified":
			if kv.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		s += " " + rev[:min(12, len(rev))] + dirty
	}
	return s
}

// FormatIDs spells point ids as ranges: "0-3,7,9-10".
func FormatIDs(ids []int) string {
	ids = append([]int(nil), ids...)
	sort.Ints(ids)
	var parts []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", ids[i], ids[j]))
		} else {
			parts = append(parts, strconv.Itoa(ids[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// ParseIDs reads FormatIDs' spelling ("0-3,7"), checking every id is below
// n.
func ParseIDs(s string, n int) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a {
			return nil, fmt.Errorf("point list %q: %q is not an id or a range lo-hi", s, part)
		}
		if b >= n {
			return nil, fmt.Errorf("point list %q: %d is past the plan's last point, %d", s, b, n-1)
		}
		for i := a; i <= b; i++ {
			if !seen[i] {
				seen[i] = true
				out = append(out, i)
			}
		}
	}
	sort.Ints(out)
	return out, nil
}

// MarshalPlan writes the plan as indented JSON.
func MarshalPlan(p *Plan) ([]byte, error) {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding plan %s: %w", p.ID, err)
	}
	return append(b, '\n'), nil
}
