package interp

import (
	"math"
	"slices"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// The reductions, softmaxes and forward norms: every kernel here folds a run of
// elements into one value, so each is written to keep that fold's order fixed
// (package doc: results are bit-for-bit repeatable).
func init() {
	for _, op := range []ir.Op{ir.OpReduceSum, ir.OpReduceMean, ir.OpReduceMax, ir.OpReduceMin} {
		Register(op, kernelReduce)
	}
	Register(ir.OpSoftmax, kernelSoftmax)
	Register(ir.OpLogSoftmax, kernelSoftmax)
	Register(ir.OpLayerNorm, kernelLayerNorm)
	Register(ir.OpRMSNorm, kernelRMSNorm)
	Register(ir.OpCumSum, kernelCumSum)
}

// kernelReduce reduces over the axes attribute (all axes when absent). Sums
// accumulate in float64 in row-major order of the input; max and min propagate
// NaN and give −Inf and +Inf over an empty range (on integers and bools the
// dtype's least and greatest values). On integers, mean truncates and sum wraps; on
// bools, sum and max are "any", min is "all".
func kernelReduce(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, out := args[0], newResult(n, 0)
	axes, err := ir.ReduceAxes(n.Attrs, len(x.Shape))
	if err != nil {
		return nil, err
	}
	// Output strides as seen from the input: 0 on reduced axes.
	ost := make([]int, len(x.Shape))
	reduced := make([]bool, len(x.Shape))
	for _, a := range axes {
		reduced[a] = true
	}
	s, count := 1, 1
	// Row-major strides of the kept axes, innermost first; count is the number of
	// elements folded into each output.
	for i := len(x.Shape) - 1; i >= 0; i-- {
		if reduced[i] {
			count *= int(x.Shape[i])
			continue
		}
		ost[i] = s
		s *= int(x.Shape[i])
	}
	// walk takes one stride set per operand; a reduction has only the output's.
	sts := [][]int{ost}
	if x.DType.IsFloat() {
		acc := out.F
		switch n.Op {
		// The identities of max and min, so that an empty range gives −Inf (max) and
		// +Inf (min), as ONNX's ReduceMax and ReduceMin specify (PyTorch's amax
		// refuses an empty range).
		case ir.OpReduceMax:
			fill(acc, negInf)
		case ir.OpReduceMin:
			fill(acc, math.Inf(1))
		}
		reduceFloat(n.Op, x, acc, reduced, sts)
		if n.Op == ir.OpReduceMean {
			for i := range acc {
				acc[i] /= float64(count)
			}
		}
		return one(out), nil
	}
	// Integers accumulate in int64 and wrap once at the end: two's complement
	// wraps the same whether it happens per step or after the sum.
	acc, dt := out.I, out.DType
	lo, hi := intRange(dt)
	switch n.Op {
	case ir.OpReduceMax:
		for i := range acc {
			acc[i] = lo
		}
		walk(x.Shape, sts, func(i int, o []int) { acc[o[0]] = max(acc[o[0]], x.I[i]) })
	case ir.OpReduceMin:
		for i := range acc {
			acc[i] = hi
		}
		walk(x.Shape, sts, func(i int, o []int) { acc[o[0]] = min(acc[o[0]], x.I[i]) })
	default:
		walk(x.Shape, sts, func(i int, o []int) { acc[o[0]] += x.I[i] })
		// A mean over nothing stays 0 rather than dividing by zero, which would be
		// a run-time panic on integers.
		if n.Op == ir.OpReduceMean && count > 0 {
			for i := range acc {
				acc[i] /= int64(count)
			}
		}
	}
	for i := range acc {
		acc[i] = tensor.WrapInt(acc[i], dt)
	}
	return one(out), nil
}

// reduceFloat folds every element of x into acc[o] in row-major order of x, where
// o is the element's offset under the output strides sts[0] (0 on reduced axes).
// Each output's fold runs in that order however the work is split: when the
// reduced axes are the trailing ones each output folds one contiguous block, when
// they are the leading ones each output is a column of a [count, outputs] matrix,
// and the goroutines split the outputs; other axis sets run serially.
func reduceFloat(op ir.Op, x *tensor.Tensor, acc []float64, reduced []bool, sts [][]int) {
	r := len(x.Shape)
	// Scalars and empty tensors: nothing to split, and the layouts below assume a
	// non-zero count per output.
	if r == 0 || len(acc) == 0 || len(x.F) == 0 {
		walk(x.Shape, sts, func(i int, o []int) { acc[o[0]] = fold(op, acc[o[0]], x.F[i]) })
		return
	}
	suffix, prefix := true, true // reduced axes are all after / all before the kept ones
	for i := range r {
		if reduced[i] && i+1 < r && !reduced[i+1] {
			suffix = false
		}
		if !reduced[i] && i+1 < r && reduced[i+1] {
			prefix = false
		}
	}
	xf, outs := x.F, len(acc)
	count := len(xf) / outs
	switch {
	// Each output folds its own contiguous block, so the goroutines split outputs
	// with no sharing. The cost per output is its count of elements.
	case suffix:
		parallelRange(outs, count, func(lo, hi int) {
			for o := lo; o < hi; o++ {
				acc[o] = foldRow(op, acc[o], xf[o*count:(o+1)*count])
			}
		})
	// Each goroutine owns a column range [lo, hi) of the outputs and walks every
	// row of the [count, outputs] matrix over it: the rows are still folded in
	// order, so each output's sum is the serial one.
	case prefix:
		parallelRange(outs, count, func(lo, hi int) {
			dst := acc[lo:hi]
			for i := range count {
				foldCols(op, dst, xf[i*outs+lo:i*outs+hi])
			}
		})
	case sts[0][r-1] == 0: // the innermost axis is reduced
		walkRows(x.Shape, sts, func(i, m int, o []int) {
			acc[o[0]] = foldRow(op, acc[o[0]], xf[i:i+m])
		})
	default: // the innermost axis is kept, with output stride 1
		walkRows(x.Shape, sts, func(i, m int, o []int) {
			foldCols(op, acc[o[0]:o[0]+m], xf[i:i+m])
		})
	}
}

// fold is one step of a float reduction: sum (and mean), max or min.
func fold(op ir.Op, a, v float64) float64 {
	switch op {
	case ir.OpReduceMax:
		return fmax(a, v)
	case ir.OpReduceMin:
		return fmin(a, v)
	}
	return a + v
}

// foldRow folds xs into a in order.
func foldRow(op ir.Op, a float64, xs []float64) float64 {
	switch op {
	case ir.OpReduceMax, ir.OpReduceMin:
		for _, v := range xs {
			a = fold(op, a, v)
		}
	default:
		for _, v := range xs {
			a += v
		}
	}
	return a
}

// foldCols folds xs[j] into acc[j] for each j.
func foldCols(op ir.Op, acc, xs []float64) {
	xs = xs[:len(acc)]
	switch op {
	case ir.OpReduceMax, ir.OpReduceMin:
		for j, v := range xs {
			acc[j] = fold(op, acc[j], v)
		}
	default:
		for j, v := range xs {
			acc[j] += v
		}
	}
}

// fill sets every element of xs to v (a reduction's identity).
func fill(xs []float64, v float64) {
	for i := range xs {
		xs[i] = v
	}
}

// kernelSoftmax is softmax or log_softmax over one axis, max-subtracted so that
// no exponent overflows. A row of −Inf gives NaN, as in PyTorch.
func kernelSoftmax(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, out := args[0], newResult(n, 0)
	axis := normAxis(n.AttrInt("axis"), len(x.Shape))
	outer, m, inner := tensor.SplitAxis(x.Shape, axis)
	logOut := n.Op == ir.OpLogSoftmax
	xf, of := x.F, out.F
	// A softmax line costs about 16 cheap operations per element: exp dominates.
	// Lines are independent, so they split freely.
	parallelRange(outer*inner, 16*m, func(lo, hi int) {
		for line := lo; line < hi; line++ {
			o, in := line/inner, line%inner
			base := o*m*inner + in
			// The softmax axis is innermost (the common case, attention's scores): the
			// contiguous row takes the faster path.
			if inner == 1 {
				softmaxRow(xf[base:base+m], of[base:base+m], logOut)
				continue
			}
			mx := negInf
			for j := 0; j < m; j++ {
				mx = fmax(mx, xf[base+j*inner])
			}
			var sum float64
			for j := 0; j < m; j++ {
				sum += math.Exp(xf[base+j*inner] - mx)
			}
			lse := math.Log(sum)
			for j := 0; j < m; j++ {
				k := base + j*inner
				if logOut {
					of[k] = xf[k] - mx - lse
				} else {
					of[k] = math.Exp(xf[k]-mx) / sum
				}
			}
		}
	})
	return one(out), nil
}

// softmaxRow is one contiguous row of kernelSoftmax, computing each exponential
// once: y keeps exp(x−max) until the sum is known, which gives the same values.
func softmaxRow(x, y []float64, logOut bool) {
	y = y[:len(x)]
	mx := negInf
	for _, v := range x {
		mx = fmax(mx, v)
	}
	var sum float64
	if logOut {
		for _, v := range x {
			sum += math.Exp(v - mx)
		}
		// log_softmax is x − max − lse rather than log(softmax): a tiny probability
		// would underflow to 0 and its log to −Inf.
		lse := math.Log(sum)
		for j, v := range x {
			y[j] = v - mx - lse
		}
		return
	}
	for j, v := range x {
		e := math.Exp(v - mx)
		y[j] = e
		// The sum of the exponentials in row order, as the strided loop above sums.
		sum += e
	}
	for j := range y {
		y[j] /= sum
	}
}

// normParams returns the scale and bias args (nil when absent) broadcast to the
// normalised dims shape[axis:], flattened.
func normParam(args []*tensor.Tensor, i int, dims []int64) []float64 {
	if i >= len(args) {
		return nil
	}
	p := args[i]
	// Already the full normalised shape: no copy.
	if slices.Equal(p.Shape, dims) {
		return p.F
	}
	out := make([]float64, prod(dims))
	walk(dims, [][]int{bcastStrides(p.Shape, dims)}, func(k int, o []int) { out[k] = p.F[o[0]] })
	return out
}

// kernelLayerNorm normalises over dims axis..rank−1 with the population variance:
// y = (x − mean)/sqrt(var + eps)·scale + bias.
func kernelLayerNorm(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, out := args[0], newResult(n, 0)
	axis := normAxis(n.AttrInt("axis"), len(x.Shape))
	eps := n.AttrFloat("eps")
	dims := x.Shape[axis:]
	scale, bias := normParam(args, 1, dims), normParam(args, 2, dims)
	m := prod(dims)
	if m == 0 {
		return one(out), nil
	}
	// Rows are independent; a row's mean, variance and output are about 8
	// operations an element.
	parallelRange(len(x.F)/m, 8*m, func(lo, hi int) {
		layerNormRows(x.F[lo*m:hi*m], out.F[lo*m:hi*m], scale, bias, m, eps)
	})
	return one(out), nil
}

// layerNormRows normalises the rows of length m of x into y.
func layerNormRows(x, y, scale, bias []float64, m int, eps float64) {
	for r := 0; r < len(x)/m; r++ {
		row, y := x[r*m:(r+1)*m], y[r*m:(r+1)*m]
		var mean, v float64
		for _, e := range row {
			mean += e
		}
		mean /= float64(m)
		// The variance is a second pass over the row, not E[x²] − E[x]², which
		// cancels badly when the mean is large next to the spread.
		for _, e := range row {
			v += (e - mean) * (e - mean)
		}
		// Population variance (÷m, not m−1), as torch.nn.LayerNorm uses.
		inv := 1 / math.Sqrt(v/float64(m)+eps)
		for j, e := range row {
			y[j] = (e - mean) * inv
			if scale != nil {
				y[j] *= scale[j]
			}
			if bias != nil {
				y[j] += bias[j]
			}
		}
	}
}

// kernelRMSNorm is y = x / sqrt(mean(x²) + eps)·scale over dims axis..rank−1.
func kernelRMSNorm(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, out := args[0], newResult(n, 0)
	axis := normAxis(n.AttrInt("axis"), len(x.Shape))
	eps := n.AttrFloat("eps")
	dims := x.Shape[axis:]
	scale := normParam(args, 1, dims)
	m := prod(dims)
	if m == 0 {
		return one(out), nil
	}
	// Rows are independent; a square, a sum and a scale are about 4 operations an
	// element.
	parallelRange(len(x.F)/m, 4*m, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row, y := x.F[r*m:(r+1)*m], out.F[r*m:(r+1)*m]
			// RMSNorm (Zhang and Sennrich, 2019) has no mean to subtract and no bias:
			// one pass for the mean square.
			var ss float64
			for _, e := range row {
				ss += e * e
			}
			inv := 1 / math.Sqrt(ss/float64(m)+eps)
			for j, e := range row {
				y[j] = e * inv
				if scale != nil {
					y[j] *= scale[j]
				}
			}
		}
	})
	return one(out), nil
}

