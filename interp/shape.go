package interp

import (
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Every kernel here only moves elements (registerMove): its results hold
// values that were already rounded to their dtype, so the interpreter skips
// the rounding pass over them. Most are one strided gather (gatherInto), the
// view a GPU's index arithmetic takes too.
func init() {
	registerMove(ir.OpReshape, kernelReshape)
	registerMove(ir.OpTranspose, kernelTranspose)
	registerMove(ir.OpExpand, kernelExpand)
	registerMove(ir.OpSlice, kernelSlice)
	registerMove(ir.OpConcat, kernelConcat)
	registerMove(ir.OpSplit, kernelSplit)
	registerMove(ir.OpTile, kernelTile)
	registerMove(ir.OpTrilu, kernelTrilu)
	registerMove(ir.OpOffload, kernelIdentity)
	registerMove(ir.OpPrefetch, kernelIdentity)
}

// gatherInto copies x's elements at offsets walked over out's shape with strides
// st (x's own strides, rearranged) plus base.
func gatherInto(out, x *tensor.Tensor, st []int, base int) {
	if out.DType.IsFloat() {
		var s1 int // the stride along the rows, 0 for rank 0
		if r := len(st); r > 0 {
			s1 = st[r-1]
		}
		// A copy is one cheap operation an element; rows write disjoint parts of out.
		parallelRows(out.Shape, [][]int{st}, 1, func(i, m int, o []int) {
			src, dst := base+o[0], out.F[i:i+m]
			// Contiguous along the row (a slice or a transpose that keeps the last
			// axis): a memmove instead of the strided loop.
			if s1 == 1 {
				copy(dst, x.F[src:src+m])
				return
			}
			for j := range dst {
				dst[j] = x.F[src+j*s1] // s1 < 0 on a reversed slice
			}
		})
	} else {
		// Integer tensors (indices, masks) take the serial walk: only float data
		// is split.
		walk(out.Shape, [][]int{st}, func(i int, o []int) { out.I[i] = x.I[base+o[0]] })
	}
}

// kernelReshape shares x's storage: tensors are never mutated.
func kernelReshape(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x := args[0]
	t := n.Results[0].Type
	// Row-major order is unchanged by a reshape, so the storage is shared
	// (results are read-only); only the shape is new.
	return one(&tensor.Tensor{DType: x.DType, Shape: append([]int64{}, t.Shape...), F: x.F, I: x.I}), nil
}

// kernelTranspose reads x through permuted strides (gatherInto): output axis
// i walks input axis perm[i], so no index arithmetic is done per element.
func kernelTranspose(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, out := args[0], newResult(n, 0)
	xs := strides(x.Shape)
	perm := n.AttrInts("perm")
	st := make([]int, len(perm))
	for i, p := range perm {
		st[i] = xs[p]
	}
	gatherInto(out, x, st, 0)
	return one(out), nil
}

// kernelExpand broadcasts x to the result's shape with stride 0 on the
// broadcast axes.
func kernelExpand(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, out := args[0], newResult(n, 0)
	gatherInto(out, x, bcastStrides(x.Shape, out.Shape), 0)
	return one(out), nil
}

// kernelSlice takes range(start, end, step) on each listed axis; the attributes
// are normalised (0 ≤ start ≤ d, −1 ≤ end ≤ d, step ≠ 0), and an empty range gives
// an empty dim, so start is only read when the dim is non-empty.
func kernelSlice(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, out := args[0], newResult(n, 0)
	if out.Numel() == 0 {
		return one(out), nil
	}
	xs := strides(x.Shape)
	st := append([]int{}, xs...)
	base := 0
	axes, starts, steps := n.AttrInts("axes"), n.AttrInts("starts"), n.AttrInts("steps")
	for i, a := range axes {
		ax := normAxis(a, len(x.Shape))
		// A negative step walks backwards from start: its stride is negative, and
		// gatherInto's strided loop handles that.
		base += int(starts[i]) * xs[ax]
		st[ax] = int(steps[i]) * xs[ax]
	}
	gatherInto(out, x, st, base)
	return one(out), nil
}

// kernelConcat copies each argument's rows into place along axis: in the
// [outer, size, inner] view a row of inner elements is one contiguous copy.
func kernelConcat(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	out := newResult(n, 0)
	axis := normAxis(n.AttrInt("axis"), len(out.Shape))
	outer, m, inner := tensor.SplitAxis(out.Shape, axis)
	at := 0 // offset along axis
	for _, x := range args {
		w := int(x.Shape[axis]) * inner
		// Argument x's block o is its o-th run of w contiguous elements; it lands at
		// row at of output block o.
		for o := 0; o < outer; o++ {
			dst := (o*m + at) * inner
			if out.DType.IsFloat() {
				copy(out.F[dst:dst+w], x.F[o*w:(o+1)*w])
			} else {
				copy(out.I[dst:dst+w], x.I[o*w:(o+1)*w])
			}
		}
		at += int(x.Shape[axis])
	}
	return one(out), nil
}

// kernelSplit is concat's inverse: result k takes its sizes[k] rows of every
// outer block along axis.
func kernelSplit(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x := args[0]
	axis := normAxis(n.AttrInt("axis"), len(x.Shape))
	outer, m, inner := tensor.SplitAxis(x.Shape, axis)
	var res []*tensor.Tensor
	at := 0
	for i := range n.Results {
		out := newResult(n, i)
		w := int(out.Shape[axis]) * inner
		for o := 0; o < outer; o++ {
			src := (o*m + at) * inner
			if x.DType.IsFloat() {
				copy(out.F[o*w:(o+1)*w], x.F[src:src+w])
			} else {
				copy(out.I[o*w:(o+1)*w], x.I[src:src+w])
			}
		}
		at += int(out.Shape[axis])
		res = append(res, out)
	}
	return res, nil
}

// kernelTile repeats x along each axis by its repeat count, reading the input
// index of each output element modulo the input's dims.
func kernelTile(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, out := args[0], newResult(n, 0)
	xs := strides(x.Shape)
	r := len(x.Shape)
	idx := make([]int, r)
	// One output element at a time, its coordinates wrapped into x: tile is not
	// among the kernels the interpreter tunes (package doc), so it stays plain.
	for i := 0; i < out.Numel(); i++ {
		// Decompose i over out's shape, then wrap each coordinate into x.
		rem, src := i, 0
		for d := r - 1; d >= 0; d-- {
			od := int(out.Shape[d])
			idx[d] = rem % od
			rem /= od
			src += (idx[d] % int(x.Shape[d])) * xs[d]
		}
		if out.DType.IsFloat() {
			out.F[i] = x.F[src]
		} else {
			out.I[i] = x.I[src]
		}
	}
	return one(out), nil
}

// kernelTrilu keeps, on the last two dims [M, N], the elements with j − i ≤ k
// (lower, the default) or j − i ≥ k (upper), zeroing the rest (ONNX Trilu).
func kernelTrilu(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, out := args[0], newResult(n, 0)
	r := len(x.Shape)
	rows, cols := int(x.Shape[r-2]), int(x.Shape[r-1])
	upper, k := n.AttrBool("upper"), int(n.AttrInt("k"))
	for i := 0; i < out.Numel(); i++ {
		c := i % cols
		row := (i / cols) % rows
		// The diagonal offset k counts columns to the right of the main diagonal, as
		// in ONNX and torch.tril/triu.
		keep := c-row <= k
		if upper {
			keep = c-row >= k
		}
		if !keep {
			continue
		}
		if x.DType.IsFloat() {
			out.F[i] = x.F[i]
		} else {
			out.I[i] = x.I[i]
		}
	}
	return one(out), nil
}

// kernelIdentity is offload and prefetch: copies between device and host memory
// on the GPU, the identity on values (the result shares x's storage).
func kernelIdentity(_ *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	// The result is the argument itself: no copy, since values are never mutated.
	return one(args[0]), nil
}
