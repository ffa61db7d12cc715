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
// to start your own.
//
//go:embed examples/*.yaml
var examples embed.FS

// DefaultName is the built-in lab used when none is given.
const DefaultName = "leafspine"

// examplesDir is where the shipped labs live in the repository; built-in
// labs report errors and their File against it.
const examplesDir = "labs/examples"

// Names returns the built-in labs' names, sorted.
func Names() []string {
	entries, err := fs.ReadDir(examples, "examples")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Source returns a built-in lab's file contents.
func Source(name string) ([]byte, error) {
	if strings.ContainsAny(name, `/\`) || name == "" {
		return nil, fmt.Errorf("no built-in lab %q (built-ins: %s)", name, strings.Join(Names(), ", "))
	}
	data, err := examples.ReadFile("examples/" + name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("no built-in lab %q (built-ins: %s)", name, strings.Join(Names(), ", "))
	}
	return data, nil
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
// built-in lab. A path that looks like a file (it has a slash or a .yaml
// or .yml suffix) but does not exist is reported as a missing file.
func Resolve(arg string) (*Lab, error) {
	if arg == "" {
		return Builtin(DefaultName)
	}
	if st, err := os.Stat(arg); err == nil && !st.IsDir() {
		return Load(arg)
	}
	if strings.ContainsAny(arg, `/\`) || strings.HasSuffix(arg, ".yaml") || strings.HasSuffix(arg, ".yml") {
		_, err := os.Stat(arg)
		if err == nil {
			err = errors.New("is a directory")
		}
		return nil, fmt.Errorf("loading lab %s: %w", arg, err)
	}
	if _, err := Source(arg); err != nil {
		return nil, fmt.Errorf("%q is neither a lab file nor a built-in lab (built-ins: %s)", arg, strings.Join(Names(), ", "))
	}
	return Builtin(arg)
}
