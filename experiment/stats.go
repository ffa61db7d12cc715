package experiment

import (
	"fmt"
	"math"
	"sort"
	"strconv"
)

// Stat summarises one figure over a case's seeds.
type Stat struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// N counts the seeds with a figure (NaNs, for runs that measured
	// nothing, are left out).
	N int `json:"n"`
}

// statOf summarises xs; the median of an even count is the mean of the
// two middle values.
func statOf(xs []float64) Stat {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return Stat{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	sort.Float64s(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return Stat{Median: m, Min: v[0], Max: v[len(v)-1], N: len(v)}
}

// cell formats a stat for a table: "median (min–max)", or the median
// alone when every seed gave the same figure.
func (s Stat) cell(format func(float64) string) string {
	if s.N == 0 {
		return "-"
	}
	f := func(x float64) string {
		if math.IsInf(x, 1) {
			return "never" // a time that never came
		}
		return format(x)
	}
	if f(s.Min) == f(s.Max) {
		return f(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.Median), f(s.Min), f(s.Max))
}

// goal is a check's rule: the median must reach median, and every seed
// floor (the seeds' own figure; mrlab's target may be stricter), at least
// or at most.
type goal struct {
	median, floor float64
	atLeast       bool
}

func (g goal) met(s Stat) bool {
	if s.N == 0 {
		return false
	}
	if g.atLeast {
		return s.Median >= g.median && s.Min >= g.floor
	}
	return s.Median <= g.median && s.Max <= g.floor
}

// sharpen returns f, except that a figure f would print exactly as it
// prints target while the two differ gets as many significant digits as
// it takes to tell them apart: a miss by a few millionths must not read
// "1.000, missed".
func sharpen(f func(float64) string, target float64) func(float64) string {
	return func(x float64) string {
		s := f(x)
		if x == target || math.IsNaN(x) || math.IsInf(x, 0) || s != f(target) {
			return s
		}
		for p := 4; p <= 17; p++ {
			a, b := strconv.FormatFloat(x, 'g', p, 64), strconv.FormatFloat(target, 'g', p, 64)
			if a != b {
				return a
			}
		}
		return s
	}
}

// statCheck checks s against g; f formats the figures (sharpened against
// the target's median when the check is missed).
func statCheck(what, target string, s Stat, g goal, f func(float64) string) Check {
	c := Check{What: what, Target: target, Median: Float(s.Median), Min: Float(s.Min), Max: Float(s.Max), Seeds: s.N, Met: g.met(s)}
	if !c.Met {
		f = sharpen(f, g.median)
	}
	c.Measured = fmt.Sprintf("%s over %d seeds", s.cell(f), s.N)
	switch {
	case s.N == 0:
		c.Measured, c.Note = "nothing measured", "no seed gave a figure"
	case c.Met:
	case g.atLeast && s.Median < g.median:
		c.Note = fmt.Sprintf("median short by %s", sharpen(f, 0)(g.median-s.Median))
	case g.atLeast:
		c.Note = fmt.Sprintf("worst seed %s, below %s", f(s.Min), f(g.floor))
	case math.IsInf(s.Median, 1):
		c.Note = "the median seed never got there"
	case s.Median > g.median:
		c.Note = fmt.Sprintf("median over by %s", sharpen(f, 0)(s.Median-g.median))
	default:
		c.Note = fmt.Sprintf("worst seed %s, above %s", f(s.Max), f(g.floor))
	}
	return c
}

// group collects rows by case key, keeping the order in which cases first
// appear.
type group[R any] struct {
	keys []string
	rows map[string][]R
}

func groupBy[R any](rows []R, key func(R) string) group[R] {
	g := group[R]{rows: map[string][]R{}}
	for _, r := range rows {
		k := key(r)
		if _, ok := g.rows[k]; !ok {
			g.keys = append(g.keys, k)
		}
		g.rows[k] = append(g.rows[k], r)
	}
	return g
}

// statRows summarises one figure over rows.
func statRows[R any](rows []R, f func(R) float64) Stat {
	xs := make([]float64, len(rows))
	for i, r := range rows {
		xs[i] = f(r)
	}
	return statOf(xs)
}

// dataCell says whether every seed's data check passed: "ok", or how many
// failed (runs that failed are "not checked").
func dataCell(ok []bool, failed []bool) string {
	bad, unchecked := 0, 0
	for i := range ok {
		switch {
		case failed[i]:
			unchecked++
		case !ok[i]:
			bad++
		}
	}
	switch {
	case bad > 0:
		return fmt.Sprintf("FAIL (%d of %d)", bad, len(ok))
	case unchecked == len(ok):
		return "not checked"
	case unchecked > 0:
		return fmt.Sprintf("ok (%d not checked)", unchecked)
	}
	return "ok"
}

// pct formats a fraction as a percentage.
func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// f1, f2 and f3 format a float with one, two or three decimals; n0 a
// count.
func f1(f float64) string { return fmt.Sprintf("%.1f", f) }
func f2(f float64) string { return fmt.Sprintf("%.2f", f) }
func f3(f float64) string { return fmt.Sprintf("%.3f", f) }
func n0(f float64) string { return fmt.Sprintf("%.0f", f) }

// speedupFmt formats a ratio as "1.23x".
func speedupFmt(f float64) string { return fmt.Sprintf("%.2fx", f) }

// errorsCell sums application errors (failed completions) over the seeds
// and says how many runs failed outright (a QP in error, a timeout).
func errorsCell[R any](rows []R, f func(R) (int, string)) string {
	n, failed := 0, 0
	for _, r := range rows {
		e, s := f(r)
		n += e
		if s != "" {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Sprintf("%d; %d of %d runs failed", n, failed, len(rows))
	}
	return fmt.Sprint(n)
}

// dataCellRows is dataCell over rows: f gives a row's data check and its
// run's error.
func dataCellRows[R any](rows []R, f func(R) (bool, string)) string {
	ok := make([]bool, len(rows))
	failed := make([]bool, len(rows))
	for i, r := range rows {
		var e string
		ok[i], e = f(r)
		failed[i] = e != ""
	}
	return dataCell(ok, failed)
}
