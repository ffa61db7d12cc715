package conformance

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/mrlab/mrlab/internal/sim"
)

// Script is one conformance test: headers naming what it checks and a
// list of timed statements (docs/conformance.md, "Script language").
type Script struct {
	Name    string // file name without extension
	Section string // spec section it checks, e.g. "4" or "7"
	Summary string
	// XFail, when set, is why the reference engine is known to fail this
	// test: its failure is reported as an expected failure with this
	// reason, and a pass as a failure (the finding went away).
	XFail string
	// IUT are the settings the implementation under test runs with
	// (header "iut:"), as key=value fields.
	IUT   []Field
	Stmts []Stmt
}

// Kind is what a statement does.
type Kind uint8

// Statement kinds.
const (
	Inject Kind = iota + 1 // "<": the tester sends a packet to the IUT
	Expect                 // ">": the IUT must send a matching packet within a window
	Refute                 // "!": the IUT must send no matching packet for a while
	Action                 // "iut VERB": the IUT's application does something or is checked
	Flush                  // "flush": forget the IUT packets not yet matched
)

// Stmt is one timed line of a script.
type Stmt struct {
	Line int
	// At is the statement's time: relative to the previous statement's
	// time when Rel, else from the start of the test.
	At  sim.Time
	Rel bool
	Kind
	// Verb is the packet type name (Inject, Expect, Refute) or the IUT
	// action (Action).
	Verb   string
	Fields []Field
}

// Field is one key=value of a statement.
type Field struct {
	Key string
	Val Value
}

// ValKind says how a value matches or builds a field.
type ValKind uint8

// Value kinds.
const (
	Exact ValKind = iota // a number
	Range                // lo..hi, inclusive
	Any                  // *
	Var                  // @name[+-N]: bound on first match, compared after
	Text                 // a word (status names, sack bit lists, hex bytes)
)

// Value is a field's right-hand side.
type Value struct {
	Kind   ValKind
	N, Hi  uint64 // Exact: N; Range: N..Hi; Var: the offset added (mod 2^64)
	Name   string // Var: the variable
	String string // Text, and the source text of every value
	// Not inverts a match (!value); a negated variable only compares.
	Not bool
}

// parseError says where a script is wrong.
func parseError(name string, line int, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", name, line, fmt.Sprintf(format, args...))
}

// headers a script may start with.
var headerKeys = map[string]bool{"section": true, "summary": true, "xfail": true, "iut": true}

