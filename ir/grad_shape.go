package ir

import (
	"github.com/lcc-dev/lcc/tensor"
)

// VJP rules of the data-movement ops. Each is the op's transpose: a permutation
// maps back by its inverse, a selection (slice, gather) scatters back into zeros,
// a copy (expand, tile) sums its copies.

// reshape⁻¹: reshape the cotangent back.
func gradReshape(b *Builder, n *Node, dys []*Value) []*Value {
	return []*Value{b.reshapeTo(dys[0], n.Args[0].Type.Shape)}
}

// transpose by perm: transpose back by perm⁻¹.
func gradTranspose(b *Builder, n *Node, dys []*Value) []*Value {
	perm := n.AttrInts("perm")
	inv := make([]int64, len(perm))
	for i, p := range perm {
		inv[p] = int64(i)
	}
	return []*Value{b.Transpose(dys[0], inv...)}
}

// expand: sum the copies (SumTo).
func gradExpand(b *Builder, n *Node, dys []*Value) []*Value {
	return []*Value{b.SumTo(dys[0], n.Args[0].Type.Shape)}
}

// slice: put the cotangent back at the sliced positions, zeros elsewhere. A unit
// step pads with zeros (concat with full); other steps scatter_add along the axis
// at the selected indices. Axes are restored one at a time.
func gradSlice(b *Builder, n *Node, dys []*Value) []*Value {
	x := n.Args[0]
	axes, starts, ends, steps := n.AttrInts("axes"), n.AttrInts("starts"),
		n.AttrInts("ends"), n.AttrInts("steps")
	if n.Result().Type.Numel() == 0 {
		return []*Value{b.Full(x.Type, 0)}
	}
	d := dys[0]
	for i, a := range axes {
		ax, _ := AxisIndex(a, x.Type.Rank())
		size := x.Type.Shape[ax]
		s, e, st := starts[i], ends[i], steps[i]
		cnt := SliceLen(s, e, st)
		if st == 1 {
			// Pad: zeros [0, s), the slice, zeros [s+cnt, size).
			parts := []*Value{}
			if s > 0 {
				parts = append(parts, b.Full(withDim(d.Type, ax, s), 0))
			}
			parts = append(parts, d)
			if rest := size - s - cnt; rest > 0 {
				parts = append(parts, b.Full(withDim(d.Type, ax, rest), 0))
			}
			if len(parts) > 1 {
				d = b.Apply1(OpConcat, A("axis", int64(ax)), parts...)
			}
			continue
		}
		idx := make([]int64, cnt)
		for j := range idx {
			idx[j] = s + int64(j)*st
		}
		iv := b.Const(tensor.FromInts(tensor.I64, []int64{cnt}, idx))
		d = b.Apply1(OpScatterAdd, A("axis", int64(ax), "size", size), d, iv)
	}
	return []*Value{d}
}

// withDim is t with dim ax set to size.
func withDim(t Type, ax int, size int64) Type {
	s := append([]int64{}, t.Shape...)
	s[ax] = size
	return T(t.DType, s...)
}

// concat: split the cotangent at the argument boundaries.
func gradConcat(b *Builder, n *Node, dys []*Value) []*Value {
	if len(n.Args) == 1 {
		return []*Value{dys[0]}
	}
	ax, _ := AxisIndex(n.AttrInt("axis"), n.Args[0].Type.Rank())
	sizes := make([]int64, len(n.Args))
	for i, a := range n.Args {
		sizes[i] = a.Type.Shape[ax]
	}
	parts := b.Apply(OpSplit, A("axis", int64(ax), "sizes", sizes), dys[0])
	return append([]*Value(nil), parts[:len(n.Args)]...)
}

// split: concatenate the cotangents, zeros for results that have none.
func gradSplit(b *Builder, n *Node, dys []*Value) []*Value {
	parts := make([]*Value, len(n.Results))
	for i, r := range n.Results {
		parts[i] = dys[i]
		if parts[i] == nil {
			parts[i] = b.Full(r.Type, 0)
		}
	}
	if len(parts) == 1 {
		return parts
	}
	ax, _ := AxisIndex(n.AttrInt("axis"), n.Args[0].Type.Rank())
	return []*Value{b.Apply1(OpConcat, A("axis", int64(ax)), parts...)}
}

// nonNegative maps negative indices i to i+size (numpy and ONNX semantics), unless
// idx is a constant or range known to be non-negative. The result is i64.
func (b *Builder) nonNegative(idx *Value, size int64) *Value {
	if d := idx.Def; d != nil {
		switch d.Op {
		case OpConstant:
			if t := d.AttrTensor("value"); t != nil && minInt(t) >= 0 {
				return b.Cast(idx, tensor.I64)
			}
		case OpRange:
			if d.AttrFloat("start") >= 0 && d.AttrFloat("delta") >= 0 {
				return b.Cast(idx, tensor.I64)
			}
		}
	}
	i := b.Cast(idx, tensor.I64)
	zero := b.Scalar(tensor.I64, 0)
	return b.where(b.bin(OpLt, i, zero), b.Add(i, b.Scalar(tensor.I64, float64(size))), i)
}

func minInt(t *tensor.Tensor) int64 {
	m := int64(0)
	for i := 0; i < t.Numel(); i++ {
		m = min(m, t.Int(i))
	}
	return m
}

// gather along axis: scatter_add the cotangent back (repeated indices accumulate;
// both ops read a negative index i as i + size).
func gradGather(b *Builder, n *Node, dys []*Value) []*Value {
	x, idx := n.Args[0], n.Args[1]
	ax, _ := AxisIndex(n.AttrInt("axis"), x.Type.Rank())
	size := x.Type.Shape[ax]
	dx := b.Apply1(OpScatterAdd, A("axis", int64(ax), "size", size), dys[0], idx)
	return []*Value{dx, nil}
}

