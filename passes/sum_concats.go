package passes

import (
	"slices"

	"github.com/lcc-dev/lcc/ir"
)

// This file tidies what autodiff writes for a value read by several slices:
// each slice's rule pads its cotangent with zeros (a concat with full 0) and the
// contributions are summed, so RoPE's two halves cost two concats, a full and an
// add per rotated tensor. When the pads partition the axis the same way the sum
// is one concat of the halves, which codegen then writes in place (fusion across
// shape changes, docs/design.md §10).

// SumConcats rewrites sums of concats with equal boundaries into concats of sums
// and drops additions of zeros.
var SumConcats = Register(withDoc(Rewrite("sum-concats", sumConcatPatterns, 0),
	"add(concat(a…), concat(b…)) -> concat(add(a, b)…) at equal boundaries; x+0 -> x"))

var sumConcatPatterns = []Pattern{
	// add(concat(a1..an), concat(b1..bn)) -> concat(add(a1,b1)..add(an,bn)) at equal boundaries
	{Name: "add-concats", Root: ir.OpAdd, Rewrite: addConcats},
	// add(x, full 0) -> x, add(full 0, x) -> x (same type)
	{Name: "add-zero", Root: ir.OpAdd, Rewrite: addZero},
}

func addConcats(e *Editor, n *ir.Node, b *ir.Builder) bool {
	x, y := n.Args[0].Def, n.Args[1].Def
	if x == nil || y == nil || x.Op != ir.OpConcat || y.Op != ir.OpConcat || len(x.Args) != len(y.Args) ||
		!n.Args[0].Type.Equal(n.Result().Type) || !n.Args[1].Type.Equal(n.Result().Type) {
		return false
	}
	r := n.Result().Type.Rank()
	ax, err1 := ir.AxisIndex(x.AttrInt("axis"), r)
	ay, err2 := ir.AxisIndex(y.AttrInt("axis"), r)
	if err1 != nil || err2 != nil || ax != ay {
		return false
	}
	for i := range x.Args {
		if !slices.Equal(x.Args[i].Type.Shape, y.Args[i].Type.Shape) {
			return false
		}
	}
	parts := make([]*ir.Value, len(x.Args))
	for i := range parts {
		parts[i] = b.Add(x.Args[i], y.Args[i])
	}
	e.Replace(n.Result(), b.Apply1(ir.OpConcat, ir.A("axis", int64(ax)), parts...))
	return true
}

func addZero(e *Editor, n *ir.Node, b *ir.Builder) bool {
	for i, a := range n.Args {
		other := n.Args[1-i]
		if a.Def != nil && a.Def.Op == ir.OpFull && a.Def.AttrFloat("value") == 0 && other.Type.Equal(n.Result().Type) {
			e.Replace(n.Result(), other)
			return true
		}
	}
	return false
}
