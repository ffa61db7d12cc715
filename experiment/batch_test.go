package experiment

import (
	"bytes"
	"errors"
	"testing"
)

// TestBatchMatchesPoints runs three experiment runs (two experiments, one
// of them twice with other seeds) as one batch, one and three simulations
// at a time, and wants every report's CSV, JSON and Markdown section byte
// for byte as merging its points run one by one (RunPoint, each planning
// the experiment afresh): the pool, its order and what runs beside a
// point change no figure.
func TestBatchMatchesPoints(t *testing.T) {
	pf, _ := Lookup("plane-failure")
	cg, _ := Lookup("congestion")
	runs := []Batch{
		{pf, Config{Seed: 3, Seeds: 2, Scale: Tiny}},
		{cg, Config{Seed: 1, Seeds: 1, Scale: Tiny}},
		{pf, Config{Seed: 7, Seeds: 1, Scale: Tiny}},
	}
	var want [][3][]byte
	for _, b := range runs {
		p, err := b.Experiment.Plan(b.Config)
		if err != nil {
			t.Fatal(err)
		}
		var results []*PointResult
		for i := range p.Points {
			r, err := b.Experiment.RunPoint(b.Config, i)
			if err != nil {
				t.Fatal(err)
			}
			results = append(results, r)
		}
		rep, err := b.Experiment.Merge(b.Config, results)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, batchBytes(t, rep))
	}
	for _, jobs := range []int{1, 3} {
		got, err := RunBatch(runs, jobs, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(runs) {
			t.Fatalf("jobs %d: %d reports for %d runs", jobs, len(got), len(runs))
		}
		for i, rep := range got {
			if rep.Experiment != runs[i].Experiment.Name || rep.Seeds[0] != runs[i].Config.Seed {
				t.Errorf("jobs %d: report %d is %s seeds %v, want run %d's", jobs, i, rep.Experiment, rep.Seeds, i)
			}
			if rep.Wall <= 0 || rep.PointTime <= 0 || rep.Points != len(runs[i].Config.seeds())*map[string]int{"plane-failure": 2, "congestion": 6}[rep.Experiment] {
				t.Errorf("jobs %d: report %d: wall %v, point time %v, %d points", jobs, i, rep.Wall, rep.PointTime, rep.Points)
			}
			g := batchBytes(t, rep)
			for k, what := range []string{"CSV", "JSON", "Markdown"} {
				if !bytes.Equal(g[k], want[i][k]) {
					t.Errorf("jobs %d: run %d (%s): %s differs from the points merged one by one:\nbatch:\n%s\npoints:\n%s",
						jobs, i, rep.Experiment, what, g[k], want[i][k])
				}
			}
		}
	}
}

// batchBytes is a report's CSV, JSON and Markdown section, without the
// timing line's figures.
func batchBytes(t *testing.T, r *Report) [3][]byte {
	t.Helper()
	c, j := reportBytes(t, r)
	x := *r
	x.Wall, x.PointTime = 0, 0
	var m bytes.Buffer
	if err := WriteMarkdown(&m, []*Report{&x}, "results"); err != nil {
		t.Fatal(err)
	}
	return [3][]byte{c, j, m.Bytes()}
}

// TestSchedule: the largest beds start first, ties in run order, then
// plan order.
func TestSchedule(t *testing.T) {
	pts := []scheduled{
		{run: 0, point: 0, hosts: 2},
		{run: 0, point: 1, hosts: 16},
		{run: 1, point: 0, hosts: 64},
		{run: 1, point: 1, hosts: 2},
		{run: 2, point: 0, hosts: 16},
		{run: 2, point: 1, hosts: 64},
	}
	got := schedule(pts)
	want := []int{2, 5, 1, 4, 0, 3}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("schedule = %v, want %v", got, want)
		}
	}
	if n := bedHosts("collectives/lossy"); n != 64 {
		t.Errorf("collectives/lossy has %d hosts, want 64", n)
	}
	if n := bedHosts("regimes/b2b"); n != 2 {
		t.Errorf("regimes/b2b has %d hosts, want 2", n)
	}
}

// TestRunJobsNamesFailure: a failed point's error names its experiment
// and the point, the first failure in job order whatever ran beside it.
func TestRunJobsNamesFailure(t *testing.T) {
	boom := errors.New("boom")
	jobs := []job[[]byte]{
		{exp: "incast", name: "p0", run: func() ([]byte, error) { return []byte("r"), nil }},
		{exp: "regimes", name: "p1", run: func() ([]byte, error) { return nil, boom }},
		{exp: "incast", name: "p2", run: func() ([]byte, error) { return nil, errors.New("later") }},
	}
	_, err := runJobs(Config{Jobs: 3}, jobs)
	if !errors.Is(err, boom) || err.Error() != "experiment regimes: p1: boom" {
		t.Fatalf("err = %v, want experiment regimes: p1: boom", err)
	}
}