// Parse reads a script. name is used in errors and as the test name.
func Parse(name, src string) (*Script, error) {
	s := &Script{Name: name}
	body := false
	for i, raw := range strings.Split(src, "\n") {
		ln := i + 1
		line := raw
		if k := strings.IndexByte(line, '#'); k >= 0 {
			line = line[:k]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if key, val, ok := strings.Cut(line, ":"); ok && !body && headerKeys[key] {
			val = strings.TrimSpace(val)
			switch key {
			case "section":
				s.Section = val
			case "summary":
				s.Summary = val
			case "xfail":
				s.XFail = val
			case "iut":
				fs, err := parseFields(name, ln, strings.Fields(val))
				if err != nil {
					return nil, err
				}
				s.IUT = append(s.IUT, fs...)
			}
			continue
		}
		body = true
		st, err := parseStmt(name, ln, line)
		if err != nil {
			return nil, err
		}
		s.Stmts = append(s.Stmts, st)
	}
	if s.Section == "" {
		return nil, parseError(name, 1, "missing \"section:\" header")
	}
	if len(s.Stmts) == 0 {
		return nil, parseError(name, 1, "no statements")
	}
	return s, nil
}

func parseStmt(name string, ln int, line string) (Stmt, error) {
	words := strings.Fields(line)
	st := Stmt{Line: ln}
	t := words[0]
	if strings.HasPrefix(t, "+") {
		st.Rel = true
		t = t[1:]
	}
	at, err := parseDuration(t)
	if err != nil {
		return st, parseError(name, ln, "time %q: %v", words[0], err)
	}
	st.At = at
	if len(words) < 2 {
		return st, parseError(name, ln, "a time needs a statement after it")
	}
	rest := words[2:]
	switch words[1] {
	case "<":
		st.Kind = Inject
	case ">":
		st.Kind = Expect
	case "!":
		st.Kind = Refute
	case "iut":
		st.Kind = Action
	case "flush":
		st.Kind = Flush
		if len(rest) != 0 {
			return st, parseError(name, ln, "flush takes no arguments")
		}
		return st, nil
	default:
		return st, parseError(name, ln, "unknown statement %q (want <, >, !, iut or flush)", words[1])
	}
	if len(rest) == 0 {
		return st, parseError(name, ln, "%s needs a packet type or action", words[1])
	}
	st.Verb = rest[0]
	switch st.Kind {
	case Inject, Expect, Refute:
		if _, ok := typeByName(st.Verb); !ok {
			return st, parseError(name, ln, "unknown packet type %q", st.Verb)
		}
	case Action:
		if !actions[st.Verb] {
			return st, parseError(name, ln, "unknown iut action %q", st.Verb)
		}
	}
	st.Fields, err = parseFields(name, ln, rest[1:])
	return st, err
}

// actions are the verbs of "iut" statements.
var actions = map[string]bool{
	"dial": true, "write": true, "write_imm": true, "send": true, "send_imm": true,
	"read": true, "recv": true, "close": true,
	"complete": true, "nocomplete": true, "mem": true, "counter": true, "state": true,
}

func parseFields(name string, ln int, words []string) ([]Field, error) {
	fs := make([]Field, 0, len(words))
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" || v == "" {
			return nil, parseError(name, ln, "field %q: want key=value", w)
		}
		val, err := parseValue(v)
		if err != nil {
			return nil, parseError(name, ln, "field %s: %v", k, err)
		}
		fs = append(fs, Field{Key: k, Val: val})
	}
	return fs, nil
}

func parseValue(v string) (Value, error) {
	if strings.HasPrefix(v, "!") && len(v) > 1 {
		val, err := parseValue(v[1:])
		val.String, val.Not = v, true
		return val, err
	}
	val := Value{String: v}
	switch {
	case v == "*":
		val.Kind = Any
	case strings.HasPrefix(v, "@"):
		val.Kind = Var
		name := v[1:]
		if k := strings.IndexAny(name, "+-"); k >= 0 {
			off, err := parseNum(name[k+1:])
			if err != nil {
				return val, err
			}
			if name[k] == '-' {
				off = -off
			}
			val.N = off
			name = name[:k]
		}
		if name == "" {
			return val, fmt.Errorf("empty variable name in %q", v)
		}
		val.Name = name
	case strings.Contains(v, ".."):
		lo, hi, _ := strings.Cut(v, "..")
		a, err := parseNum(lo)
		if err != nil {
			return val, err
		}
		b, err := parseNum(hi)
		if err != nil {
			return val, err
		}
		if b < a {
			return val, fmt.Errorf("empty range %q", v)
		}
		val.Kind, val.N, val.Hi = Range, a, b
	default:
		if n, err := parseNum(v); err == nil {
			val.N = n
			return val, nil
		}
		val.Kind = Text
	}
	return val, nil
}

// parseNum reads a decimal or 0x-hex number, or a duration (10us), which
// is a number of nanoseconds.
func parseNum(s string) (uint64, error) {
	if n, err := strconv.ParseUint(s, 0, 64); err == nil {
		return n, nil
	}
	if s != "" && s[0] >= '0' && s[0] <= '9' {
		if d, err := parseDuration(s); err == nil {
			return uint64(d), nil
		}
	}
	return 0, fmt.Errorf("%q is not a number or duration", s)
}

// parseDuration reads a statement time: a duration with a unit (or 0).
func parseDuration(s string) (sim.Time, error) {
	d, err := sim.ParseTime(s)
	if err != nil {
		return 0, err
	}
	if d < 0 || d > 100*sim.Second {
		return 0, fmt.Errorf("out of range 0..100s")
	}
	return d, nil
}
