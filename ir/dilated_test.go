package ir

import (
	"go/ast"
	goparser "go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// evalExpr evaluates an integer expression over +, −, *, /, %, parentheses and
// min, with C's (and Go's) truncating division.
func evalExpr(t *testing.T, e ast.Expr, vars map[string]int64) int64 {
	t.Helper()
	switch e := e.(type) {
	case *ast.BasicLit:
		v, err := strconv.ParseInt(e.Value, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	case *ast.Ident:
		v, ok := vars[e.Name]
		if !ok {
			t.Fatalf("unknown name %s", e.Name)
		}
		return v
	case *ast.ParenExpr:
		return evalExpr(t, e.X, vars)
	case *ast.BinaryExpr:
		a, b := evalExpr(t, e.X, vars), evalExpr(t, e.Y, vars)
		switch e.Op {
		case token.ADD:
			return a + b
		case token.SUB:
			return a - b
		case token.MUL:
			return a * b
		case token.QUO:
			return a / b
		case token.REM:
			return a % b
		}
	case *ast.CallExpr:
		if f, ok := e.Fun.(*ast.Ident); ok && f.Name == "min" && len(e.Args) == 2 {
			return min(evalExpr(t, e.Args[0], vars), evalExpr(t, e.Args[1], vars))
		}
	}
	t.Fatalf("unsupported expression %T", e)
	return 0
}

// The kernels' C expressions compute HeadOffset for every head count, head and
// dilation up to 16, and HeadOffsetCUDA uses exactly those expressions.
func TestHeadOffsetCUDA(t *testing.T) {
	for _, c := range []struct{ offsets, expr string }{
		{OffsetsPaper, headOffsetPaperExpr}, {OffsetsBlock, headOffsetBlockExpr}} {
		e, err := goparser.ParseExpr(c.expr)
		if err != nil {
			t.Fatal(err)
		}
		for heads := int64(1); heads <= 16; heads++ {
			for r := int64(1); r <= 16; r++ {
				for h := range heads {
					vars := map[string]int64{"h": h, "heads": heads, "r": r}
					if got, want := evalExpr(t, e, vars), HeadOffset(c.offsets, h, heads, r); got != want {
						t.Fatalf("%s H=%d r=%d h=%d: C expression %d, HeadOffset %d", c.offsets,
							heads, r, h, got, want)
					}
				}
			}
		}
		if !strings.Contains(HeadOffsetCUDA, c.expr) {
			t.Errorf("HeadOffsetCUDA lacks %q", c.expr)
		}
	}
}

// Spot values from docs/design.md §3: paper cycles heads over residues, block gives
// each residue a contiguous run of ⌈H/r⌉ heads, the last run possibly shorter.
func TestHeadOffset(t *testing.T) {
	var paper, block []int64
	for h := range int64(6) {
		paper = append(paper, HeadOffset(OffsetsPaper, h, 6, 4))
		block = append(block, HeadOffset(OffsetsBlock, h, 6, 4))
	}
	if got := joinInt64(paper); got != "0 1 2 3 0 1" {
		t.Errorf("paper offsets %s, want 0 1 2 3 0 1", got)
	}
	if got := joinInt64(block); got != "0 0 1 1 2 2" {
		t.Errorf("block offsets %s, want 0 0 1 1 2 2", got)
	}
}

func joinInt64(xs []int64) string {
	var s []string
	for _, x := range xs {
		s = append(s, strconv.FormatInt(x, 10))
	}
	return strings.Join(s, " ")
}
