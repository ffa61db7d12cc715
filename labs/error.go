package labs

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Error is a problem in a lab file, located at the line and column of the
// offending key or value. Its text reads like a compiler's:
//
//	labs/bad.yaml:7:5: links.default.rate: "100gbt" is not a rate (want e.g. 100gbit)
//
// Parse and Load return either a single *Error or an errors.Join of several
// (one per problem, in file order); errors.As finds the first, Errors lists
// them all.
type Error struct {
	File string
	Line int // 1-based; 0 when the problem has no position (an empty file)
	Col  int // 1-based; 0 when unknown
	// Field is the dotted path of the field at fault, with sequence indexes:
	// "links.overrides[0].rate", "faults[2].link". Empty for syntax errors.
	Field string
	Msg   string
	// Flag, if set, is the command-line override that wrote the value at
	// fault (--set KEY=VALUE ...); it replaces the file position.
	Flag string
	// Err is the underlying error (a parser's), if any.
	Err error
}

// Error formats the problem as file:line:col: field: message, or as
// flag: field: message for a value an override wrote.
func (e *Error) Error() string {
	if e.Flag != "" {
		// --impair and --fault write entries the user never named
		// (links.overrides[3], faults[7]): the flag itself says what
		// is at fault. A --set names its own key.
		if e.Field == "" || !strings.HasPrefix(e.Flag, "--set ") {
			return e.Flag + ": " + e.Msg
		}
		return e.Flag + ": " + e.Field + ": " + e.Msg
	}
	loc := e.File
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
		if e.Col > 0 {
			loc += ":" + strconv.Itoa(e.Col)
		}
	}
	if e.Field == "" {
		return loc + ": " + e.Msg
	}
	return loc + ": " + e.Field + ": " + e.Msg
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Errors returns every *Error in err (which may be a single *Error or a
// join of them), in file order. It returns nil if err holds none.
func Errors(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if e, ok := err.(*Error); ok {
			out = append(out, e)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// maxErrors bounds how many problems one Parse reports: past this the file
// is probably not a lab file at all.
const maxErrors = 20

// errorList collects a file's problems.
type errorList struct {
	file  string
	errs  []*Error
	warns []*Error
}

// warnf records something that is valid but probably not what was meant.
func (l *errorList) warnf(line, col int, field, format string, args ...any) {
	l.warns = append(l.warns, &Error{File: l.file, Line: line, Col: col, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (l *errorList) add(line, col int, field, format string, args ...any) {
	if len(l.errs) > maxErrors {
		return
	}
	l.errs = append(l.errs, &Error{File: l.file, Line: line, Col: col, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// err returns the collected problems in file order, or nil.
func (l *errorList) err() error {
	if len(l.errs) == 0 {
		return nil
	}
	sort.SliceStable(l.errs, func(i, j int) bool {
		a, b := l.errs[i], l.errs[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	if len(l.errs) > maxErrors {
		l.errs = append(l.errs[:maxErrors], &Error{File: l.file, Msg: "too many errors"})
	}
	if len(l.errs) == 1 {
		return l.errs[0]
	}
	errs := make([]error, len(l.errs))
	for i, e := range l.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// yamlLine finds the line in a yaml parser message ("yaml: line 3: ...").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxErrorIn is syntaxError for the text data: a flow mapping or
// sequence left open ("{planes: 2" with no "}") is reported where it
// opens, since the parser notices only lines later, at whatever it then
// reads (often the line before, the mapping's key, or the file's end).
func syntaxErrorIn(file string, data []byte, err error) *Error {
	e := syntaxError(file, err)
	if !strings.Contains(err.Error(), "did not find expected ',' or") {
		return e
	}
	if line, col, open, ok := unclosedFlow(data); ok {
		e.Line, e.Col = line, col
		e.Msg = fmt.Sprintf("YAML syntax: this %q is never closed (%s)", open, strings.TrimPrefix(e.Msg, "YAML syntax: "))
	}
	return e
}

// unclosedFlow finds the first flow collection ({ or [ starting a value)
// in data that no matching bracket closes, outside quotes and comments.
// It returns its 1-based line and column.
func unclosedFlow(data []byte) (line, col int, open byte, ok bool) {
	type opener struct {
		c         byte
		line, col int
	}
	var stack []opener
	for n, l := range strings.Split(string(data), "\n") {
		var quote byte
		prev := byte(' ') // the last non-blank byte before i, ' ' at the start
		for i := 0; i < len(l); i++ {
			c := l[i]
			switch {
			case quote != 0:
				if c == '\\' && quote == '"' {
					i++
				} else if c == quote {
					quote = 0
				}
				continue
			case c == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
				i = len(l) // a comment: the rest of the line
				continue
			case (c == '"' || c == '\'') && strings.IndexByte(" :,[{-", prev) >= 0:
				quote = c
			case (c == '{' || c == '[') && strings.IndexByte(" :,[{-", prev) >= 0:
				stack = append(stack, opener{c, n + 1, i + 1})
			case (c == '}' || c == ']') && len(stack) > 0:
				stack = stack[:len(stack)-1]
			}
			if c != ' ' && c != '\t' {
				prev = c
			}
		}
	}
	if len(stack) == 0 {
		return 0, 0, 0, false
	}
	// The innermost left open on the first line that left one open: the
	// bracket the parser wanted closed.
	o := stack[0]
	for _, x := range stack[1:] {
		if x.line == o.line {
			o = x
		}
	}
	return o.line, o.col, o.c, true
}

// syntaxError turns a yaml parser error into an *Error with its line.
func syntaxError(file string, err error) *Error {
	e := &Error{File: file, Msg: err.Error(), Err: err}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = "YAML syntax: " + m[2]
	}
	return e
}
