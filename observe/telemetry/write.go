package telemetry

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/mrlab/mrlab/internal/sim"
)

// jsonlWriter writes one JSON object per sample and line, with the columns
// of the sample's kind:
//
//	{"t_ns":120000,"kind":"path","host":"h3","peer":"h7","conn":4,"path":9,...}
//
// It does not allocate per sample. Not safe for concurrent use.
type jsonlWriter struct{ lineFile }

// newJSONLWriter writes JSON lines to w (closed by Close if a Closer).
func newJSONLWriter(w io.Writer) *jsonlWriter { return &jsonlWriter{newLineFile(w)} }

var (
	_ FileSink = (*jsonlWriter)(nil)
	_ FileSink = (*csvWriter)(nil)
	_ Sink     = Multi(nil)
	_ Sink     = (*Recorder)(nil)
)

// lineFile is what both file formats share: a buffered writer, the
// underlying writer's Closer, one line buffer reused for every sample and
// the first error, which every later call returns.
type lineFile struct {
	w   *bufio.Writer
	c   io.Closer
	buf []byte
	err error
}

func newLineFile(w io.Writer) lineFile {
	f := lineFile{w: bufio.NewWriterSize(w, 64<<10), buf: make([]byte, 0, 512)}
	f.c, _ = w.(io.Closer)
	return f
}

// writeLine writes one sample's line b, built in buf's storage, and keeps
// that storage for the next.
func (f *lineFile) writeLine(b []byte) error {
	f.buf = b
	if _, err := f.w.Write(b); err != nil {
		f.err = fmt.Errorf("writing telemetry: %w", err)
	}
	return f.err
}

// EndBatch implements Sink; it does nothing (Close flushes).
func (f *lineFile) EndBatch(sim.Time) error { return f.err }

// Close flushes and closes the underlying writer.
func (f *lineFile) Close() error {
	if f.err == nil {
		if err := f.w.Flush(); err != nil {
			f.err = fmt.Errorf("writing telemetry: %w", err)
		}
	}
	if f.c != nil {
		if err := f.c.Close(); err != nil && f.err == nil {
			f.err = fmt.Errorf("closing telemetry: %w", err)
		}
	}
	return f.err
}

// Write implements Sink.
func (j *jsonlWriter) Write(s *Sample) error {
	if j.err != nil {
		return j.err
	}
	b := append(j.buf[:0], '{')
	first := true
	for i := range columns {
		c := &columns[i]
		if !c.kinds.has(s.Kind) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, c.name...)
		b = append(b, '"', ':')
		if c.typ == colString {
			b = appendJSONString(b, c.s(s))
		} else {
			b = c.appendNumber(b, s)
		}
	}
	return j.writeLine(append(b, '}', '\n'))
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}

// csvWriter writes samples as CSV with one header row naming every column
// of every kind; cells a kind has no value for are empty, so one file
// holds connections, paths and links and loads into any dataframe.
type csvWriter struct {
	lineFile
	header bool // written
}

// newCSVWriter writes CSV to w (closed by Close if a Closer).
func newCSVWriter(w io.Writer) *csvWriter { return &csvWriter{lineFile: newLineFile(w)} }

// csvHeader returns the header row's column names.
func csvHeader() []string {
	out := make([]string, len(columns))
	for i, c := range columns {
		out[i] = c.name
	}
	return out
}

// Write implements Sink.
func (cw *csvWriter) Write(s *Sample) error {
	if cw.err != nil {
		return cw.err
	}
	b := cw.buf[:0]
	if !cw.header {
		b = append(b, strings.Join(csvHeader(), ",")...)
		b = append(b, '\n')
		cw.header = true
	}
	for i := range columns {
		c := &columns[i]
		if i > 0 {
			b = append(b, ',')
		}
		if !c.kinds.has(s.Kind) {
			continue
		}
		if c.typ == colString {
			b = appendCSVField(b, c.s(s))
		} else {
			b = c.appendNumber(b, s)
		}
	}
	return cw.writeLine(append(b, '\n'))
}

func appendCSVField(b []byte, s string) []byte {
	if !strings.ContainsAny(s, ",\"\n\r") {
		return append(b, s...)
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			b = append(b, '"')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// FileSink is a Sink writing a file that Close finishes.
type FileSink interface {
	Sink
	io.Closer
}

// Create opens the --telemetry file: CSV if the name ends in .csv, JSON
// lines otherwise (.jsonl is the usual name).
func Create(name string) (FileSink, error) {
	f, err := os.Create(name)
	if err != nil {
		return nil, fmt.Errorf("creating telemetry file: %w", err)
	}
	if strings.HasSuffix(strings.ToLower(name), ".csv") {
		return newCSVWriter(f), nil
	}
	return newJSONLWriter(f), nil
}

// readJSONL reads samples written by jsonlWriter. Errors name the line.
func readJSONL(r io.Reader) ([]Sample, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []Sample
	for line := 1; sc.Scan(); line++ {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var s Sample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return out, fmt.Errorf("reading telemetry line %d: %w", line, err)
		}
		if s.Kind == 0 {
			return out, fmt.Errorf("reading telemetry line %d: no kind", line)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("reading telemetry: %w", err)
	}
	return out, nil
}

// ReadFile reads a JSON-lines telemetry file.
func ReadFile(name string) ([]Sample, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("reading telemetry: %w", err)
	}
	defer f.Close()
	if strings.HasSuffix(strings.ToLower(name), ".csv") {
		return nil, errors.New("reading telemetry: " + name + " is CSV; plots read the JSON-lines format")
	}
	s, err := readJSONL(f)
	if err != nil {
		return s, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}

// Multi fans samples out to several sinks.
type Multi []Sink

// Write implements Sink; it writes to every sink and returns the first
// error.
func (m Multi) Write(s *Sample) error {
	var first error
	for _, k := range m {
		if err := k.Write(s); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// EndBatch implements Sink.
func (m Multi) EndBatch(now sim.Time) error {
	var first error
	for _, k := range m {
		if err := k.EndBatch(now); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Recorder is a Sink keeping every sample in memory (tests, plots of a run
// still in the process).
type Recorder struct {
	Samples []Sample
}

// Write implements Sink.
func (r *Recorder) Write(s *Sample) error { r.Samples = append(r.Samples, *s); return nil }

// EndBatch implements Sink.
func (r *Recorder) EndBatch(sim.Time) error { return nil }
