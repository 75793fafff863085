package interp

import (
	"math"
	"unsafe"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// roundScalar rounds v to the precision of dt (unchanged for f64 and non-floats).
func roundScalar(v float64, dt tensor.DType) float64 {
	switch dt {
	case tensor.F32:
		return float64(float32(v))
	// bf16 and f16 round through float32 (to nearest even at each step). The
	// double rounding can differ from a direct one in rare halfway cases, but
	// PyTorch and the GPU round their float32 results so, and the oracle must
	// agree with them, not with exact arithmetic.
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
			// v == v leaves NaNs alone: their payload bits stay those of the kernel,
			// and a NaN compares unequal to its rounding, which would write every time.
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

// roundFresh rounds xs to dt in place like roundFloats, for storage that the
// kernel has just allocated and no one else reads: it may store every element,
// which keeps the loop free of data-dependent branches (for rounded f32 values
// "changed or not" is a coin toss that the CPU mispredicts), and it splits long
// slices over goroutines. NaNs keep their bits, as in roundFloats.
func roundFresh(xs []float64, dt tensor.DType) {
	if dt != tensor.F32 {
		parallelRange(len(xs), 4, func(lo, hi int) { roundFloats(xs[lo:hi], dt) })
		return
	}
	parallelRange(len(xs), 1, func(lo, hi int) { roundF32(xs[lo:hi]) })
}

// roundF32 rounds xs to f32 in place, storing every element but NaNs. It works in
// groups of four independent conversions: a lone float64→float32→float64 round trip
// per iteration runs at the latency of the two conversions (each one merges into
// its destination register, a dependency from one iteration to the next), while
// four in flight run at their throughput, about three times as fast.
func roundF32(xs []float64) {
	i := 0
	for ; i+4 <= len(xs); i += 4 {
		p := xs[i : i+4 : i+4]
		v0, v1, v2, v3 := p[0], p[1], p[2], p[3]
		if v0 != v0 || v1 != v1 || v2 != v2 || v3 != v3 {
			roundFloats(p, tensor.F32)
			continue
		}
		p[0], p[1] = float64(float32(v0)), float64(float32(v1))
		p[2], p[3] = float64(float32(v2)), float64(float32(v3))
	}
	roundFloats(xs[i:], tensor.F32)
}

// sharesStorage reports whether t's float storage overlaps that of any of args.
func sharesStorage(t *tensor.Tensor, args []*tensor.Tensor) bool {
	if cap(t.F) == 0 {
		return false
	}
	// Overlap of the backing arrays, by address: a reshape or a slice view
	// shares storage with its argument without being the same slice.
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(t.F)))
	hi := lo + uintptr(cap(t.F))*8
	for _, a := range args {
		if a == nil || cap(a.F) == 0 {
			continue
		}
		alo := uintptr(unsafe.Pointer(unsafe.SliceData(a.F)))
		if ahi := alo + uintptr(cap(a.F))*8; alo < hi && lo < ahi {
			return true
		}
	}
	return false
}

// intRange is the least and greatest value of an integer or bool dtype.
func intRange(dt tensor.DType) (lo, hi int64) {
	switch dt {
	case tensor.I32:
		return math.MinInt32, math.MaxInt32
	case tensor.I8:
		return math.MinInt8, math.MaxInt8
	case tensor.U8:
		return 0, math.MaxUint8
	case tensor.Bool:
		return 0, 1
	}
	// i64, and any other dtype: the range int64 holds.
	return math.MinInt64, math.MaxInt64
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
func prod(s []int64) int { return tensor.Elements[int](s) }

// strides returns row-major strides of shape.
func strides(shape []int64) []int { return tensor.Strides[int](shape) }

// bcastStrides returns the strides of in viewed as shape out under numpy
// broadcasting: 0 on dims that in lacks or has as 1.
func bcastStrides(in, out []int64) []int { return tensor.BroadcastStrides[int](in, out) }

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
	walkRowsRange(shape, sts, 0, numRows(shape), fn)
}

// parallelRows is walkRows with the rows split over goroutines (parallelRange);
// fn must only write the output elements of its own row. cost is the work per
// element in cheap operations.
func parallelRows(shape []int64, sts [][]int, cost int, fn func(i, n int, offs []int)) {
	rows := numRows(shape)
	if rows == 0 {
		return
	}
	inner := prod(shape) / rows
	parallelRange(rows, cost*inner, func(r0, r1 int) { walkRowsRange(shape, sts, r0, r1, fn) })
}

// numRows is the number of rows of the innermost dim of shape (0 when empty).
func numRows(shape []int64) int {
	total := prod(shape)
	if total == 0 {
		return 0
	}
	if len(shape) == 0 {
		return 1
	}
	return total / int(shape[len(shape)-1])
}

// walkRowsRange is walkRows over rows [r0, r1) only.
func walkRowsRange(shape []int64, sts [][]int, r0, r1 int, fn func(i, n int, offs []int)) {
	if r0 >= r1 {
		return
	}
	offs := make([]int, len(sts))
	r := len(shape)
	if r == 0 {
		fn(0, 1, offs)
		return
	}
	// idx is the odometer over the outer dims (rank−1 of them); the innermost
	// dim is the row fn gets whole.
	idx := make([]int, r)
	inner := int(shape[r-1])
	// Start the odometer at row r0.
	for d, rem := r-2, r0; d >= 0; d-- {
		idx[d] = rem % int(shape[d])
		rem /= int(shape[d])
		for k := range offs {
			offs[k] += idx[d] * sts[k][d]
		}
	}
	// fn may move offs along the row; base restores them before the odometer
	// steps, so fn need not undo its changes.
	base := make([]int, len(offs))
	for i := r0 * inner; i < r1*inner; i += inner {
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

// negInf is −Inf, the identity of max and of the online softmax's merge.
var negInf = math.Inf(-1)
