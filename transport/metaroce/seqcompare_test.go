package metaroce

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// seqCompareAllowed are the flagged expressions that are not of sequence
// numbers, by "file expression", each with why.
var seqCompareAllowed = map[string]string{
	// echo is the sender's own 32-bit microsecond timestamp echoed back: a
	// clock, not a sequence number.
	"ackhandler.go int32(echo-uint32(e.sentAt)) < 0": "32-bit timestamp",
	"ackhandler.go int32(c.ts()-echo)":               "32-bit timestamp",
	// A rate hint (Mb/s) against a 10% band around the last one sent.
	"receiver.go h < c.r.lastHint-c.r.lastHint/10": "rate hint, not a sequence number",
}

// TestSeqComparisonsUseWireSeq: no non-test file of the engine compares
// sequence numbers by hand. Every wraparound comparison of 32-bit numbers
// goes through wire.Seq (Before, After, Dist, Span, In, Within), so the
// window rules are written, and tested at the 2^32 boundary, in one place.
// Flagged: a conversion int32(a-b) of a uint32 difference (the signed-
// distance idiom) and an ordered comparison with a uint32 difference on
// either side (the window idiom a-base < next-base), both with a and b not
// constants.
func TestSeqComparisonsUseWireSeq(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	if _, err := conf.Check("github.com/mrlab/mrlab/transport/metaroce", fset, files, info); err != nil {
		t.Fatalf("type-checking the package: %v", err)
	}
	// rawDiff reports whether e (under parentheses and conversions) is a
	// difference of two non-constant uint32 values.
	var rawDiff func(e ast.Expr) bool
	rawDiff = func(e ast.Expr) bool {
		switch x := e.(type) {
		case *ast.ParenExpr:
			return rawDiff(x.X)
		case *ast.CallExpr:
			if tv := info.Types[x.Fun]; tv.IsType() && len(x.Args) == 1 {
				return rawDiff(x.Args[0])
			}
		case *ast.BinaryExpr:
			if x.Op != token.SUB {
				return false
			}
			for _, o := range []ast.Expr{x.X, x.Y} {
				tv := info.Types[o]
				if tv.Value != nil || !types.Identical(tv.Type.Underlying(), types.Typ[types.Uint32]) {
					return false
				}
			}
			return true
		}
		return false
	}
	src := map[string][]byte{}
	at := func(n ast.Node) (key, where string) {
		p := fset.Position(n.Pos())
		if src[p.Filename] == nil {
			b, err := os.ReadFile(p.Filename)
			if err != nil {
				t.Fatal(err)
			}
			src[p.Filename] = b
		}
		text := string(src[p.Filename][p.Offset:fset.Position(n.End()).Offset])
		return p.Filename + " " + text, p.String()
	}
	seen := map[string]bool{}
	seqCmpParent := map[*ast.CallExpr]bool{} // conversions flagged with their comparison
	flag := func(n ast.Node, what string) {
		key, where := at(n)
		if _, ok := seqCompareAllowed[key]; ok {
			seen[key] = true
			return
		}
		t.Errorf("%s: %s by hand: use wire.Seq", where, what)
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CallExpr:
				if tv := info.Types[x.Fun]; tv.IsType() && len(x.Args) == 1 &&
					types.Identical(tv.Type, types.Typ[types.Int32]) && rawDiff(x.Args[0]) {
					if _, inCmp := seqCmpParent[x]; !inCmp {
						flag(x, "signed distance int32(a-b)")
					}
				}
			case *ast.BinaryExpr:
				switch x.Op {
				case token.LSS, token.LEQ, token.GTR, token.GEQ:
					if rawDiff(x.X) || rawDiff(x.Y) {
						for _, o := range []ast.Expr{x.X, x.Y} {
							if c, ok := ast.Unparen(o).(*ast.CallExpr); ok {
								seqCmpParent[c] = true
							}
						}
						flag(x, "comparison of a uint32 difference")
					}
				}
			}
			return true
		})
	}
	for key, why := range seqCompareAllowed {
		if !seen[key] {
			t.Errorf("%q is allowed (%s) but not found: remove it from seqCompareAllowed", key, why)
		}
	}
}
