package labs

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
)

// examples holds the shipped labs. They are ordinary lab files: copy one
// to start your own. Those in a subfolder are the beds of an experiment
// (labs/examples/loss-sweep/...), named "FOLDER/NAME".
//
//go:embed examples/*.yaml examples/*/*.yaml
var examples embed.FS

// DefaultName is the built-in lab used when none is given.
const DefaultName = "leafspine"

// examplesDir is where the shipped labs live in the repository; built-in
// labs report errors and their File against it.
const examplesDir = "labs/examples"

// Names returns the built-in labs' names, sorted: the top-level ones
// ("leafspine"), then the experiments' beds ("loss-sweep/lossy").
func Names() []string {
	var top, sub []string
	_ = fs.WalkDir(examples, "examples", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel := strings.TrimPrefix(p, "examples/")
		if n, ok := strings.CutSuffix(rel, ".yaml"); ok {
			if strings.Contains(n, "/") {
				sub = append(sub, n)
			} else {
				top = append(top, n)
			}
		}
		return nil
	})
	sort.Strings(top)
	sort.Strings(sub)
	return append(top, sub...)
}

// IsBuiltin reports whether name is a built-in lab.
func IsBuiltin(name string) bool {
	_, err := Source(name)
	return err == nil
}

// Source returns a built-in lab's file contents. name is "NAME" or
// "FOLDER/NAME".
func Source(name string) ([]byte, error) {
	if !validBuiltinName(name) {
		return nil, fmt.Errorf("no built-in lab %q (built-ins: %s)", name, listNames())
	}
	data, err := examples.ReadFile("examples/" + name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("no built-in lab %q (built-ins: %s)", name, listNames())
	}
	return data, nil
}

// validBuiltinName accepts NAME or FOLDER/NAME of plain path elements.
func validBuiltinName(name string) bool {
	parts := strings.Split(name, "/")
	if len(parts) > 2 || strings.Contains(name, `\`) {
		return false
	}
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return false
		}
	}
	return true
}

// listNames is Names for error messages: the top-level labs, and the
// experiments' folders.
func listNames() string {
	var out []string
	seen := map[string]bool{}
	for _, n := range Names() {
		if dir, _, ok := strings.Cut(n, "/"); ok {
			if !seen[dir] {
				seen[dir] = true
				out = append(out, dir+"/...")
			}
			continue
		}
		out = append(out, n)
	}
	return strings.Join(out, ", ")
}

// Builtin parses the built-in lab called name.
func Builtin(name string) (*Lab, error) {
	data, err := Source(name)
	if err != nil {
		return nil, err
	}
	return Parse(path.Join(examplesDir, name+".yaml"), data)
}

// Resolve finds a lab from a command-line argument: "" is the default
// built-in lab; an existing file is loaded; otherwise arg must name a
// built-in lab ("leafspine", or an experiment's bed such as
// "loss-sweep/lossy"). A path that looks like a file (it has a slash or a
// .yaml or .yml suffix) but is neither a file nor a built-in lab is
// reported as a missing file.
func Resolve(arg string) (*Lab, error) {
	if arg == "" {
		return Builtin(DefaultName)
	}
	if st, err := os.Stat(arg); err == nil && !st.IsDir() {
		return Load(arg)
	}
	if IsBuiltin(arg) {
		return Builtin(arg)
	}
	if strings.ContainsAny(arg, `/\`) || strings.HasSuffix(arg, ".yaml") || strings.HasSuffix(arg, ".yml") {
		_, err := os.Stat(arg)
		if err == nil {
			err = errors.New("is a directory")
		}
		return nil, fmt.Errorf("loading lab %s: %w", arg, err)
	}
	return nil, fmt.Errorf("%q is neither a lab file nor a built-in lab (built-ins: %s)", arg, listNames())
}
