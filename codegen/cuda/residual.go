package cuda

import (
	"slices"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Residual adds fused into the norms beside them (docs/design.md §10). A
// pre-norm block computes x' = x + f(x) and normalises x' at once; its backward
// adds the norm's dx to the residual stream's gradient. Each add becomes part of
// the norm's kernel:
//
//   - rms_norm / layer_norm(add(a, b)): the norm kernel first writes a + b (the
//     residual stream, which later nodes read) and normalises what it wrote;
//   - add(r, rms_norm_grad / layer_norm_grad(...).dx): the backward kernel adds r
//     before its store and writes the sum; dx itself is never stored.
//
// g.resid maps the norm to the add it absorbs; g.absorbed marks those adds, which
// lowering skips. Both need the add's operands whole (no broadcasting, no views)
// and ready when the norm's kernel runs.
func (g *gen) planResiduals() {
	g.resid, g.absorbed = map[*ir.Node]*ir.Node{}, map[*ir.Node]bool{}
	pos := map[*ir.Node]int{}
	for i, n := range g.f.Body {
		pos[n] = i
	}
	// whole: v is read in place with v's own shape.
	whole := func(v *ir.Value, shape []int64) bool {
		_, view := g.views[v]
		return !view && slices.Equal(v.Type.Shape, shape) && v.Type.DType.IsFloat() && v.Type.DType != tensor.F64
	}
	before := func(v *ir.Value, i int) bool { return v.Def == nil || pos[v.Def] < i }
	for i, n := range g.f.Body {
		switch n.Op {
		case ir.OpRMSNorm, ir.OpLayerNorm:
			x := n.Args[0]
			a := x.Def
			if a == nil || a.Op != ir.OpAdd || g.absorbed[a] || !whole(x, x.Type.Shape) {
				continue
			}
			if !whole(a.Args[0], x.Type.Shape) || !whole(a.Args[1], x.Type.Shape) || a.Args[0] == a.Args[1] {
				continue
			}
			// Nothing may read x before the norm's kernel writes it.
			ok := true
			for _, u := range g.uses[x] {
				ok = ok && pos[u] >= i
			}
			if ok {
				g.resid[n], g.absorbed[a] = a, true
			}
		case ir.OpRMSNormGrad, ir.OpLayerNormGrad:
			dx := n.Results[0]
			if g.outputs[dx] || len(g.uses[dx]) != 1 {
				continue
			}
			a := g.uses[dx][0]
			if a.Op != ir.OpAdd || g.absorbed[a] || a.Args[0] == a.Args[1] {
				continue
			}
			r := a.Args[0]
			if r == dx {
				r = a.Args[1]
			}
			if whole(r, dx.Type.Shape) && whole(a.Result(), dx.Type.Shape) && before(r, i) {
				g.resid[n], g.absorbed[a] = a, true
			}
		}
	}
}
