package experiment

import (
	"strings"
	"testing"
	"time"
)

func seq(n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	return ids
}

func TestSizeTasks(t *testing.T) {
	const s = time.Second
	uniform := func(n int, d time.Duration) map[int]time.Duration {
		m := map[int]time.Duration{}
		for i := range n {
			m[i] = d
		}
		return m
	}
	for _, tc := range []struct {
		name     string
		ids      []int
		cost     map[int]time.Duration
		maxArray int
		perTask  int
		want     TaskSizing
		err      string
	}{
		// The case: 420 points of about half a second.
		{"short points packed", seq(420), uniform(420, s/2), 0, 0, TaskSizing{PerTask: 120, Tasks: 4, Longest: 60 * s}, ""},
		{"long points alone", seq(10), uniform(10, 5*time.Minute), 0, 0, TaskSizing{PerTask: 1, Tasks: 10, Longest: 5 * time.Minute}, ""},
		{"unknown cost: one each", seq(5), nil, 0, 0, TaskSizing{PerTask: 1, Tasks: 5}, ""},
		// Points not probed cost as much as the dearest probed one.
		{"fallback to the largest estimate", seq(4), map[int]time.Duration{0: 10 * s, 1: 30 * s}, 0, 0, TaskSizing{PerTask: 3, Tasks: 2, Longest: 70 * s}, ""},
		// --seeds 50 of a 21-case plan: ids up to 1049 do not fit
		// Slurm's default array, so two points go in each task.
		{"past MaxArraySize", seq(1050), uniform(1050, 2*time.Minute), 0, 0, TaskSizing{PerTask: 2, Tasks: 525, Longest: 4 * time.Minute}, ""},
		{"cluster's own limit", seq(100), uniform(100, 2*time.Minute), 40, 0, TaskSizing{PerTask: 3, Tasks: 34, Longest: 6 * time.Minute}, ""},
		{"fixed per task", seq(6), uniform(6, s), 0, 4, TaskSizing{PerTask: 4, Tasks: 2, Longest: 4 * s}, ""},
		{"fixed per task past the limit", seq(1050), nil, 0, 1, TaskSizing{}, "use --per-task 2 or more"},
		// A rerun of points 1000-1001 alone: the ids, not their number,
		// must fit when each point is its own task.
		{"high ids alone", []int{1000, 1001}, uniform(1002, 10*time.Minute), 0, 1, TaskSizing{}, "MaxArraySize 1001"},
		{"high ids packed", []int{1000, 1001}, uniform(1002, 10*time.Minute), 0, 0, TaskSizing{PerTask: 2, Tasks: 1, Longest: 20 * time.Minute}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SizeTasks(tc.ids, tc.cost, DefaultMinTask, tc.maxArray, tc.perTask)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestTimeLimit(t *testing.T) {
	for _, tc := range []struct {
		longest time.Duration
		want    string
	}{
		{0, "0:01:00"},
		{time.Second, "0:02:00"},
		{time.Minute, "0:03:00"},
		{50 * time.Minute, "1:41:00"},
	} {
		if got := TimeLimit(tc.longest); got != tc.want {
			t.Errorf("TimeLimit(%v) = %s, want %s", tc.longest, got, tc.want)
		}
	}
}
