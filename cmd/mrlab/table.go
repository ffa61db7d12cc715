package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mrlab/mrlab/internal/sanitize"
)

// Report is one command's output: a list of named facts followed by
// tables. WriteText prints it for people; WriteJSON prints one JSON object
// with the facts as keys (in order) and each table as an array of objects.
// Commands build a Report and print it one way or the other, so every
// command gets --json for free.
type Report struct {
	facts  []fact
	tables []*Table
}

type fact struct {
	key, label string
	value      any
}

// Fact adds a fact: key is its JSON name, label its text heading.
func (r *Report) Fact(key, label string, value any) {
	r.facts = append(r.facts, fact{key, label, value})
}

// Empty reports whether the report has nothing to print.
func (r *Report) Empty() bool { return len(r.facts) == 0 && len(r.tables) == 0 }

// Table adds an empty table and returns it. name is its JSON key, title
// its text heading.
func (r *Report) Table(name, title string, cols ...Column) *Table {
	t := &Table{Name: name, Title: title, Columns: cols}
	r.tables = append(r.tables, t)
	return t
}

// Column is one column of a Table.
type Column struct {
	Key    string // JSON key
	Head   string // text heading
	Format string // fmt verb for numbers in text ("%.2f"); default %v
}

// Col is shorthand for a Column.
func Col(key, head, format string) Column { return Column{Key: key, Head: head, Format: format} }

// Table is a grid of cells. Cells keep their Go values so JSON gets
// numbers as numbers; text formats them with the column's Format.
type Table struct {
	Name    string
	Title   string
	Columns []Column
	Rows    [][]any
}

// Add appends a row; it must have one cell per column.
func (t *Table) Add(cells ...any) {
	if len(cells) != len(t.Columns) {
		panic(fmt.Sprintf("table %s: row has %d cells, want %d", t.Name, len(cells), len(t.Columns)))
	}
	t.Rows = append(t.Rows, cells)
}

// WriteText prints the report as aligned text.
func (r *Report) WriteText(w io.Writer) error {
	var b bytes.Buffer
	width := 0
	for _, f := range r.facts {
		width = max(width, utf8.RuneCountInString(f.label))
	}
	for _, f := range r.facts {
		fmt.Fprintf(&b, "%-*s  %s\n", width+1, f.label+":", textCell(f.value, ""))
	}
	for _, t := range r.tables {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		t.writeText(&b)
	}
	_, err := w.Write(b.Bytes())
	return err
}

func (t *Table) writeText(b *bytes.Buffer) {
	if t.Title != "" {
		b.WriteString(sanitize.Terminal(t.Title) + "\n")
	}
	if len(t.Rows) == 0 {
		b.WriteString("  (none)\n")
		return
	}
	cells := make([][]string, len(t.Rows))
	widths := make([]int, len(t.Columns))
	numeric := make([]bool, len(t.Columns))
	for j, c := range t.Columns {
		widths[j] = utf8.RuneCountInString(c.Head)
		numeric[j] = true
	}
	for i, row := range t.Rows {
		cells[i] = make([]string, len(row))
		for j, v := range row {
			s := textCell(v, t.Columns[j].Format)
			cells[i][j] = s
			widths[j] = max(widths[j], utf8.RuneCountInString(s))
			if !isNumber(v) {
				numeric[j] = false
			}
		}
	}
	line := func(vals []string) {
		var parts []string
		for j, s := range vals {
			pad := strings.Repeat(" ", widths[j]-utf8.RuneCountInString(s))
			if numeric[j] {
				parts = append(parts, pad+s)
			} else {
				parts = append(parts, s+pad)
			}
		}
		b.WriteString("  " + strings.TrimRight(strings.Join(parts, "  "), " ") + "\n")
	}
	heads := make([]string, len(t.Columns))
	for j, c := range t.Columns {
		heads[j] = c.Head
	}
	line(heads)
	for _, row := range cells {
		line(row)
	}
}

func isNumber(v any) bool {
	switch v.(type) {
	case int, int64, uint64, uint32, int32, float64, float32:
		return true
	}
	return false
}

// textCell is a cell as text for a terminal: anything a lab host could
// have chosen (a program's name in status, a connection's in top) is
// sanitized, so no cell moves the cursor or starts a line of its own.
func textCell(v any, format string) string { return sanitize.Terminal(formatCell(v, format)) }

func formatCell(v any, format string) string {
	if format != "" && isNumber(v) {
		return fmt.Sprintf(format, v)
	}
	if f, ok := v.(float64); ok {
		// Four significant digits, without switching to exponents for
		// the large figures (aggregate Gbit/s) reports have.
		if f >= 1000 || f <= -1000 {
			return strconv.FormatFloat(f, 'f', 0, 64)
		}
		return strconv.FormatFloat(f, 'g', 4, 64)
	}
	return fmt.Sprint(v)
}

// WriteJSON prints the report as one JSON object, facts first (in the
// order added), then one array of row objects per table.
func (r *Report) WriteJSON(w io.Writer) error {
	var b bytes.Buffer
	b.WriteString("{")
	first := true
	key := func(k string) {
		if !first {
			b.WriteString(",")
		}
		first = false
		b.WriteString("\n  ")
		writeJSON(&b, k)
		b.WriteString(": ")
	}
	for _, f := range r.facts {
		key(f.key)
		writeJSON(&b, jsonValue(f.value))
	}
	for _, t := range r.tables {
		key(t.Name)
		b.WriteString("[")
		for i, row := range t.Rows {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString("\n    {")
			for j, v := range row {
				if j > 0 {
					b.WriteString(", ")
				}
				writeJSON(&b, t.Columns[j].Key)
				b.WriteString(": ")
				writeJSON(&b, jsonValue(v))
			}
			b.WriteString("}")
		}
		if len(t.Rows) > 0 {
			b.WriteString("\n  ")
		}
		b.WriteString("]")
	}
	b.WriteString("\n}\n")
	_, err := w.Write(b.Bytes())
	return err
}

// jsonValue turns values with a String method (times, kinds) into their
// text, so JSON carries "2ms" rather than 2000000 for a sim.Time.
func jsonValue(v any) any {
	switch x := v.(type) {
	case bool, string, int, int64, uint64, uint32, int32, float64, float32, nil:
		return v
	case fmt.Stringer:
		return x.String()
	}
	return v
}

func writeJSON(b *bytes.Buffer, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		// NaN and Inf have no JSON spelling; they mean "not measured".
		data = []byte("null")
	}
	b.Write(data)
}
