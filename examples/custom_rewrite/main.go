// Command custom_rewrite shows how to write your own rewrite rules for lcc and run
// them in a pipeline: it builds a small MLP whose GELU is written out with erf (as
// PyTorch's exporter writes nn.GELU), fuses it into one gelu op, folds a
// multiplication by 1, and prints the IR before and after with the hit counts.
//
//	go run ./examples/custom_rewrite
package main

import (
	"fmt"
	"math"
	"os"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/tensor"
)

// constant returns the value of a rank-0 or one-element constant.
func constant(v *ir.Value) (float64, bool) {
	if v.Def == nil || v.Def.Op != ir.OpConstant {
		return 0, false
	}
	t := v.Def.AttrTensor("value")
	if t == nil || t.Numel() != 1 || !t.DType.IsFloat() {
		return 0, false
	}
	return t.F[0], true
}

// near reports whether a float32 constant is x.
func near(c, x float64) bool { return math.Abs(c-x) <= 1e-6*math.Abs(x) }

// operands returns the arguments of a commutative binary node as (a, b) and
// (b, a), so that a rule can try both orders.
func operands(n *ir.Node) [2][2]*ir.Value {
	return [2][2]*ir.Value{{n.Args[0], n.Args[1]}, {n.Args[1], n.Args[0]}}
}

// def returns v's defining node if it has op op.
func def(v *ir.Value, op ir.Op) *ir.Node {
	if v.Def != nil && v.Def.Op == op {
		return v.Def
	}
	return nil
}

// foldMulOne is the rule x*1 -> x.
func foldMulOne(e *passes.Editor, n *ir.Node, b *ir.Builder) bool {
	for _, xy := range operands(n) {
		if c, ok := constant(xy[1]); ok && c == 1 && xy[0].Type.Equal(n.Result().Type) {
			e.Replace(n.Result(), xy[0])
			return true
		}
	}
	return false
}

// fuseGelu is the rule x * (0.5 * (1 + erf(x / √2))) -> gelu(x); it builds the
// replacement with b, which sits just before n.
func fuseGelu(e *passes.Editor, n *ir.Node, b *ir.Builder) bool {
	for _, xh := range operands(n) {
		x, h := xh[0], xh[1]
		half := def(h, ir.OpMul)
		if half == nil {
			continue
		}
		for _, ca := range operands(half) {
			if c, ok := constant(ca[0]); !ok || c != 0.5 {
				continue
			}
			add := def(ca[1], ir.OpAdd)
			if add == nil {
				continue
			}
			for _, oe := range operands(add) {
				if c, ok := constant(oe[0]); !ok || c != 1 {
					continue
				}
				erf := def(oe[1], ir.OpErf)
				if erf == nil {
					continue
				}
				div := def(erf.Args[0], ir.OpDiv)
				if div == nil || div.Args[0] != x {
					continue
				}
				if c, ok := constant(div.Args[1]); !ok || !near(c, math.Sqrt2) {
					continue
				}
				e.Replace(n.Result(), b.Unary(ir.OpGelu, x))
				return true
			}
		}
	}
	return false
}

// userRules is the rule list, one pattern per line, tinygrad style.
var userRules = []passes.Pattern{
	// x*1 -> x
	{Name: "mul-one", Root: ir.OpMul, Rewrite: foldMulOne},
	// x * (0.5 * (1 + erf(x/√2))) -> gelu(x)
	{Name: "gelu-erf", Root: ir.OpMul, Rewrite: fuseGelu},
}

// buildMLP is y = gelu_erf(x·W1 · 1)·W2 with the GELU written out.
func buildMLP() (*ir.Func, error) {
	w := func(rows, cols int64, seed float64) *tensor.Tensor {
		t := tensor.New(tensor.F32, rows, cols)
		for i := range t.F {
			t.F[i] = math.Sin(seed*float64(i+1)) / 4
		}
		t.RoundTo(tensor.F32)
		return t
	}
	b := ir.NewBuilder("mlp")
	x := b.Input("x", ir.T(tensor.F32, 2, 8))
	h := b.MatMul(x, b.Weight("w1", w(8, 16, 0.7)), false, false)
	h = b.Mul(h, b.Scalar(tensor.F32, 1))
	e := b.Unary(ir.OpErf, b.Div(h, b.Scalar(tensor.F32, math.Sqrt2)))
	g := b.Mul(h, b.Mul(b.Scalar(tensor.F32, 0.5), b.Add(e, b.Scalar(tensor.F32, 1))))
	b.Output("y", b.MatMul(g, b.Weight("w2", w(16, 4, 1.3)), false, false))
	return b.Build()
}

func main() {
	f, err := buildMLP()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	before := f.Clone()
	fmt.Print("// before\n", ir.Print(f))

	rewrite, stats := passes.RewriteWithStats("user-rules", userRules, 0)
	pipeline := []passes.Pass{rewrite, passes.EliminateCommonSubexpressions}
	if _, err := passes.Run(f, pipeline, passes.Options{VerifyEach: true}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Print("\n// after\n", ir.Print(f))
	fmt.Printf("\nhits: %v (%d sweeps)\n", stats, stats.Sweeps)

	// The rewrite must not change what the function computes.
	x := tensor.New(tensor.F32, 2, 8)
	for i := range x.F {
		x.F[i] = math.Cos(float64(i))
	}
	in := map[string]*tensor.Tensor{"x": x}
	opts := interp.Options{Precision: tensor.F64}
	want, err1 := interp.Run(before, in, opts)
	got, err2 := interp.Run(f, in, opts)
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, err1, err2)
		os.Exit(1)
	}
	var diff float64
	for i := range want["y"].F {
		diff = max(diff, math.Abs(want["y"].F[i]-got["y"].F[i]))
	}
	fmt.Printf("max |before - after| = %.3g\n", diff)
}
