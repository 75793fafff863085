package cpu

import (
	"math"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

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
// NaN and give −Inf and +Inf over an empty range. On integers, mean truncates and
// sum wraps; on bools, sum and max are "any", min is "all".
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
	for i := len(x.Shape) - 1; i >= 0; i-- {
		if reduced[i] {
			count *= int(x.Shape[i])
			continue
		}
		ost[i] = s
		s *= int(x.Shape[i])
	}
	sts := [][]int{ost}
	if x.DType.IsFloat() {
		acc := out.F
		switch n.Op {
		case ir.OpReduceMax:
			fill(acc, negInf)
			walk(x.Shape, sts, func(i int, o []int) { acc[o[0]] = fmax(acc[o[0]], x.F[i]) })
		case ir.OpReduceMin:
			fill(acc, math.Inf(1))
			walk(x.Shape, sts, func(i int, o []int) { acc[o[0]] = fmin(acc[o[0]], x.F[i]) })
		default:
			walk(x.Shape, sts, func(i int, o []int) { acc[o[0]] += x.F[i] })
			if n.Op == ir.OpReduceMean {
				for i := range acc {
					acc[i] /= float64(count)
				}
			}
		}
		return one(out), nil
	}
	acc, dt := out.I, out.DType
	switch n.Op {
	case ir.OpReduceMax:
		for i := range acc {
			acc[i] = math.MinInt64
		}
		walk(x.Shape, sts, func(i int, o []int) { acc[o[0]] = max(acc[o[0]], x.I[i]) })
	case ir.OpReduceMin:
		for i := range acc {
			acc[i] = math.MaxInt64
		}
		walk(x.Shape, sts, func(i int, o []int) { acc[o[0]] = min(acc[o[0]], x.I[i]) })
	default:
		walk(x.Shape, sts, func(i int, o []int) { acc[o[0]] += x.I[i] })
		if n.Op == ir.OpReduceMean && count > 0 {
			for i := range acc {
				acc[i] /= int64(count)
			}
		}
	}
	for i := range acc {
		acc[i] = wrapInt(acc[i], dt)
	}
	return one(out), nil
}

func fill(xs []float64, v float64) {
	for i := range xs {
		xs[i] = v
	}
}

// kernelSoftmax is softmax or log_softmax over one axis, max-subtracted so that
// no exponent overflows. A row of −Inf gives NaN, as in PyTorch.
func kernelSoftmax(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, out := args[0], newResult(n, 0)
	axis := normAxis(n.Attrs.Int("axis", -1), len(x.Shape))
	outer, m, inner := splitAt(x.Shape, axis)
	logOut := n.Op == ir.OpLogSoftmax
	for o := 0; o < outer; o++ {
		for in := 0; in < inner; in++ {
			base := o*m*inner + in
			mx := negInf
			for j := 0; j < m; j++ {
				mx = fmax(mx, x.F[base+j*inner])
			}
			var sum float64
			for j := 0; j < m; j++ {
				sum += math.Exp(x.F[base+j*inner] - mx)
			}
			lse := math.Log(sum)
			for j := 0; j < m; j++ {
				k := base + j*inner
				if logOut {
					out.F[k] = x.F[k] - mx - lse
				} else {
					out.F[k] = math.Exp(x.F[k]-mx) / sum
				}
			}
		}
	}
	return one(out), nil
}

// normParams returns the scale and bias args (nil when absent) broadcast to the
// normalised dims shape[axis:], flattened.
func normParam(args []*tensor.Tensor, i int, dims []int64) []float64 {
	if i >= len(args) {
		return nil
	}
	p := args[i]
	if sameShape(p.Shape, dims) {
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
	axis := normAxis(n.Attrs.Int("axis", -1), len(x.Shape))
	eps := n.Attrs.Float("eps", 1e-5)
	dims := x.Shape[axis:]
	scale, bias := normParam(args, 1, dims), normParam(args, 2, dims)
	m := prod(dims)
	if m == 0 {
		return one(out), nil
	}
	for r := 0; r < len(x.F)/m; r++ {
		row, y := x.F[r*m:(r+1)*m], out.F[r*m:(r+1)*m]
		var mean, v float64
		for _, e := range row {
			mean += e
		}
		mean /= float64(m)
		for _, e := range row {
			v += (e - mean) * (e - mean)
		}
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
	return one(out), nil
}

// kernelRMSNorm is y = x / sqrt(mean(x²) + eps)·scale over dims axis..rank−1.
func kernelRMSNorm(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, out := args[0], newResult(n, 0)
	axis := normAxis(n.Attrs.Int("axis", -1), len(x.Shape))
	eps := n.Attrs.Float("eps", 1e-5)
	dims := x.Shape[axis:]
	scale := normParam(args, 1, dims)
	m := prod(dims)
	if m == 0 {
		return one(out), nil
	}
	for r := 0; r < len(x.F)/m; r++ {
		row, y := x.F[r*m:(r+1)*m], out.F[r*m:(r+1)*m]
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
	return one(out), nil
}

// kernelCumSum is the running sum along axis; exclusive leaves out the element
// itself, reverse runs from the end (ONNX CumSum).
func kernelCumSum(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, out := args[0], newResult(n, 0)
	axis := normAxis(n.Attrs.Int("axis", 0), len(x.Shape))
	excl, rev := n.Attrs.Bool("exclusive"), n.Attrs.Bool("reverse")
	outer, m, inner := splitAt(x.Shape, axis)
	isF := x.DType.IsFloat()
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
					if excl {
						out.F[k] = fs
						fs += x.F[k]
					} else {
						fs += x.F[k]
						out.F[k] = fs
					}
				} else {
					if excl {
						out.I[k] = wrapInt(is, x.DType)
						is += x.I[k]
					} else {
						is += x.I[k]
						out.I[k] = wrapInt(is, x.DType)
					}
				}
			}
		}
	}
	return one(out), nil
}
