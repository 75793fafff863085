package passes

import (
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/ir"
)

// isConst reports whether v is a constant whose elements all equal x.
func isConst(v *ir.Value, x float64) bool {
	c, ok := uniformScalar(v)
	return ok && c == x && v.Def != nil
}

// identityPatterns fold x*1 and x+0 in either argument order.
func identityPatterns() []Pattern {
	fold := func(unit float64) func(e *Editor, n *ir.Node, b *ir.Builder) bool {
		return func(e *Editor, n *ir.Node, b *ir.Builder) bool {
			for i := range 2 {
				x, c := n.Args[i], n.Args[1-i]
				if isConst(c, unit) && x.Type.Equal(n.Result().Type) {
					e.Replace(n.Result(), x)
					return true
				}
			}
			return false
		}
	}
	return []Pattern{
		// x*1 -> x
		{Name: "mul-one", Root: ir.OpMul, Rewrite: fold(1)},
		// x+0 -> x
		{Name: "add-zero", Root: ir.OpAdd, Rewrite: fold(0)},
	}
}

const identityIR = `func @f(
    %0: f32[4] input "x",
) {
  %1 = constant() {value=f32[]{1.0}} : f32[]
  %2 = mul(%0, %1) : f32[4]
  %3 = constant() {value=f32[]{0.0}} : f32[]
  %4 = add(%3, %2) : f32[4]
  %5 = mul(%1, %4) : f32[4]
  %6 = exp(%5) : f32[4]
  return %6 "y"
}
`

func TestRewriteFixedPoint(t *testing.T) {
	f, err := ir.Parse(identityIR)
	if err != nil {
		t.Fatal(err)
	}
	p, stats := RewriteWithStats("fold-identities", identityPatterns(), 0)
	runPasses(t, f, p)
	want := `func @f(
    %0: f32[4] input "x",
) {
  %1 = exp(%0) : f32[4]
  return %1 "y"
}
`
	if got := ir.Print(f); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if stats.String() != "add-zero=1 mul-one=2" || stats.Total() != 3 || stats.Sweeps != 2 {
		t.Errorf("stats %v, %d sweeps", stats, stats.Sweeps)
	}
	// A second run starts its statistics afresh and finds nothing.
	runPasses(t, f, p)
	if stats.Total() != 0 || stats.Sweeps != 1 {
		t.Errorf("second run: stats %v, %d sweeps", stats, stats.Sweeps)
	}
}

func TestRewriteNoFixedPoint(t *testing.T) {
	f, err := ir.Parse(identityIR)
	if err != nil {
		t.Fatal(err)
	}
	// exp(x) -> exp(x), a fresh copy every time: never settles.
	churn := Pattern{Name: "churn", Root: ir.OpExp,
		Rewrite: func(e *Editor, n *ir.Node, b *ir.Builder) bool {
			e.Replace(n.Result(), b.Unary(ir.OpExp, n.Args[0]))
			return true
		}}
	_, err = Run(f, []Pass{Rewrite("churn", []Pattern{churn}, 5)}, Options{})
	if err == nil || !strings.Contains(err.Error(), "did not reach a fixed point after 5 sweeps") ||
		!strings.Contains(err.Error(), "pass churn") {
		t.Errorf("err = %v", err)
	}
}

func TestRewriteBuilderError(t *testing.T) {
	f, err := ir.Parse(identityIR)
	if err != nil {
		t.Fatal(err)
	}
	bad := Pattern{Name: "bad", Root: ir.OpExp,
		Rewrite: func(e *Editor, n *ir.Node, b *ir.Builder) bool {
			b.Reshape(n.Args[0], 3) // 4 elements do not fit [3]
			return true
		}}
	_, err = ApplyPatterns(f, []Pattern{bad}, 0)
	if err == nil || !strings.Contains(err.Error(), "pattern bad at exp") {
		t.Errorf("err = %v", err)
	}
}
