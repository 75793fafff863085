package cpu

import (
	"math"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// roundScalar rounds v to the precision of dt (unchanged for f64 and non-floats).
func roundScalar(v float64, dt tensor.DType) float64 {
	switch dt {
	case tensor.F32:
		return float64(float32(v))
	case tensor.BF16:
		return float64(tensor.BF16ToFloat32(tensor.Float32ToBF16(float32(v))))
	case tensor.F16:
		return float64(tensor.F16ToFloat32(tensor.Float32ToF16(float32(v))))
	}
	return v
}

// roundFloats rounds xs to dt in place, writing only elements that change, so that
// rounding already-rounded shared storage never writes to it.
func roundFloats(xs []float64, dt tensor.DType) {
	switch dt {
	case tensor.F32:
		for i, v := range xs {
			if r := float64(float32(v)); r != v && v == v {
				xs[i] = r
			}
		}
	case tensor.BF16, tensor.F16:
		for i, v := range xs {
			if r := roundScalar(v, dt); r != v && v == v {
				xs[i] = r
			}
		}
	}
}

// wrapInt wraps v to the width of integer dtype dt; bools become 0 or 1.
func wrapInt(v int64, dt tensor.DType) int64 {
	switch dt {
	case tensor.I32:
		return int64(int32(v))
	case tensor.I8:
		return int64(int8(v))
	case tensor.U8:
		return int64(uint8(v))
	case tensor.Bool:
		if v != 0 {
			return 1
		}
		return 0
	}
	return v
}

// newResult allocates the zero tensor of n's result i.
func newResult(n *ir.Node, i int) *tensor.Tensor {
	t := n.Results[i].Type
	return tensor.New(t.DType, t.Shape...)
}

// one wraps a single result.
func one(t *tensor.Tensor) []*tensor.Tensor { return []*tensor.Tensor{t} }

// ishape converts a shape to ints.
func ishape(s []int64) []int {
	out := make([]int, len(s))
	for i, d := range s {
		out[i] = int(d)
	}
	return out
}

// prod is the product of dims (1 for none).
func prod(s []int64) int {
	p := 1
	for _, d := range s {
		p *= int(d)
	}
	return p
}

// strides returns row-major strides of shape.
func strides(shape []int64) []int {
	st := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= int(shape[i])
	}
	return st
}

// bcastStrides returns the strides of in viewed as shape out under numpy
// broadcasting: 0 on dims that in lacks or has as 1.
func bcastStrides(in, out []int64) []int {
	st := make([]int, len(out))
	is := strides(in)
	off := len(out) - len(in)
	for i := range in {
		if in[i] != 1 {
			st[off+i] = is[i]
		}
	}
	return st
}

// sameShape reports whether two shapes are equal.
func sameShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// walk calls fn(i, offs) for every element i of shape in row-major order, where
// offs[k] is the element's offset under strides sts[k].
func walk(shape []int64, sts [][]int, fn func(i int, offs []int)) {
	r := len(shape)
	walkRows(shape, sts, func(i, n int, offs []int) {
		for j := 0; j < n; j++ {
			fn(i+j, offs)
			if r > 0 {
				for k := range offs {
					offs[k] += sts[k][r-1]
				}
			}
		}
	})
}

// walkRows calls fn(i, n, offs) once per row of the innermost dim of shape: the
// row's first element is i, it has n elements, and offs[k] is the first element's
// offset under strides sts[k] (the row continues with stride sts[k][rank−1]). fn
// may change offs; walkRows restores it. Kernels put their tight loop in fn.
func walkRows(shape []int64, sts [][]int, fn func(i, n int, offs []int)) {
	total := prod(shape)
	if total == 0 {
		return
	}
	offs := make([]int, len(sts))
	r := len(shape)
	if r == 0 {
		fn(0, 1, offs)
		return
	}
	idx := make([]int, r)
	inner := int(shape[r-1])
	base := make([]int, len(offs))
	for i := 0; i < total; i += inner {
		copy(base, offs)
		fn(i, inner, offs)
		copy(offs, base)
		// Advance the odometer over the outer dims.
		for d := r - 2; d >= 0; d-- {
			idx[d]++
			for k := range offs {
				offs[k] += sts[k][d]
			}
			if idx[d] < int(shape[d]) {
				break
			}
			for k := range offs {
				offs[k] -= sts[k][d] * int(shape[d])
			}
			idx[d] = 0
		}
	}
}

// normAxis normalises a possibly negative axis (the verifier has range-checked it).
func normAxis(axis int64, rank int) int {
	a, err := ir.AxisIndex(axis, rank)
	if err != nil {
		panic("lcc: BUG: " + err.Error())
	}
	return a
}

// splitAt views shape as [outer, shape[axis], inner].
func splitAt(shape []int64, axis int) (outer, mid, inner int) {
	return prod(shape[:axis]), int(shape[axis]), prod(shape[axis+1:])
}

var negInf = math.Inf(-1)
