package experiment

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"
)

// Report is one experiment's outcome: the setup it ran (with every
// scale-down spelled out), its rows, time series, and the checks of the
// measured figures against the targets.
type Report struct {
	Experiment string `json:"experiment"`
	Title      string `json:"title"`
	Claim      string `json:"claim"`
	Target     string `json:"target"`
	// Seeds are the seeds every case ran with.
	Seeds []uint64 `json:"seeds"`
	Scale string   `json:"scale"`
	// WhatIf is what the run changed in every bed, if anything: the
	// beds' settings in Setup no longer hold as written, and the report
	// is not the standard results.
	WhatIf WhatIf `json:"what_if,omitzero"`
	// Setup lists what ran: the beds (built-in labs), what each side had,
	// the workloads, what was scaled down and why.
	Setup []string `json:"setup"`
	// Rows is the experiment's typed rows (e.g. []LossRow), one per
	// simulation: a case with one seed, with the `mrlab sim` command that
	// reproduces it.
	Rows any `json:"rows"`
	// Series are the time series or curves the plots draw.
	Series []Series `json:"series,omitempty"`
	// Checks compare figures with the targets.
	Checks []Check `json:"checks"`
	// Notes explain the figures: what limits a transport, where a target
	// is missed and why.
	Notes []string `json:"notes,omitempty"`
	// SanityFailures are the runs whose goodput failed sanity on a
	// loss-free bed (the rows' Sanity: a collapse no bed explains), each
	// with the command that reproduces it. Any makes `mrlab experiment`
	// exit non-zero.
	SanityFailures []RunFailure `json:"sanity_failures,omitempty"`
	// Wall is how long the experiment took on this machine (in a batch,
	// beside other experiments' points: RunBatch), and PointTime the sum
	// of its Points points' run times. They are not part of the JSON,
	// which depends on the seed only.
	Wall      time.Duration `json:"-"`
	PointTime time.Duration `json:"-"`
	Points    int           `json:"-"`

	table Table
	plots []figure
}

// Check is one target checked against a figure measured over seeds: it is
// met only if the median meets the target and no seed falls below the
// seeds' own figure.
type Check struct {
	// What names the figure, e.g. "metaroce goodput at 1% loss".
	What string `json:"what"`
	// Target is the target in words, e.g. "median >= 90%, every seed >=
	// 86% of loss-free".
	Target string `json:"target"`
	// Measured is the figure as text: median (min-max) over the seeds.
	Measured string `json:"measured"`
	// Median, Min and Max are the figure over Seeds seeds.
	Median Float `json:"median"`
	Min    Float `json:"min"`
	Max    Float `json:"max"`
	Seeds  int   `json:"seeds"`
	// Met says whether the target was reached.
	Met bool `json:"met"`
	// Note says by how much a missed target was missed, or qualifies a
	// met one.
	Note string `json:"note,omitempty"`
}

// Float is a figure that may be undefined: NaN (no seed measured it) and
// ±Inf (never, as in a sender that never settled) are written to JSON as
// null.
type Float float64

// MarshalJSON writes f, or null when it is not finite.
func (f Float) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(f))
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// Series is one curve: points (X[i], Y[i]).
type Series struct {
	// Plot names the figure the series belongs to.
	Plot string `json:"plot"`
	// Name labels the curve (legend).
	Name string    `json:"name"`
	X    []float64 `json:"x"`
	Y    []float64 `json:"y"`
}

// Table is a report's rows as text cells, for the terminal and CSV.
type Table struct {
	Columns []string
	Rows    [][]string
}

func (t *Table) add(cells ...string) {
	if len(cells) != len(t.Columns) {
		panic(fmt.Sprintf("experiment table: row of %d cells for %d columns", len(cells), len(t.Columns)))
	}
	t.Rows = append(t.Rows, cells)
}

// Table returns the report's rows as text cells.
func (r *Report) Table() Table { return r.table }

// RunFailure is one run that failed a check every run must pass.
type RunFailure struct {
	Command string `json:"command"`
	Why     string `json:"why"`
}

// sanityFailures collects the rows' goodput sanity failures: every row
// type carries Command and Sanity (pointRun.sanityFailure).
func sanityFailures(rows any) []RunFailure {
	v := reflect.ValueOf(rows)
	if v.Kind() != reflect.Slice {
		return nil
	}
	var out []RunFailure
	for i := range v.Len() {
		row := reflect.Indirect(v.Index(i))
		if row.Kind() != reflect.Struct {
			continue
		}
		why, cmd := row.FieldByName("Sanity"), row.FieldByName("Command")
		if why.Kind() == reflect.String && why.String() != "" {
			f := RunFailure{Why: why.String()}
			if cmd.Kind() == reflect.String {
				f.Command = cmd.String()
			}
			out = append(out, f)
		}
	}
	return out
}

// AllMet reports whether every check met its target.
func (r *Report) AllMet() bool {
	for _, c := range r.Checks {
		if !c.Met {
			return false
		}
	}
	return true
}

