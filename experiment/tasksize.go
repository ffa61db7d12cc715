package experiment

import (
	"fmt"
	"slices"
	"time"
)

// DefaultMinTask is the shortest array task automatic sizing aims for.
// Slurm starts batch jobs in scheduling passes seconds apart and each job
// pays its own start-up (prolog, step creation, a fresh process), so a
// task of a few seconds spends most of its allocation waiting; a minute
// of work per task keeps that overhead to a few percent while a plan of
// hundreds of points still spreads over many nodes.
const DefaultMinTask = time.Minute

// DefaultMaxArraySize is Slurm's default MaxArraySize: array indices run
// from 0 to MaxArraySize-1.
const DefaultMaxArraySize = 1001

// TaskSizing is how a plan's points are packed into array tasks.
type TaskSizing struct {
	// PerTask is how many points each task runs, one after another.
	PerTask int
	// Tasks is the array's size.
	Tasks int
	// Longest is the estimated run time of the longest task (0 when no
	// point's cost is known).
	Longest time.Duration
}

// SizeTasks packs ids into array tasks. cost estimates each point's run
// time (points it does not hold get the largest estimate it has; with no
// estimate at all, every point is its own task). perTask > 0 fixes the
// number of points per task; 0 picks the smallest that makes an average
// task last at least minTask. Either way the array must fit under
// maxArray (0: Slurm's default): one task per point needs every point id
// below maxArray; automatic sizing packs more points per task until the
// tasks fit, a fixed perTask that does not fit is refused.
func SizeTasks(ids []int, cost map[int]time.Duration, minTask time.Duration, maxArray, perTask int) (TaskSizing, error) {
	if len(ids) == 0 {
		return TaskSizing{}, fmt.Errorf("sizing array tasks: no points")
	}
	if maxArray <= 0 {
		maxArray = DefaultMaxArraySize
	}
	var fallback, total time.Duration
	for _, c := range cost {
		fallback = max(fallback, c)
	}
	est := func(id int) time.Duration {
		if c, ok := cost[id]; ok {
			return c
		}
		return fallback
	}
	for _, id := range ids {
		total += est(id)
	}
	fits := func(k int) bool {
		if k == 1 {
			return slices.Max(ids) < maxArray
		}
		return (len(ids)+k-1)/k <= maxArray
	}
	k := perTask
	if k <= 0 {
		k = 1
		if mean := total / time.Duration(len(ids)); mean > 0 && minTask > 0 {
			k = int((minTask + mean - 1) / mean)
		}
		k = min(k, len(ids))
		for !fits(k) {
			k++
		}
	} else if !fits(k) {
		need := k
		for !fits(need) {
			need++
		}
		return TaskSizing{}, fmt.Errorf("%d points at %d per task make %d array tasks (or indices) past this cluster's MaxArraySize %d: use --per-task %d or more, or split the plan with --points",
			len(ids), k, (len(ids)+k-1)/k, maxArray, need)
	}
	s := TaskSizing{PerTask: k, Tasks: (len(ids) + k - 1) / k}
	for i := 0; i < len(ids); i += k {
		var d time.Duration
		for _, id := range ids[i:min(i+k, len(ids))] {
			d += est(id)
		}
		s.Longest = max(s.Longest, d)
	}
	return s, nil
}

// TimeLimit is the sbatch --time asked for a task estimated to run for
// longest on the machine that measured it: twice that (compute nodes may
// be slower or shared), plus a minute of start-up, rounded up to a whole
// minute, as H:MM:SS.
func TimeLimit(longest time.Duration) string {
	d := 2*longest + time.Minute
	m := int((d + time.Minute - 1) / time.Minute)
	return fmt.Sprintf("%d:%02d:00", m/60, m%60)
}
