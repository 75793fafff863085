package tensor

// This file holds the shape arithmetic every layer shares: the interpreter's
// loops (interp), the CUDA index expressions (codegen/cuda) and the IR's
// shape rules (ir). Shapes are row-major; a rank-0 shape has one element. Shapes
// compare with slices.Equal.

// Index is the integer type of element counts and offsets: int where Go slices
// are indexed (interp), int64 where sizes outgrow an int32 (codegen, IR).
type Index interface{ ~int | ~int64 }

// Elements is the number of elements of shape (1 for rank 0), for shapes already
// checked; Numel checks untrusted ones.
func Elements[I Index](shape []int64) I {
	n := I(1)
	for _, d := range shape {
		n *= I(d)
	}
	return n
}

// Strides returns the row-major strides of shape, in elements.
func Strides[I Index](shape []int64) []I {
	st := make([]I, len(shape))
	acc := I(1)
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= I(shape[i])
	}
	return st
}

// BroadcastStrides returns the strides of a tensor of shape in viewed as shape out
// under numpy broadcasting: 0 on the dims in lacks (leading) or has as 1.
func BroadcastStrides[I Index](in, out []int64) []I {
	st := make([]I, len(out))
	is := Strides[I](in)
	off := len(out) - len(in)
	for i := range in {
		if in[i] != 1 {
			st[off+i] = is[i]
		}
	}
	return st
}
