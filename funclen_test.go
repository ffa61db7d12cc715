package layers_test

import (
	"go/ast"
	"testing"
)

// maxFuncLines bounds a non-test function, from its func line to its
// closing brace: a longer one is a sequence of steps that want names of
// their own (a state type with small methods, or helpers named for what
// they do), each of which can be read and tested alone.
const maxFuncLines = 100

// longFuncsAllowed are the functions over maxFuncLines that wait for their
// split, by "path Func" (methods as Type.Method), each with why it waits.
// Add none: split the function instead. An entry whose function is back
// under the bound fails the test too, so the list only shrinks.
var longFuncsAllowed = map[string]string{}

// TestFunctionLength: no non-test function (or function literal) outside
// generated files is longer than maxFuncLines, but those allowed above.
func TestFunctionLength(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range sources(t) {
		if ast.IsGenerated(f.ast) {
			continue
		}
		for _, d := range f.ast.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			name := funcName(fd)
			ast.Inspect(fd, func(n ast.Node) bool {
				what := name
				switch n.(type) {
				case *ast.FuncDecl:
				case *ast.FuncLit:
					what = name + "'s func literal"
				default:
					return true
				}
				lines := f.fset.Position(n.End()).Line - f.fset.Position(n.Pos()).Line + 1
				if lines <= maxFuncLines {
					return true
				}
				key := f.path + " " + what
				if _, ok := longFuncsAllowed[key]; ok {
					seen[key] = true
					return true
				}
				t.Errorf("%s:%d: %s is %d lines, more than %d: split it into named steps",
					f.path, f.fset.Position(n.Pos()).Line, what, lines, maxFuncLines)
				return true
			})
		}
	}
	for key, why := range longFuncsAllowed {
		if !seen[key] {
			t.Errorf("%s is allowed to be long (%s) but is not over %d lines (or is gone): remove it from longFuncsAllowed", key, why, maxFuncLines)
		}
	}
}

// funcName is a function's name, Type.Method for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	for {
		switch x := typ.(type) {
		case *ast.StarExpr:
			typ = x.X
			continue
		case *ast.IndexExpr: // a generic type's method
			typ = x.X
			continue
		case *ast.IndexListExpr:
			typ = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fd.Name.Name
		}
		return fd.Name.Name
	}
}
