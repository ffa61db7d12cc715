package experiment

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	Seed       uint64 `json:"seed"`
	Scale      string `json:"scale"`
	// Setup lists what ran: topology, link rates, sizes, what was scaled
	// down and why, what the loss applies to.
	Setup []string `json:"setup"`
	// Rows is the experiment's typed rows (e.g. []LossRow).
	Rows any `json:"rows"`
	// Series are the time series or curves the plots draw.
	Series []Series `json:"series,omitempty"`
	// Checks compare figures with the targets.
	Checks []Check `json:"checks"`
	// Notes explain the figures: what limits a transport, where a target
	// is missed and why.
	Notes []string `json:"notes,omitempty"`
	// Wall is how long the experiment took on this machine. It is not
	// part of the JSON, which depends on the seed only.
	Wall time.Duration `json:"-"`

	table Table
	plots []figure
}

// Check is one target checked against a measured figure.
type Check struct {
	// What names the figure, e.g. "metaroce goodput at 1% loss".
	What string `json:"what"`
	// Target is the target in words, e.g. ">= 90% of loss-free".
	Target string `json:"target"`
	// Measured is the figure as text; Value the number compared.
	Measured string  `json:"measured"`
	Value    float64 `json:"value"`
	// Met says whether the target was reached.
	Met bool `json:"met"`
	// Note says by how much a missed target was missed, or qualifies a
	// met one.
	Note string `json:"note,omitempty"`
}

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
	fmt.Fprintf(&b, "%s: %s (scale %s, seed %d)\n", r.Experiment, r.Title, r.Scale, r.Seed)
	fmt.Fprintf(&b, "claim:  %s\n", r.Claim)
	fmt.Fprintf(&b, "target: %s\n", r.Target)
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
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	if r.Wall > 0 {
		fmt.Fprintf(&b, "wall time: %.1fs\n", r.Wall.Seconds())
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

// WriteJSON writes the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
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

// check builds a Check of value against a threshold: at least (atLeast)
// or at most.
func check(what, target string, value, threshold float64, atLeast bool, measured string) Check {
	met := value >= threshold
	if !atLeast {
		met = value <= threshold
	}
	return Check{What: what, Target: target, Measured: measured, Value: value, Met: met}
}

// pct formats a fraction as a percentage.
func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// f2 formats a float with two decimals; f3 with three.
func f2(f float64) string { return fmt.Sprintf("%.2f", f) }
func f3(f float64) string { return fmt.Sprintf("%.3f", f) }

// errCell shows a row's application errors: failed completions, and
// whether the run itself failed (a connection went to error, or the
// workload timed out), which the application sees too.
func errCell(errors int, runErr string) string {
	if runErr != "" {
		return fmt.Sprintf("%d, run failed", errors)
	}
	return fmt.Sprint(errors)
}
