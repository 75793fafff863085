package passes

import (
	"fmt"
	"slices"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// This file removes a transpose and its inverse around ops that do not care about
// the layout. HF exports rotate q and k in the [B,H,T,D] layout: transpose to it,
// RoPE (mul by cos, slice the halves, neg, concat, mul by sin, add), and
// match-attention transposes back to the attention op's [B,T,H,D]. Each transpose
// is a copy kernel, forward and backward. Run in the first layout instead, the
// region computes the same elements at permuted indices: elementwise ops commute
// with a permutation applied to all their operands, and a slice or concat along
// axis a is the same slice or concat along the axis a becomes (docs/design.md §4).
// Run it before autodiff so the backward loses the transposes too.
//
// The rewrite is conservative: every value of the region must be read only by
// the region or by inverse transposes, none may be an output, and an operand
// from outside the region must be a constant (permuted here), already laid out
// the same in both layouts (unit size on every axis the permutation moves), or
// moved by a reshape (the permutation keeps its other axes in order: RoPE's cos
// and sin, [1,1,T,D] in [B,H,T,D], computed at run time once T is too long to
// fold, are [1,T,1,D] in [B,T,H,D]).

// CancelTransposes runs the ops between transpose(y, p) and transposes by p⁻¹ of
// their results in y's layout, so that both transposes go.
var CancelTransposes = Register(withDoc(Rewrite("cancel-transposes", cancelTransposePatterns, 0),
	"run layout-agnostic ops (RoPE) between transpose(y, p) and its inverse in y's layout"))

var cancelTransposePatterns = []Pattern{
	// transpose(g(transpose(y, p), c), p⁻¹) -> g'(y, c') for g elementwise, slice or concat
	{Name: "transpose-pair", Root: ir.OpTranspose, Rewrite: cancelTransposePair},
}

// layoutRegion is what flows from the entry transpose t1 = transpose(y, perm) to
// the exits, transposes by inv of region values.
type layoutRegion struct {
	entry *ir.Node
	perm  []int64 // t1's permutation: t1 axis a is y axis perm[a]
	inv   []int64 // its inverse: y axis j is t1 axis inv[j]
	nodes []*ir.Node
	exits []*ir.Node
}

func cancelTransposePair(e *Editor, n *ir.Node, b *ir.Builder) bool {
	r, ok := findLayoutRegion(e, n)
	if !ok {
		return false
	}
	r.rewrite(e, b)
	return true
}

// findLayoutRegion collects the region that starts at the transpose t1, or
// reports false when some value of it escapes, some op in it is not
// layout-agnostic, or it reaches no inverse transpose.
func findLayoutRegion(e *Editor, t1 *ir.Node) (*layoutRegion, bool) {
	perm := t1.AttrInts("perm")
	inv := inversePerm(perm)
	if isIdentity(perm) {
		return nil, false // an identity transpose is not a layout change
	}
	r := &layoutRegion{entry: t1, perm: perm, inv: inv}
	rank := len(perm)
	in := map[*ir.Value]bool{t1.Result(): true}
	seen := map[*ir.Node]bool{}
	work := []*ir.Value{t1.Result()}
	for len(work) > 0 {
		v := work[len(work)-1]
		work = work[:len(work)-1]
		if v != t1.Result() && e.IsOutput(v) {
			return nil, false // a region value escapes as an output
		}
		for _, u := range e.Uses(v) {
			if seen[u] {
				continue
			}
			seen[u] = true
			switch {
			case u.Op == ir.OpTranspose && slices.Equal(u.AttrInts("perm"), inv):
				r.exits = append(r.exits, u)
			case layoutAgnostic(u, rank):
				r.nodes = append(r.nodes, u)
				for _, res := range u.Results {
					in[res] = true
					work = append(work, res)
				}
			default:
				return nil, false // a non-permutable op or a mismatched transpose reads the region
			}
		}
	}
	if len(r.exits) == 0 {
		return nil, false
	}
	for _, u := range r.nodes {
		for _, a := range u.Args {
			if !in[a] && !r.portable(a) {
				return nil, false
			}
		}
	}
	return r, true
}

// layoutAgnostic reports whether n computes the same elements, at permuted
// indices, when its region operands are permuted: an elementwise op or a slice or
// concat, all of whose results keep the region's rank.
func layoutAgnostic(n *ir.Node, rank int) bool {
	switch {
	case n.Op.Info().Elementwise, n.Op == ir.OpSlice, n.Op == ir.OpConcat:
	default:
		return false
	}
	for _, res := range n.Results {
		if res.Type.Rank() != rank {
			return false
		}
	}
	return true
}

// portable reports whether the operand a from outside the region can follow it
// into y's layout: a constant of at most the region's rank (permuted when
// rebuilt), a value whose (left-padded) shape has unit size on every axis
// the permutation moves, so it broadcasts the same in both layouts, or one
// that a reshape moves.
func (r *layoutRegion) portable(a *ir.Value) bool {
	if a.Type.Rank() > len(r.perm) {
		return false
	}
	return r.invariant(a.Type.Shape) || a.Def != nil && a.Def.Op == ir.OpConstant || r.reshapes(a.Type.Shape)
}

// reshapes reports whether shape, left-padded to the region's rank, keeps the
// order of its non-unit axes in y's layout, so that a reshape moves its data.
func (r *layoutRegion) reshapes(shape []int64) bool {
	s := padShape(shape, len(r.perm))
	last := int64(-1)
	for _, a := range r.inv { // y's axis j is the region's axis inv[j]
		if s[a] == 1 {
			continue
		}
		if a < last {
			return false
		}
		last = a
	}
	return true
}

// invariant reports whether shape, left-padded to the region's rank, is 1 on
// every axis the permutation moves.
func (r *layoutRegion) invariant(shape []int64) bool {
	s := padShape(shape, len(r.perm))
	for i, p := range r.perm {
		if p != int64(i) && s[i] != 1 {
			return false
		}
	}
	return true
}

// rewrite builds each region node again in y's layout, just before the old
// node (so every operand is defined before it), and points each exit's readers
// at the new value. The old region and both transposes are left dead.
func (r *layoutRegion) rewrite(e *Editor, b *ir.Builder) {
	moved := map[*ir.Value]*ir.Value{r.entry.Result(): r.entry.Args[0]}
	slices.SortFunc(r.nodes, e.Compare)
	for _, n := range r.nodes {
		b.SetInsertPoint(e.Pos(n))
		b.SetName(n.Name)
		args := make([]*ir.Value, len(n.Args))
		for i, a := range n.Args {
			if m, ok := moved[a]; ok {
				args[i] = m
			} else {
				args[i] = r.operand(b, a)
			}
		}
		res := b.Apply(n.Op, r.attrs(n), args...)
		if b.Err() != nil {
			return // the rewrite driver reports the builder's error
		}
		for i, old := range n.Results {
			r.check(old, res[i])
			moved[old] = res[i]
		}
	}
	for _, t2 := range r.exits {
		v := moved[t2.Args[0]]
		if !v.Type.Equal(t2.Result().Type) {
			panic(fmt.Sprintf("lcc: BUG: cancel-transposes: %s is %v in the new layout, want %v",
				t2.Where(), v.Type, t2.Result().Type))
		}
		e.Replace(t2.Result(), v)
	}
}

// operand brings an operand from outside the region into y's layout: unchanged
// when its layout is the same in both, a constant permuted, otherwise reshaped.
func (r *layoutRegion) operand(b *ir.Builder, a *ir.Value) *ir.Value {
	if r.invariant(a.Type.Shape) {
		return a
	}
	if a.Def != nil && a.Def.Op == ir.OpConstant {
		return b.Const(permuteTensor(a.Def.AttrTensor("value"), r.inv))
	}
	s := padShape(a.Type.Shape, len(r.perm))
	shape := make([]int64, len(s))
	for j, ax := range r.inv {
		shape[j] = s[ax]
	}
	return b.Reshape(a, shape...)
}

// attrs are n's attributes with the axes of a slice or concat renamed to y's.
func (r *layoutRegion) attrs(n *ir.Node) ir.Attrs {
	rank := len(r.perm)
	axis := func(a int64) int64 {
		ax, err := ir.AxisIndex(a, rank)
		if err != nil {
			panic("lcc: BUG: cancel-transposes: " + err.Error()) // the node verified
		}
		return r.perm[ax]
	}
	switch n.Op {
	case ir.OpConcat:
		return n.Attrs.With("axis", axis(n.AttrInt("axis")))
	case ir.OpSlice:
		// Keep the axes ascending, the order the importer writes.
		axes, starts, ends, steps := n.AttrInts("axes"), n.AttrInts("starts"), n.AttrInts("ends"),
			n.AttrInts("steps")
		idx := make([]int, len(axes))
		for i := range idx {
			idx[i] = i
		}
		slices.SortFunc(idx, func(i, j int) int { return int(axis(axes[i]) - axis(axes[j])) })
		var na, ns, ne, nst []int64
		for _, i := range idx {
			na, ns, ne, nst = append(na, axis(axes[i])), append(ns, starts[i]), append(ne, ends[i]),
				append(nst, steps[i])
		}
		return n.Attrs.With("axes", na).With("starts", ns).With("ends", ne).With("steps", nst)
	}
	return n.Attrs
}

// check panics unless the rebuilt value is the old one permuted into y's layout.
func (r *layoutRegion) check(old, v *ir.Value) {
	want := make([]int64, len(r.inv))
	for j, a := range r.inv {
		want[j] = old.Type.Shape[a]
	}
	if v.Type.DType != old.Type.DType || !slices.Equal(v.Type.Shape, want) {
		panic(fmt.Sprintf("lcc: BUG: cancel-transposes: %s rebuilt as %v, want %v", old.Def.Where(),
			v.Type, ir.T(old.Type.DType, want...)))
	}
}

// inversePerm returns q with q[p[i]] = i.
func inversePerm(p []int64) []int64 {
	q := make([]int64, len(p))
	for i, a := range p {
		q[a] = int64(i)
	}
	return q
}

func isIdentity(p []int64) bool {
	for i, a := range p {
		if a != int64(i) {
			return false
		}
	}
	return true
}

// padShape left-pads shape with unit dims to rank, as broadcasting aligns it.
func padShape(shape []int64, rank int) []int64 {
	s := make([]int64, rank-len(shape), rank)
	for i := range s {
		s[i] = 1
	}
	return append(s, shape...)
}

// permuteTensor returns t, left-padded with unit dims to len(perm), transposed by
// perm (result axis i is axis perm[i] of the padded t), with the CPU
// interpreter's transpose: the fold of the constant the rewrite permutes.
func permuteTensor(t *tensor.Tensor, perm []int64) *tensor.Tensor {
	padded := &tensor.Tensor{DType: t.DType, Shape: padShape(t.Shape, len(perm)), F: t.F, I: t.I}
	res, err := interp.EvalNode(&ir.Node{Op: ir.OpTranspose, Attrs: ir.A("perm", perm)},
		[]*tensor.Tensor{padded}, interp.Options{Precision: tensor.F64})
	if err != nil {
		panic("lcc: BUG: cancel-transposes: folding a transpose: " + err.Error()) // perm is a permutation of padded's axes
	}
	return res[0]
}
