package experiment

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A sweep directory holds one plan's points, wherever they ran (a shared
// file system for a cluster, or files copied back):
//
//	plan.json           the plan (WritePlan)
//	point-ID.json       a point's result (WriteResult)
//	point-ID.running    a point being run: where, since when (MarkRunning)
//	point-ID.failed     a point that failed or was stopped, and why (MarkFailed)
//
// Every file is written to a temporary name and renamed, so a reader sees
// a whole file or none, and a rerun replaces a result with an equal one.

// PlanFile is the plan's name in a sweep directory.
const PlanFile = "plan.json"

func resultFile(id int) string  { return fmt.Sprintf("point-%d.json", id) }
func runningFile(id int) string { return fmt.Sprintf("point-%d.running", id) }
func failedFile(id int) string  { return fmt.Sprintf("point-%d.failed", id) }

// writeAtomic writes b to dir/name through a temporary file and a rename.
func writeAtomic(dir, name string, b []byte) error {
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// WritePlan writes p into dir (created if missing) as plan.json. A dir
// that already holds another plan is refused: its points would mix.
func WritePlan(dir string, p *Plan) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing the plan: %w", err)
	}
	old, err := ReadPlan(dir)
	switch {
	case err == nil && old.ID == p.ID:
		return nil
	case err == nil:
		return fmt.Errorf("%s holds %s, not %s: use another directory, or remove it", dir, old.Describe(), p.Describe())
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	b, err := MarshalPlan(p)
	if err != nil {
		return err
	}
	if err := writeAtomic(dir, PlanFile, b); err != nil {
		return fmt.Errorf("writing the plan into %s: %w", dir, err)
	}
	return nil
}

// ReadPlan reads dir's plan.json; a missing one is an error wrapping
// fs.ErrNotExist.
func ReadPlan(dir string) (*Plan, error) {
	path := filepath.Join(dir, PlanFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the plan: %w", err)
	}
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if p.ID == "" || p.Experiment == "" {
		return nil, fmt.Errorf("reading %s: not a plan (no experiment or plan id)", path)
	}
	return &p, nil
}

// WriteResult writes r into dir as point-ID.json and removes the point's
// running and failed marks.
func WriteResult(dir string, r *PointResult) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding point %d: %w", r.Point, err)
	}
	if err := writeAtomic(dir, resultFile(r.Point), append(b, '\n')); err != nil {
		return fmt.Errorf("writing point %d: %w", r.Point, err)
	}
	os.Remove(filepath.Join(dir, runningFile(r.Point)))
	os.Remove(filepath.Join(dir, failedFile(r.Point)))
	return nil
}

// ReadResults reads every point-*.json in dir, in file-name order.
func ReadResults(dir string) ([]*PointResult, error) {
	names, err := filepath.Glob(filepath.Join(dir, "point-*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []*PointResult
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("reading a point's result: %w", err)
		}
		r := &PointResult{}
		if err := json.Unmarshal(b, r); err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		r.File = name
		out = append(out, r)
	}
	return out, nil
}

// Mark says who runs a point, or why it failed.
type Mark struct {
	Point int    `json:"point"`
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	Since string `json:"since"`
	// Job is the scheduler's name for the job, e.g. Slurm's "123_7".
	Job string `json:"job,omitempty"`
	// Reason says why the point failed (failed marks only).
	Reason string `json:"reason,omitempty"`
}

// NewMark returns a mark for point id run by this process; job names the
// scheduler's job ("" for none).
func NewMark(id int, job string) Mark {
	host, _ := os.Hostname()
	return Mark{Point: id, Host: host, PID: os.Getpid(), Since: time.Now().UTC().Format(time.RFC3339), Job: job}
}

// MarkRunning records that m's point is being run, and clears an earlier
// failure.
func MarkRunning(dir string, m Mark) error {
	b, _ := json.Marshal(m)
	if err := writeAtomic(dir, runningFile(m.Point), append(b, '\n')); err != nil {
		return fmt.Errorf("marking point %d running: %w", m.Point, err)
	}
	os.Remove(filepath.Join(dir, failedFile(m.Point)))
	return nil
}