// kernelCumSum is the running sum along axis; exclusive leaves out the element
// itself, reverse runs from the end (ONNX CumSum).
func kernelCumSum(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, out := args[0], newResult(n, 0)
	axis := normAxis(n.AttrInt("axis"), len(x.Shape))
	excl, rev := n.AttrBool("exclusive"), n.AttrBool("reverse")
	outer, m, inner := tensor.SplitAxis(x.Shape, axis)
	isF := x.DType.IsFloat()
	// Serial, line by line: the running sum along the axis is a chain, in index
	// order (from the end with reverse).
	for o := 0; o < outer; o++ {
		for in := 0; in < inner; in++ {
			var fs float64
			var is int64
			for jj := 0; jj < m; jj++ {
				j := jj
				if rev {
					j = m - 1 - jj
				}
				k := (o*m+j)*inner + in
				if isF {
					// Exclusive: write the sum so far before adding the element.
					if excl {
						out.F[k] = fs
						fs += x.F[k]
					} else {
						fs += x.F[k]
						out.F[k] = fs
					}
				} else {
					if excl {
						out.I[k] = tensor.WrapInt(is, x.DType)
						is += x.I[k]
					} else {
						is += x.I[k]
						out.I[k] = tensor.WrapInt(is, x.DType)
					}
				}
			}
		}
	}
	return one(out), nil
}