// positionTerm returns stride·(position along dim d) as an i64 value of rank
// len(shape) that is 1 everywhere but d, built from a range (no constant of the
// index tensor's size is materialised).
func (b *Builder) positionTerm(shape []int64, d int, stride int64) *Value {
	r := b.Apply1(OpRange, A("start", 0.0, "delta", float64(stride), "count", shape[d],
		"dtype", tensor.I64))
	s := make([]int64, len(shape))
	for i := range s {
		s[i] = 1
	}
	s[d] = shape[d]
	return b.reshapeTo(r, s)
}

// gather_elements along axis a: out[p] = x[p with p_a := idx[p]]. Its transpose
// scatters into the flattened x at the linear index
// lin[p] = idx[p]·stride_a + Σ_{d≠a} p_d·stride_d, with one scatter_add over axis 0.
func gradGatherElements(b *Builder, n *Node, dys []*Value) []*Value {
	x, idx := n.Args[0], n.Args[1]
	r := x.Type.Rank()
	ax, _ := AxisIndex(n.AttrInt("axis"), r)
	st := tensor.Strides[int64](x.Type.Shape)
	is := idx.Type.Shape
	lin := b.Mul(b.nonNegative(idx, x.Type.Shape[ax]), b.Scalar(tensor.I64, float64(st[ax])))
	for d := 0; d < r; d++ {
		if d != ax && is[d] > 1 {
			lin = b.Add(lin, b.positionTerm(is, d, st[d]))
		}
	}
	m := idx.Type.Numel()
	flat := b.Apply1(OpScatterAdd, A("axis", int64(0), "size", x.Type.Numel()),
		b.reshapeTo(dys[0], []int64{m}), b.reshapeTo(lin, []int64{m}))
	return []*Value{b.reshapeTo(flat, x.Type.Shape), nil}
}

// gather_nd with batch_dims B and index depth L: out[p, :] = x[p_<B, idx[p, 0..L), :].
// View x as [prod(x[:B+L]), R] rows; the row of output position p is
// lin[p] = Σ_{d<B} p_d·stride_d + Σ_{j<L} idx[p, j]·stride_{B+j}, and the transpose
// is one scatter_add of the [M, R] cotangent over axis 0.
func gradGatherND(b *Builder, n *Node, dys []*Value) []*Value {
	x, idx := n.Args[0], n.Args[1]
	bd := int(n.AttrInt("batch_dims"))
	q := idx.Type.Rank()
	depth := int(idx.Type.Shape[q-1])
	outer := x.Type.Shape[:bd+depth]
	st := tensor.Strides[int64](outer)
	pos := idx.Type.Shape[:q-1] // the index positions p
	rows := Type{Shape: outer}.Numel()
	rowLen := x.Type.Numel() / max(rows, 1)
	var lin *Value
	acc := func(v *Value) {
		if lin == nil {
			lin = v
		} else {
			lin = b.Add(lin, v)
		}
	}
	for d := 0; d < bd; d++ {
		acc(b.positionTerm(pos, d, st[d]))
	}
	for j := 0; j < depth; j++ {
		c := b.Apply1(OpSlice, A("axes", []int64{int64(q - 1)}, "starts", []int64{int64(j)},
			"ends", []int64{int64(j + 1)}, "steps", []int64{1}), idx)
		c = b.nonNegative(b.reshapeTo(c, pos), x.Type.Shape[bd+j])
		acc(b.Mul(c, b.Scalar(tensor.I64, float64(st[bd+j]))))
	}
	if lin == nil { // depth 0 and no batch dims: every position reads row 0
		lin = b.Full(T(tensor.I64, pos...), 0)
	}
	m := Type{Shape: pos}.Numel()
	lin = b.expandTo(lin, pos)
	flat := b.Apply1(OpScatterAdd, A("axis", int64(0), "size", rows),
		b.reshapeTo(dys[0], []int64{m, rowLen}), b.reshapeTo(lin, []int64{m}))
	return []*Value{b.reshapeTo(flat, x.Type.Shape), nil}
}

// tile by repeats r: view the cotangent as [r0, d0, r1, d1, …] and sum the copies.
func gradTile(b *Builder, n *Node, dys []*Value) []*Value {
	x := n.Args[0]
	reps := n.AttrInts("repeats")
	var split, axes []int64
	for i, d := range x.Type.Shape {
		split = append(split, reps[i], d)
		axes = append(axes, int64(2*i))
	}
	if len(axes) == 0 {
		return []*Value{dys[0]}
	}
	s := b.ReduceSum(b.reshapeTo(dys[0], split), false, axes...)
	return []*Value{b.reshapeTo(s, x.Type.Shape)}
}

// cumsum: y_i = Σ_{j≤i} x_j, so dx_j = Σ_{i≥j} dy_i, the cumsum in the other
// direction (exclusive stays exclusive).
func gradCumSum(b *Builder, n *Node, dys []*Value) []*Value {
	as := n.Attrs.With("reverse", !n.AttrBool("reverse"))
	return []*Value{b.Apply1(OpCumSum, as, dys[0])}
}

// trilu is a fixed 0/1 mask, so its transpose is itself.
func gradTrilu(b *Builder, n *Node, dys []*Value) []*Value {
	return []*Value{b.Apply1(OpTrilu, n.Attrs.Clone(), dys[0])}
}

// scatter_add is the transpose of gather: gather the cotangent back.
func gradScatterAdd(b *Builder, n *Node, dys []*Value) []*Value {
	ax := n.AttrInt("axis")
	return []*Value{b.Apply1(OpGather, A("axis", ax), dys[0], n.Args[1]), nil}
}