// MarkFailed records that m's point failed for reason.
func MarkFailed(dir string, m Mark, reason string) error {
	m.Reason = reason
	b, _ := json.Marshal(m)
	if err := writeAtomic(dir, failedFile(m.Point), append(b, '\n')); err != nil {
		return fmt.Errorf("marking point %d failed: %w", m.Point, err)
	}
	os.Remove(filepath.Join(dir, runningFile(m.Point)))
	return nil
}

func readMark(path string) (Mark, bool) {
	var m Mark
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &m) != nil {
		return m, false
	}
	return m, true
}

// Point states, as Status reports them.
const (
	StateDone    = "done"
	StateRunning = "running"
	StateFailed  = "failed"
	StateMissing = "missing"
)

// PointStatus is one point's state in a sweep directory.
type PointStatus struct {
	ID      int
	Command string
	State   string
	// Detail says where it ran or runs, and why it failed.
	Detail string
}

// SweepStatus is a sweep directory's state: every point of its plan, and
// result files that do not belong to it.
type SweepStatus struct {
	Plan   *Plan
	Points []PointStatus
	// Foreign lists result files of another plan or unreadable ones.
	Foreign []string
}

// Count returns how many points are in state.
func (s *SweepStatus) Count(state string) int {
	n := 0
	for _, p := range s.Points {
		if p.State == state {
			n++
		}
	}
	return n
}

// IDs returns the ids of the points in any of states.
func (s *SweepStatus) IDs(states ...string) []int {
	var out []int
	for _, p := range s.Points {
		for _, st := range states {
			if p.State == st {
				out = append(out, p.ID)
			}
		}
	}
	return out
}

// Status reads dir's plan and files: a point is done when its result is
// there (and of the plan), failed when it has a failed mark, or a running
// mark left by a process of this host that is gone, running when it has
// a running mark, and missing otherwise (not started, or lost with no
// word: a job killed outright on another host).
func Status(dir string) (*SweepStatus, error) {
	p, err := ReadPlan(dir)
	if err != nil {
		return nil, err
	}
	st := &SweepStatus{Plan: p}
	done := map[int]*PointResult{}
	names, err := filepath.Glob(filepath.Join(dir, "point-*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	for _, name := range names {
		var r PointResult
		b, err := os.ReadFile(name)
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		switch {
		case err != nil:
			st.Foreign = append(st.Foreign, fmt.Sprintf("%s: %v", name, err))
		case r.Plan != p.ID || r.Point < 0 || r.Point >= len(p.Points):
			st.Foreign = append(st.Foreign, fmt.Sprintf("%s: point %d of %s %s (scale %s, seeds %s)", name, r.Point, r.Experiment, r.Plan, r.Scale, seedList(r.Seeds)))
		default:
			r.File = name
			done[r.Point] = &r
		}
	}
	host, _ := os.Hostname()
	for _, pt := range p.Points {
		ps := PointStatus{ID: pt.ID, Command: pt.Command, State: StateMissing}
		if r, ok := done[pt.ID]; ok {
			ps.State, ps.Detail = StateDone, fmt.Sprintf("on %s in %.1fs", r.Host, r.WallSeconds)
		} else if m, ok := readMark(filepath.Join(dir, failedFile(pt.ID))); ok {
			ps.State, ps.Detail = StateFailed, m.Reason+markWhere(m)
		} else if m, ok := readMark(filepath.Join(dir, runningFile(pt.ID))); ok {
			ps.State, ps.Detail = StateRunning, "since "+m.Since+markWhere(m)
			if m.Host == host && !alive(m.PID) {
				ps.State, ps.Detail = StateFailed, fmt.Sprintf("process %d is gone without a result (killed?)%s", m.PID, markWhere(m))
			}
		}
		st.Points = append(st.Points, ps)
	}
	return st, nil
}

func markWhere(m Mark) string {
	s := " on " + m.Host + " (pid " + strconv.Itoa(m.PID)
	if m.Job != "" {
		s += ", job " + m.Job
	}
	return s + ")"
}

// alive reports whether a process of this host is there.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Summary is one line: "12 points: 10 done, 1 running, 1 failed, 0
// missing".
func (s *SweepStatus) Summary() string {
	var parts []string
	for _, st := range []string{StateDone, StateRunning, StateFailed, StateMissing} {
		parts = append(parts, fmt.Sprintf("%d %s", s.Count(st), st))
	}
	return fmt.Sprintf("%d points: %s", len(s.Points), strings.Join(parts, ", "))
}
