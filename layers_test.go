// The layering rules of DESIGN.md ("Layers"), checked on the source: every
// import between top-level folders points down a floor, the ground floor
// (internal/) imports nothing of mrlab above it, and transport/ stays
// sans-I/O. A new folder must be given a floor here.
package layers_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/mrlab/mrlab/"

// floors of the top-level folders, ground first. A folder may import its
// own packages and any folder on a lower floor; folders on one floor do not
// import each other.
var floors = map[string]int{
	"internal":   1,
	"transport":  2,
	"fabric":     2,
	"verbs":      2,
	"ibverbs":    2,
	"softnic":    3,
	"workload":   4,
	"observe":    4,
	"labs":       5,
	"experiment": 6,
	"cmd":        7,
	"examples":   8,
	"scripts":    8, // stand-alone probes (//go:build ignore), run with go run
}

// sansIO are imports transport/ may not use outside tests: the engines
// take time, packets and memory as arguments (DESIGN.md, STYLE.md 1).
var sansIO = map[string]bool{
	"os": true, "os/exec": true, "os/signal": true, "syscall": true,
	"golang.org/x/sys/unix": true, "net": true, "net/http": true,
}

// wallClock are package time's calls that read or wait on the wall clock.
var wallClock = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
	"AfterFunc": true, "NewTimer": true, "NewTicker": true, "Tick": true,
}

type goFile struct {
	path string // slash-separated, relative to the module root
	ast  *ast.File
	fset *token.FileSet
}

func sources(t *testing.T) []goFile {
	t.Helper()
	var out []goFile
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); p != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "python") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			return err
		}
		out = append(out, goFile{filepath.ToSlash(p), f, fset})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 100 {
		t.Fatalf("read %d Go files: run from the module root", len(out))
	}
	return out
}

func top(path string) string { return strings.SplitN(path, "/", 2)[0] }

func TestImportsPointDown(t *testing.T) {
	for _, f := range sources(t) {
		from := top(f.path)
		fl, ok := floors[from]
		if !ok {
			t.Errorf("%s: top-level folder %s has no floor in layers_test.go", f.path, from)
			continue
		}
		for _, imp := range f.ast.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			rest, ok := strings.CutPrefix(p, module)
			if !ok {
				continue
			}
			to := top(rest)
			if to == from {
				continue
			}
			if tf, ok := floors[to]; !ok || tf >= fl {
				t.Errorf("%s imports %s: %s (floor %d) may import only lower floors, %s is on floor %d", f.path, p, from, fl, to, tf)
			}
		}
	}
}

// sansIOFloors are the engine's folders: they take time and packets as
// arguments and run on the caller's loop (DESIGN.md).
var sansIOFloors = map[string]bool{"transport": true, "fabric": true, "softnic": true}

func TestTransportSansIO(t *testing.T) {
	checked := 0
	for _, f := range sources(t) {
		if !sansIOFloors[top(f.path)] {
			continue
		}
		checked++
		names := map[string]string{} // local name -> import path
		for _, imp := range f.ast.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if sansIO[p] {
				t.Errorf("%s imports %s: %s/ is sans-I/O", f.path, p, top(f.path))
			}
			name := p[strings.LastIndex(p, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			names[name] = p
		}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: a go statement: %s/ runs on the caller's loop", f.path, top(f.path))
			case *ast.SelectorExpr:
				x, ok := n.X.(*ast.Ident)
				if !ok {
					break
				}
				switch names[x.Name] {
				case "time":
					if wallClock[n.Sel.Name] {
						t.Errorf("%s: time.%s: %s/ takes time as an argument", f.path, n.Sel.Name, top(f.path))
					}
				}
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no files under transport/")
	}
}

// mutableAllowed are exported package variables that are not error
// sentinels and are waiting for their change (none should be added).
var mutableAllowed = map[string]bool{}

// TestNoExportedMutableVars: an exported package-level variable is an
// error sentinel (ErrX = ...); defaults are functions or
// constants, so no caller can change another's.
func TestNoExportedMutableVars(t *testing.T) {
	for _, f := range sources(t) {
		for _, d := range f.ast.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !name.IsExported() || mutableAllowed[f.path+" "+name.Name] {
						continue
					}
					if strings.HasPrefix(name.Name, "Err") && i < len(vs.Values) {
						continue // an error sentinel, by Go's convention
					}
					t.Errorf("%s: exported package variable %s: make it a constant, a function or unexported", f.path, name.Name)
				}
			}
		}
	}
}
