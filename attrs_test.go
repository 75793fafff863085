package lcc_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAttributeDefaultsInOpTable fails when non-test code reads a node attribute
// with a default written at the read (n.Attrs.Int("axis", -1)): defaults live in
// the op's row (ir.OpInfo.Defaults) and are read with n.AttrInt("axis") and its
// siblings, so each is written once.
func TestAttributeDefaultsInOpTable(t *testing.T) {
	var bad []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 2 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch sel.Sel.Name {
			case "Int", "Float", "String", "DType":
			default:
				return true
			}
			if recv, ok := sel.X.(*ast.SelectorExpr); ok && recv.Sel.Name == "Attrs" {
				bad = append(bad, fset.Position(call.Pos()).String())
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("attribute reads with a default at the read; use n.Attr%s and the op row's "+
			"Defaults:\n%s", "Int(name) (or AttrFloat, AttrString, AttrDType)", strings.Join(bad, "\n"))
	}
}
