package interp

import (
	"fmt"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Gathers only move elements (registerMove); scatter_add sums, so its
// result is rounded like any arithmetic. Every index is checked as it is
// read: an index out of range is bad data at run time, an error naming the
// node and the index, never a panic or a wrong read.
func init() {
	registerMove(ir.OpGather, kernelGather)
	registerMove(ir.OpGatherElements, kernelGatherElements)
	registerMove(ir.OpGatherND, kernelGatherND)
	Register(ir.OpScatterAdd, kernelScatterAdd)
}

// wrapIndex resolves index i into a dim of size d: negative indices count from
// the end (ONNX); anything outside [−d, d) is an error.
func wrapIndex(i int64, d int, what string) (int, error) {
	if i < -int64(d) || i >= int64(d) {
		return 0, fmt.Errorf("%s index %d out of range for a dim of size %d", what, i, d)
	}
	if i < 0 {
		i += int64(d)
	}
	return int(i), nil
}

// copyBlock copies w elements from src offset s to dst offset d.
func copyBlock(dst, src *tensor.Tensor, d, s, w int) {
	if dst.DType.IsFloat() {
		copy(dst.F[d:d+w], src.F[s:s+w])
	} else {
		copy(dst.I[d:d+w], src.I[s:s+w])
	}
}

// kernelGather picks slices of data along axis: out = data[:axis] ++ idx ++
// data[axis+1:] in shape (ONNX Gather).
func kernelGather(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, idx, out := args[0], args[1], newResult(n, 0)
	axis := normAxis(n.AttrInt("axis"), len(x.Shape))
	outer, m, inner := tensor.SplitAxis(x.Shape, axis)
	ni := len(idx.I)
	// One check per index, then one contiguous copy of inner elements per outer
	// block: an embedding lookup (axis 0, inner = hidden) is a row copy per token.
	for p, raw := range idx.I {
		j, err := wrapIndex(raw, m, "gather")
		// walk cannot stop early: after the first bad index the rest is skipped.
		if err != nil {
			return nil, err
		}
		for o := 0; o < outer; o++ {
			copyBlock(out, x, (o*ni+p)*inner, (o*m+j)*inner, inner)
		}
	}
	return one(out), nil
}

// kernelGatherElements is out[i] = data[i with its axis coordinate replaced by
// idx[i]] (ONNX GatherElements); idx may be smaller than data on every dim.
func kernelGatherElements(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, idx, out := args[0], args[1], newResult(n, 0)
	axis := normAxis(n.AttrInt("axis"), len(x.Shape))
	xs := strides(x.Shape)
	st := append([]int{}, xs...)
	st[axis] = 0 // the axis coordinate comes from idx
	var err error
	// Walks idx's shape, which may be smaller than data's: o[0] is the element's
	// offset in data on every axis but axis.
	walk(idx.Shape, [][]int{st}, func(i int, o []int) {
		if err != nil {
			return
		}
		j, e := wrapIndex(idx.I[i], int(x.Shape[axis]), "gather_elements")
		if e != nil {
			err = e
			return
		}
		copyBlock(out, x, i, o[0]+j*xs[axis], 1)
	})
	if err != nil {
		return nil, err
	}
	return one(out), nil
}

// kernelGatherND is ONNX GatherND: the last dim of idx (depth q) indexes the
// first q dims of data after batch_dims leading dims shared by data and idx.
func kernelGatherND(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, idx, out := args[0], args[1], newResult(n, 0)
	b := int(n.AttrInt("batch_dims"))
	q := int(idx.Shape[len(idx.Shape)-1])
	xs := strides(x.Shape)
	inner := prod(x.Shape[b+q:])
	// Tuples per batch element, and the size of data per batch element.
	rows := prod(idx.Shape[:len(idx.Shape)-1])
	perBatch := rows / max(prod(idx.Shape[:b]), 1)
	batchSize := prod(x.Shape[b:])
	// src starts at the batch element's block of x; each of the q index
	// components then adds its dim's offset.
	for r := 0; r < rows; r++ {
		var src int
		if perBatch > 0 {
			src = (r / perBatch) * batchSize
		}
		for d := 0; d < q; d++ {
			j, err := wrapIndex(idx.I[r*q+d], int(x.Shape[b+d]), "gather_nd")
			if err != nil {
				return nil, err
			}
			src += j * xs[b+d]
		}
		copyBlock(out, x, r*inner, src, inner)
	}
	return one(out), nil
}

// kernelScatterAdd is the transpose of gather: out has size `size` at axis, and
// the updates x[o, p, i] (p ranging over idx's shape) add into out[o, idx[p], i].
// Updates accumulate in row-major order of idx, so repeated indices sum
// deterministically.
func kernelScatterAdd(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, idx, out := args[0], args[1], newResult(n, 0)
	axis := int(n.AttrInt("axis"))
	size := int(n.AttrInt("size"))
	outer := prod(x.Shape[:axis])
	ni := len(idx.I)
	inner := prod(x.Shape[axis+len(idx.Shape):])
	// Serial in idx order: a token that repeats (an embedding's backward) adds
	// its updates in the same order every run.
	for p, raw := range idx.I {
		j, err := wrapIndex(raw, size, "scatter_add")
		if err != nil {
			return nil, err
		}
		for o := 0; o < outer; o++ {
			d, s := (o*size+j)*inner, (o*ni+p)*inner
			if out.DType.IsFloat() {
				for e := 0; e < inner; e++ {
					out.F[d+e] += x.F[s+e]
				}
			} else {
				for e := 0; e < inner; e++ {
					out.I[d+e] = tensor.WrapInt(out.I[d+e]+x.I[s+e], out.DType)
				}
			}
		}
	}
	return one(out), nil
}
