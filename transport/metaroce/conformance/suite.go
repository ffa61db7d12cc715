package conformance

import (
	"embed"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
)

// scripts are the built-in conformance tests, one file per test.
//
//go:embed scripts/*.mrt
var scripts embed.FS

// ScriptExt is the extension of a conformance script file.
const ScriptExt = ".mrt"

// Builtin returns the built-in tests, sorted by name.
func Builtin() ([]*Script, error) { return Load(scripts, "scripts") }

// Load reads every *.mrt file in dir of fsys.
func Load(fsys fs.FS, dir string) ([]*Script, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*"+ScriptExt))
	if err != nil {
		return nil, fmt.Errorf("listing conformance scripts: %w", err)
	}
	sort.Strings(names)
	out := make([]*Script, 0, len(names))
	for _, n := range names {
		src, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, fmt.Errorf("reading conformance script: %w", err)
		}
		s, err := Parse(strings.TrimSuffix(path.Base(n), ScriptExt), string(src))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Select keeps the scripts whose name or "§section" matches the regular
// expression pattern (all of them when it is empty).
func Select(all []*Script, pattern string) ([]*Script, error) {
	if pattern == "" {
		return all, nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("--run %q: %w", pattern, err)
	}
	var out []*Script
	for _, s := range all {
		if re.MatchString(s.Name) || re.MatchString("§"+s.Section) {
			out = append(out, s)
		}
	}
	return out, nil
}

// RunAll runs scripts one after another; trace, if not nil, gets every
// packet.
func RunAll(t Target, all []*Script, trace io.Writer) []Result {
	out := make([]Result, 0, len(all))
	for _, s := range all {
		if trace != nil {
			fmt.Fprintf(trace, "=== %s (§%s)\n", s.Name, s.Section)
		}
		out = append(out, Run(t, s, trace))
	}
	return out
}
