package verbs_test

import (
	"go/importer"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAPINoInternalTypes: nothing exported by package verbs mentions a
// type of an internal package, so another module can name every type it
// gets (STYLE 11).
func TestAPINoInternalTypes(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks from source")
	}
	pkg, err := importer.ForCompiler(token.NewFileSet(), "source", nil).Import("github.com/mrlab/mrlab/verbs")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[types.Type]bool{}
	var check func(where string, typ types.Type)
	check = func(where string, typ types.Type) {
		if seen[typ] {
			return
		}
		seen[typ] = true
		switch x := typ.(type) {
		case *types.Named:
			if p := x.Obj().Pkg(); p != nil && strings.Contains(p.Path(), "/internal/") {
				t.Errorf("%s uses %s.%s", where, p.Path(), x.Obj().Name())
			}
			if x.Obj().Pkg() == pkg && x.Obj().Exported() {
				check(where, x.Underlying())
				for i := 0; i < x.NumMethods(); i++ {
					if m := x.Method(i); m.Exported() {
						check(x.Obj().Name()+"."+m.Name(), m.Type())
					}
				}
			}
		case *types.Pointer:
			check(where, x.Elem())
		case *types.Slice:
			check(where, x.Elem())
		case *types.Array:
			check(where, x.Elem())
		case *types.Map:
			check(where, x.Key())
			check(where, x.Elem())
		case *types.Chan:
			check(where, x.Elem())
		case *types.Signature:
			for i := 0; i < x.Params().Len(); i++ {
				check(where, x.Params().At(i).Type())
			}
			for i := 0; i < x.Results().Len(); i++ {
				check(where, x.Results().At(i).Type())
			}
		case *types.Struct:
			for i := 0; i < x.NumFields(); i++ {
				if f := x.Field(i); f.Exported() {
					check(where+"."+f.Name(), f.Type())
				}
			}
		case *types.Interface:
			for i := 0; i < x.NumMethods(); i++ {
				check(where, x.Method(i).Type())
			}
		}
	}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		if obj := scope.Lookup(name); obj.Exported() {
			check(name, obj.Type())
		}
	}
}

// TestExternalModule builds the examples from a module of their own that
// requires mrlab (through a replace directive): a program outside this
// repository can import package verbs and needs nothing else of mrlab.
func TestExternalModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, ex := range []string{"rdma-write", "pingpong"} {
		src, err := os.ReadFile(filepath.Join(root, "examples", ex, "main.go"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, ex), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ex, "main.go"), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gomod := "module example.com/myrdma\n\ngo 1.26.0\n\nrequire github.com/mrlab/mrlab v0.0.0\n\nreplace github.com/mrlab/mrlab => " + root + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	// The checksums mrlab's own build verified, so tidy needs no network.
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	gocmd := func(args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		// Offline: everything comes from the module cache mrlab's own
		// build filled.
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	gocmd("mod", "tidy")
	gocmd("build", "-o", dir+"/bin/", "./...")
	gocmd("vet", "./...")
	for _, ex := range []string{"rdma-write", "pingpong"} {
		if _, err := os.Stat(filepath.Join(dir, "bin", ex)); err != nil {
			t.Errorf("%s not built: %v", ex, err)
		}
	}
}