// WriteText prints the report for people: setup, table, checks, notes.
func (r *Report) WriteText(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s: %s (scale %s, seeds %s)\n", r.Experiment, r.Title, r.Scale, seedList(r.Seeds))
	fmt.Fprintf(&b, "claim:  %s\n", r.Claim)
	fmt.Fprintf(&b, "target: %s\n", r.Target)
	if !r.WhatIf.IsZero() {
		fmt.Fprintf(&b, "WHAT-IF: every bed ran with %s, after its own settings and alike for every transport; "+
			"the setup below is the beds' as their files say, before it: these are not the standard results\n", r.WhatIf)
	}
	for _, s := range r.Setup {
		fmt.Fprintf(&b, "setup:  %s\n", s)
	}
	b.WriteByte('\n')
	writeAligned(&b, r.table)
	if len(r.Checks) > 0 {
		b.WriteByte('\n')
		for _, c := range r.Checks {
			mark := "MET   "
			if !c.Met {
				mark = "MISSED"
			}
			fmt.Fprintf(&b, "%s %s: %s (target %s)", mark, c.What, c.Measured, c.Target)
			if c.Note != "" {
				fmt.Fprintf(&b, " — %s", c.Note)
			}
			b.WriteByte('\n')
		}
	}
	for _, f := range r.SanityFailures {
		fmt.Fprintf(&b, "GOODPUT SANITY FAILED: %s: %s\n", f.Command, f.Why)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	if r.Wall > 0 {
		fmt.Fprintf(&b, "wall time: %.1fs (points: %.1fs summed)\n", r.Wall.Seconds(), r.PointTime.Seconds())
	}
	_, err := w.Write(b.Bytes())
	return err
}

// writeAligned prints t with columns padded to their widest cell; numbers
// (cells starting with a digit, sign or dot) are right-aligned.
func writeAligned(b *bytes.Buffer, t Table) {
	width := make([]int, len(t.Columns))
	for i, c := range t.Columns {
		width[i] = utf8.RuneCountInString(c)
	}
	for _, row := range t.Rows {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	line := func(cells []string) {
		var s strings.Builder
		for i, c := range cells {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i > 0 {
				s.WriteString("  ")
			}
			if numeric(c) {
				s.WriteString(pad + c)
			} else {
				s.WriteString(c + pad)
			}
		}
		b.WriteString(strings.TrimRight(s.String(), " "))
		b.WriteByte('\n')
	}
	line(t.Columns)
	rule := make([]string, len(t.Columns))
	for i := range rule {
		rule[i] = strings.Repeat("-", width[i])
	}
	line(rule)
	for _, row := range t.Rows {
		line(row)
	}
}

func numeric(s string) bool {
	if s == "" {
		return false
	}
	c := s[0]
	return c >= '0' && c <= '9' || c == '-' && len(s) > 1 && s[1] != '-' || c == '+' || c == '.'
}

// WriteCSV writes the table as CSV with a header row.
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(r.table.Columns); err != nil {
		return fmt.Errorf("writing %s CSV: %w", r.Experiment, err)
	}
	if err := cw.WriteAll(r.table.Rows); err != nil {
		return fmt.Errorf("writing %s CSV: %w", r.Experiment, err)
	}
	return nil
}

// WriteJSON writes the report as one indented JSON object. Series points
// that are not finite (a median no seed gave) are left out.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	c := *r
	c.Series = nil
	for _, s := range r.Series {
		f := Series{Plot: s.Plot, Name: s.Name}
		for i := range s.X {
			if i < len(s.Y) && finite(s.X[i]) && finite(s.Y[i]) {
				f.X, f.Y = append(f.X, s.X[i]), append(f.Y, s.Y[i])
			}
		}
		c.Series = append(c.Series, f)
	}
	if err := enc.Encode(&c); err != nil {
		return fmt.Errorf("writing %s JSON: %w", r.Experiment, err)
	}
	return nil
}

// WriteFiles writes NAME.csv, NAME.json and every plot as PNG and SVG
// into dir (created if missing) and returns the paths written, in order.
func (r *Report) WriteFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("writing %s results: %w", r.Experiment, err)
	}
	var paths []string
	write := func(name string, fn func(io.Writer) error) error {
		p := filepath.Join(dir, name)
		var b bytes.Buffer
		if err := fn(&b); err != nil {
			return err
		}
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("writing %s results: %w", r.Experiment, err)
		}
		paths = append(paths, p)
		return nil
	}
	if err := write(r.Experiment+".csv", r.WriteCSV); err != nil {
		return paths, err
	}
	if err := write(r.Experiment+".json", r.WriteJSON); err != nil {
		return paths, err
	}
	for _, f := range r.plots {
		for _, format := range []string{"png", "svg"} {
			f, format := f, format
			if err := write(f.file+"."+format, func(w io.Writer) error { return f.render(w, format) }); err != nil {
				return paths, err
			}
		}
	}
	return paths, nil
}

// PlotFiles returns the base names (without extension) of the report's
// plots, in order.
func (r *Report) PlotFiles() []string {
	var out []string
	for _, f := range r.plots {
		out = append(out, f.file)
	}
	return out
}

// seedList spells seeds as "1-5" when consecutive, else "1, 3, 7".
func seedList(seeds []uint64) string {
	if len(seeds) == 0 {
		return "none"
	}
	consecutive := true
	for i := 1; i < len(seeds); i++ {
		consecutive = consecutive && seeds[i] == seeds[i-1]+1
	}
	if consecutive && len(seeds) > 1 {
		return fmt.Sprintf("%d-%d", seeds[0], seeds[len(seeds)-1])
	}
	parts := make([]string, len(seeds))
	for i, s := range seeds {
		parts[i] = fmt.Sprint(s)
	}
	return strings.Join(parts, ", ")
}
