package passes

import (
	"math"

	"github.com/lcc-dev/lcc/ir"
)

// This file folds the normalisations that exporters decompose back into one op
// each (docs/design.md §10, "memory-bound work at bandwidth"): PyTorch's exporter writes
// Llama's RMSNorm as pow, reduce_mean, add, sqrt, reciprocal and two muls, five
// kernels forward and a string of reductions backward; rms_norm and layer_norm are
// one row kernel each. The rules only match values that are equal by definition
// (same x, the mean over the trailing dims, a uniform eps), so the rewrite keeps the
// function's value; the golden tests run it before and after on the CPU.

// MatchNorms rewrites decomposed RMSNorm and LayerNorm into rms_norm and layer_norm.
var MatchNorms = Register(withDoc(Rewrite("match-norms", matchNormPatterns, 0),
	"fold decomposed RMSNorm and LayerNorm (pow, mean, add, sqrt, div) into rms_norm and layer_norm"))

var matchNormPatterns = []Pattern{
	// x · 1/√(mean(x²) + eps) -> rms_norm(x)   (also x·rsqrt(…), x / √(…))
	{Name: "rms-norm", Root: ir.OpMul, Rewrite: matchRMSNorm},
	{Name: "rms-norm-div", Root: ir.OpDiv, Rewrite: matchRMSNorm},
	// (x − mean(x)) · 1/√(mean((x − mean(x))²) + eps) -> layer_norm(x)
	{Name: "layer-norm", Root: ir.OpMul, Rewrite: matchLayerNorm},
	{Name: "layer-norm-div", Root: ir.OpDiv, Rewrite: matchLayerNorm},
	// norm(x) · γ -> norm(x, γ)   when γ spans the normalised dims
	{Name: "norm-scale", Root: ir.OpMul, Rewrite: foldNormScale},
	// layer_norm(x, γ) + β -> layer_norm(x, γ, β)
	{Name: "norm-bias", Root: ir.OpAdd, Rewrite: foldNormBias},
}

// invRMS reads r = 1/√(m + eps) from a mul operand (recip(sqrt(·)) or rsqrt(·)),
// or s = √(m + eps) from a div's divisor, returning m and eps.
func invRMS(v *ir.Value, divisor bool) (m *ir.Value, eps float64, ok bool) {
	d := v.Def
	if d == nil {
		return nil, 0, false
	}
	var sum *ir.Value
	switch {
	case divisor && d.Op == ir.OpSqrt:
		sum = d.Args[0]
	case !divisor && d.Op == ir.OpRsqrt:
		sum = d.Args[0]
	case !divisor && d.Op == ir.OpRecip && d.Args[0].Def != nil && d.Args[0].Def.Op == ir.OpSqrt:
		sum = d.Args[0].Def.Args[0]
	default:
		return nil, 0, false
	}
	a := sum.Def
	if a == nil || a.Op != ir.OpAdd {
		return nil, 0, false
	}
	for i := range 2 {
		e, okE := uniformScalar(a.Args[1-i])
		if okE && e >= 0 && !math.IsInf(e, 0) && a.Args[1-i].Type.Numel() == 1 &&
			a.Args[i].Type.SameShape(sum.Type) {
			return a.Args[i], e, true
		}
	}
	return nil, 0, false
}

// trailingMean reads m = reduce_mean(u) {keepdims} over the trailing dims
// axis..rank−1 of u and returns u and axis.
func trailingMean(m *ir.Value) (u *ir.Value, axis int, ok bool) {
	d := m.Def
	if d == nil || d.Op != ir.OpReduceMean || !d.AttrBool("keepdims") {
		return nil, 0, false
	}
	u = d.Args[0]
	r := u.Type.Rank()
	axes := d.AttrInts("axes")
	if r == 0 || len(axes) == 0 || len(axes) > r {
		return nil, 0, false
	}
	seen := make([]bool, r)
	for _, a := range axes {
		i, err := ir.AxisIndex(a, r)
		if err != nil || seen[i] {
			return nil, 0, false
		}
		seen[i] = true
	}
	axis = r - len(axes)
	for i := axis; i < r; i++ {
		if !seen[i] {
			return nil, 0, false
		}
	}
	return u, axis, true
}

// squareOf reads u = x² (pow(x, 2) or mul(x, x)) and returns x.
func squareOf(u *ir.Value) (*ir.Value, bool) {
	d := u.Def
	switch {
	case d == nil:
	case d.Op == ir.OpMul && d.Args[0] == d.Args[1]:
		return d.Args[0], true
	case d.Op == ir.OpPow:
		if p, ok := uniformScalar(d.Args[1]); ok && p == 2 && d.Args[1].Type.Numel() == 1 {
			return d.Args[0], true
		}
	}
	return nil, false
}

// normalised finds, in a mul or div node n, the operand x and the factor
// 1/√(mean(sq) + eps), returning x, sq's base (the value squared), the axis and eps.
func normalised(n *ir.Node) (x, base *ir.Value, axis int, eps float64, ok bool) {
	for i := range 2 {
		if n.Op == ir.OpDiv && i == 1 {
			break
		}
		x = n.Args[i]
		m, e, okR := invRMS(n.Args[1-i], n.Op == ir.OpDiv)
		if !okR {
			continue
		}
		u, ax, okM := trailingMean(m)
		if !okM || !x.Type.SameShape(n.Result().Type) || !x.Type.DType.IsFloat() ||
			u.Type.Rank() != x.Type.Rank() {
			continue
		}
		b, okS := squareOf(u)
		if !okS {
			continue
		}
		return x, b, ax, e, true
	}
	return nil, nil, 0, 0, false
}

func normAttrs(x *ir.Value, axis int, eps float64) ir.Attrs {
	return ir.A("axis", int64(axis-x.Type.Rank()), "eps", eps)
}

func matchRMSNorm(e *Editor, n *ir.Node, b *ir.Builder) bool {
	x, base, axis, eps, ok := normalised(n)
	if !ok || base != x {
		return false
	}
	if _, centred := layerNormInput(x, axis); centred {
		return false // (x − mean x) normalised so is a layer_norm of x
	}
	y := b.Apply1(ir.OpRMSNorm, normAttrs(x, axis, eps), x)
	if b.Err() != nil {
		return true // the driver reports the builder's error
	}
	e.Replace(n.Result(), y)
	return true
}

// layerNormInput reads xc = x − mean(x) over the trailing dims from axis and
// returns x.
func layerNormInput(xc *ir.Value, axis int) (*ir.Value, bool) {
	if xc.Def == nil || xc.Def.Op != ir.OpSub {
		return nil, false
	}
	x, mu := xc.Def.Args[0], xc.Def.Args[1]
	u, ax, ok := trailingMean(mu)
	if !ok || u != x || ax != axis || !x.Type.SameShape(xc.Type) {
		return nil, false
	}
	return x, true
}

func matchLayerNorm(e *Editor, n *ir.Node, b *ir.Builder) bool {
	xc, base, axis, eps, ok := normalised(n)
	if !ok || base != xc {
		return false
	}
	x, okC := layerNormInput(xc, axis)
	if !okC {
		return false
	}
	y := b.Apply1(ir.OpLayerNorm, normAttrs(x, axis, eps), x)
	if b.Err() != nil {
		return true
	}
	e.Replace(n.Result(), y)
	return true
}

// normOperand finds in a binary node n an operand that is a norm op with want
// arguments read only by n, and returns it and the other operand.
func normOperand(e *Editor, n *ir.Node, want int, ops ...ir.Op) (norm *ir.Node, other *ir.Value, ok bool) {
	for i := range 2 {
		d := n.Args[i].Def
		if d == nil || len(d.Args) != want || !e.ReadOnce(n.Args[i]) {
			continue
		}
		for _, op := range ops {
			if d.Op == op {
				return d, n.Args[1-i], true
			}
		}
	}
	return nil, nil, false
}

// spansNorm reports whether p has exactly the normalised dims of norm node d and
// its dtype.
func spansNorm(d *ir.Node, p *ir.Value) bool {
	x := d.Args[0]
	ax, err := ir.AxisIndex(d.AttrInt("axis"), x.Type.Rank())
	if err != nil || p.Type.DType != x.Type.DType {
		return false
	}
	return ir.T(p.Type.DType, x.Type.Shape[ax:]...).SameShape(p.Type)
}

func foldNormScale(e *Editor, n *ir.Node, b *ir.Builder) bool {
	d, g, ok := normOperand(e, n, 1, ir.OpRMSNorm, ir.OpLayerNorm)
	if !ok || !spansNorm(d, g) {
		return false
	}
	y := b.Apply1(d.Op, d.Attrs.Clone(), d.Args[0], g)
	if b.Err() != nil {
		return true
	}
	e.Replace(n.Result(), y)
	return true
}

func foldNormBias(e *Editor, n *ir.Node, b *ir.Builder) bool {
	d, beta, ok := normOperand(e, n, 2, ir.OpLayerNorm)
	if !ok || !spansNorm(d, beta) {
		return false
	}
	y := b.Apply1(ir.OpLayerNorm, d.Attrs.Clone(), d.Args[0], d.Args[1], beta)
	if b.Err() != nil {
		return true
	}
	e.Replace(n.Result(), y)
	return true
}
