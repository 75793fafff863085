package interp

import (
	"fmt"
	"math"
	"slices"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Unary float functions, in float64.
// The float ops are tables of scalar functions (one entry per op, as the op
// table is), so a new elementwise op is one line here; the kernels that loop
// over them are shared below. Every function computes in float64 and the
// interpreter rounds its result to the value's dtype afterwards.
var unaryFloat = map[ir.Op]func(float64) float64{
	ir.OpNeg:     func(x float64) float64 { return -x },
	ir.OpExp:     math.Exp,
	ir.OpLog:     math.Log,
	ir.OpSqrt:    math.Sqrt,
	ir.OpRsqrt:   func(x float64) float64 { return 1 / math.Sqrt(x) },
	ir.OpRecip:   func(x float64) float64 { return 1 / x },
	ir.OpTanh:    math.Tanh,
	ir.OpErf:     math.Erf,
	ir.OpSigmoid: sigmoid,
	ir.OpRelu:    relu,
	ir.OpAbs:     math.Abs,
	ir.OpCos:     math.Cos,
	ir.OpSin:     math.Sin,
	ir.OpSilu:    func(x float64) float64 { return x * sigmoid(x) },
}

// stop_gradient is the identity on values (its gradient is autodiff's business).
func init() { unaryFloat[ir.OpStopGradient] = func(x float64) float64 { return x } }

// sigmoid is 1/(1+e^-x), evaluated so that neither branch overflows.
func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

// relu keeps NaN, as PyTorch does.
func relu(x float64) float64 {
	// x < 0 is false for NaN, so NaN passes through rather than becoming 0.
	if x < 0 {
		return 0
	}
	return x
}

// geluErf is the exact GELU, 0.5·x·(1+erf(x/√2)).
func geluErf(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

// geluTanh is the tanh approximation 0.5·x·(1+tanh(√(2/π)·(x+0.044715·x³))).
func geluTanh(x float64) float64 {
	// 0.044715 is the cubic coefficient of Hendrycks and Gimpel's approximation,
	// as torch.nn.GELU(approximate="tanh") uses.
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

// Binary float functions, in float64.
var binaryFloat = map[ir.Op]func(a, b float64) float64{
	ir.OpAdd: func(a, b float64) float64 { return a + b },
	ir.OpSub: func(a, b float64) float64 { return a - b },
	ir.OpMul: func(a, b float64) float64 { return a * b },
	ir.OpDiv: func(a, b float64) float64 { return a / b },
	ir.OpPow: math.Pow,
	ir.OpMax: fmax,
	ir.OpMin: fmin,
}

// fmax and fmin propagate NaN, like torch.maximum and torch.minimum, and give the
// results of math.Max and math.Min (+0 is above −0) without their call, which
// the softmax and max-reduction loops would pay per element.
func fmax(a, b float64) float64 {
	switch {
	case a > b:
		return a
	case b > a:
		return b
	case a != a || b != b:
		return math.NaN()
	case math.Signbit(a): // a == b: only ±0 differ
		return b
	}
	return a
}

// fmin is fmax's mirror (see there).
func fmin(a, b float64) float64 {
	switch {
	case a < b:
		return a
	case b < a:
		return b
	case a != a || b != b:
		return math.NaN()
	case math.Signbit(a): // a == b: only ±0 differ
		return a
	}
	return b
}

// Binary integer functions; the result is wrapped to the dtype afterwards.
// Integer results are computed in int64 and wrapped to i32, i8 or u8 by the
// kernel: two's-complement wrapping commutes with +, − and ×.
var binaryInt = map[ir.Op]func(a, b int64) int64{
	ir.OpAdd: func(a, b int64) int64 { return a + b },
	ir.OpSub: func(a, b int64) int64 { return a - b },
	ir.OpMul: func(a, b int64) int64 { return a * b },
	ir.OpDiv: func(a, b int64) int64 { return a / b }, // truncates, as ONNX Div; kernelArith refuses b == 0
	ir.OpPow: ipow,
	ir.OpMax: func(a, b int64) int64 { return max(a, b) },
	ir.OpMin: func(a, b int64) int64 { return min(a, b) },
}

// ipow is integer power by squaring; negative exponents give the truncated
// reciprocal (0 unless the base is ±1).
func ipow(a, b int64) int64 {
	if b < 0 {
		switch a {
		case 1:
			return 1
		case -1:
			if b%2 == 0 {
				return 1
			}
			return -1
		case 0:
			// A division by zero in disguise: the panic becomes an error naming the node
			// (exec recovers it).
			panic("integer 0 raised to a negative power")
		}
		return 0
	}
	r := int64(1)
	// Squaring: O(log b) multiplies, wrapping in int64 as the dtype's
	// arithmetic would before the final WrapInt.
	for b > 0 {
		if b&1 == 1 {
			r *= a
		}
		a *= a
		b >>= 1
	}
	return r
}

// Comparisons, on floats and on integers.
// Every comparison with a NaN is false (IEEE 754), as in PyTorch; the
// kernels need no special case for it.
var compareOps = map[ir.Op]struct {
	f func(a, b float64) bool
	i func(a, b int64) bool
}{
	ir.OpEq: {func(a, b float64) bool { return a == b }, func(a, b int64) bool { return a == b }},
	ir.OpLt: {func(a, b float64) bool { return a < b }, func(a, b int64) bool { return a < b }},
	ir.OpLe: {func(a, b float64) bool { return a <= b }, func(a, b int64) bool { return a <= b }},
	ir.OpGt: {func(a, b float64) bool { return a > b }, func(a, b int64) bool { return a > b }},
	ir.OpGe: {func(a, b float64) bool { return a >= b }, func(a, b int64) bool { return a >= b }},
}

// Logic ops on bool tensors, whose elements are 0 or 1 in I.
var logicOps = map[ir.Op]func(a, b bool) bool{
	ir.OpAnd: func(a, b bool) bool { return a && b },
	ir.OpOr:  func(a, b bool) bool { return a || b },
	ir.OpXor: func(a, b bool) bool { return a != b },
}

func init() {
	for op, fn := range unaryFloat {
		Register(op, unaryKernel(fn))
	}
	// gelu is not in unaryFloat: its attribute picks the function per node.
	Register(ir.OpGelu, func(n *ir.Node, args []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
		fn := geluErf
		if n.AttrBool("tanh") {
			fn = geluTanh
		}
		return unaryKernel(fn)(n, args, opts)
	})
	Register(ir.OpNot, kernelNot)
	Register(ir.OpIsNaN, kernelIsNaN)
	Register(ir.OpCast, kernelCast)
	for op := range binaryFloat {
		Register(op, kernelArith)
	}
	for op := range compareOps {
		Register(op, kernelCompare)
	}
	for op := range logicOps {
		Register(op, kernelLogic)
	}
	// where only moves elements of its operands, which are already rounded to the
	// result's dtype: the interpreter need not round again (registerMove).
	registerMove(ir.OpWhere, kernelWhere)
}

// unaryKernel makes the kernel of an elementwise float op from its scalar
// function, split over the CPUs in chunks (the result is the same bits at any
// split: each element is computed alone).
func unaryKernel(fn func(float64) float64) Kernel {
	return func(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
		x, out := args[0].F, newResult(n, 0)
		// 8 cheap operations an element: exp, tanh and erf cost about that much, and
		// cheap ops like neg then split a little early, which is harmless.
		parallelRange(len(x), 8, func(lo, hi int) {
			dst := out.F[lo:hi]
			for i, v := range x[lo:hi] {
				dst[i] = fn(v)
			}
		})
		return one(out), nil
	}
}

// kernelNot is logical not of a bool tensor (stored as 0 or 1 in I).
func kernelNot(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	out := newResult(n, 0)
	// Bools are 0 or 1, so not is a test for 0; the result starts all 0.
	for i, v := range args[0].I {
		if v == 0 {
			out.I[i] = 1
		}
	}
	return one(out), nil
}

// kernelIsNaN marks NaN elements; v != v is the one test that holds only for NaN.
func kernelIsNaN(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	out := newResult(n, 0)
	for i, v := range args[0].F { // integer tensors have no NaN: F is nil
		if v != v {
			out.I[i] = 1
		}
	}
	return one(out), nil
}

// kernelCast converts between dtypes: float→int truncates toward zero (then wraps
// to the width), float→bool is x ≠ 0 (NaN is true), bool→float is 0 or 1, and a
// float destination is rounded to its precision by the interpreter.
func kernelCast(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, out := args[0], newResult(n, 0)
	to := out.DType
	switch {
	// Float to float is a copy: the values are float64 already, and the
	// interpreter rounds the result to the destination dtype.
	case to.IsFloat() && x.DType.IsFloat():
		parallelRange(len(out.F), 1, func(lo, hi int) { copy(out.F[lo:hi], x.F[lo:hi]) })
	case to.IsFloat():
		for i := range out.F {
			out.F[i] = x.Float(i)
		}
	case x.DType.IsFloat() && to == tensor.Bool:
		for i, v := range x.F {
			if v != 0 {
				out.I[i] = 1
			}
		}
	case x.DType.IsFloat():
		for i, v := range x.F {
			// NaN and ±Inf have no integer value; Go's conversion would give an
			// implementation-defined number, so the cast is refused as bad data.
			if v != v || math.IsInf(v, 0) {
				return nil, fmt.Errorf("cannot cast %v to %v", v, to)
			}
			out.I[i] = tensor.WrapInt(int64(v), to)
		}
	default:
		for i, v := range x.I {
			out.I[i] = tensor.WrapInt(v, to)
		}
	}
	return one(out), nil
}

// binary calls fn(o, ia, ib) for every output element o with the broadcast
// element offsets of a and b.
func binary(out []int64, a, b *tensor.Tensor, fn func(o, ia, ib int)) {
	// Same shapes, the common case: offsets are the output's own, no walk.
	if slices.Equal(a.Shape, out) && slices.Equal(b.Shape, out) {
		for i, n := 0, prod(out); i < n; i++ {
			fn(i, i, i)
		}
		return
	}
	walk(out, [][]int{bcastStrides(a.Shape, out), bcastStrides(b.Shape, out)},
		func(i int, offs []int) { fn(i, offs[0], offs[1]) })
}

// kernelArith is a broadcasting binary arithmetic op: floats through
// arithFloat's row loops, integers with ONNX's integer semantics.
func kernelArith(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	a, b, out := args[0], args[1], newResult(n, 0)
	if out.DType.IsFloat() {
		arithFloat(n.Op, out, a, b)
		return one(out), nil
	}
	// Checked before any element is computed: Go's integer division by zero
	// panics, and the node's error should name the divisor, not a stack.
	if n.Op == ir.OpDiv && len(out.I) > 0 {
		if j := slices.Index(b.I, 0); j >= 0 {
			return nil, fmt.Errorf("integer division by zero (element %d of the divisor %v%s)", j,
				b.DType, tensor.ShapeString(b.Shape))
		}
	}
	fn, dt := binaryInt[n.Op], out.DType
	binary(out.Shape, a, b, func(o, i, j int) { out.I[o] = tensor.WrapInt(fn(a.I[i], b.I[j]), dt) })
	return one(out), nil
}

// arithFloat is float arithmetic with broadcasting, one tight loop per row of the
// innermost dim (strides 0 or 1 there), so the common ops run without a call per
// element.
func arithFloat(op ir.Op, out, a, b *tensor.Tensor) {
	fn := binaryFloat[op]
	af, bf, of := a.F, b.F, out.F
	row := func(o, n int, ia, sa, ib, sb int) {
		dst := of[o : o+n]
		// The common layouts, a contiguous row with a row or a scalar, take
		// arithRow's loops, which have no stride multiplies.
		if sa == 1 && (sb == 1 || sb == 0) && arithRow(op, dst, af[ia:ia+n], bf[ib:], sb) {
			return
		}
		switch op {
		case ir.OpAdd:
			for j := range dst {
				dst[j] = af[ia+j*sa] + bf[ib+j*sb]
			}
		case ir.OpSub:
			for j := range dst {
				dst[j] = af[ia+j*sa] - bf[ib+j*sb]
			}
		case ir.OpMul:
			for j := range dst {
				dst[j] = af[ia+j*sa] * bf[ib+j*sb]
			}
		case ir.OpDiv:
			for j := range dst {
				dst[j] = af[ia+j*sa] / bf[ib+j*sb]
			}
		default:
			for j := range dst {
				dst[j] = fn(af[ia+j*sa], bf[ib+j*sb])
			}
		}
	}
	// add, sub, mul and div are one cheap operation an element; pow, max and min
	// go through a call, about 8.
	cost := 1
	if fn != nil && op != ir.OpAdd && op != ir.OpSub && op != ir.OpMul && op != ir.OpDiv {
		cost = 8
	}
	if slices.Equal(a.Shape, out.Shape) && slices.Equal(b.Shape, out.Shape) {
		// No broadcasting: the whole tensor is one row, split at any element.
		parallelRange(len(of), cost, func(lo, hi int) { row(lo, hi-lo, lo, 1, lo, 1) })
		return
	}
	sa, sb := bcastStrides(a.Shape, out.Shape), bcastStrides(b.Shape, out.Shape)
	r := len(out.Shape)
	parallelRows(out.Shape, [][]int{sa, sb}, cost, func(o, n int, offs []int) {
		row(o, n, offs[0], sa[r-1], offs[1], sb[r-1])
	})
}

// arithRow is dst = x op y for add, sub, mul and div, with y a row (sb = 1) or a
// broadcast scalar y[0] (sb = 0), in loops the compiler keeps free of index
// arithmetic. It reports false for other ops.
func arithRow(op ir.Op, dst, x, y []float64, sb int) bool {
	x = x[:len(dst)]
	if sb == 0 {
		v := y[0]
		switch op {
		case ir.OpAdd:
			for j, a := range x {
				dst[j] = a + v
			}
		case ir.OpSub:
			for j, a := range x {
				dst[j] = a - v
			}
		case ir.OpMul:
			for j, a := range x {
				dst[j] = a * v
			}
		case ir.OpDiv:
			for j, a := range x {
				dst[j] = a / v
			}
		default:
			return false
		}
		return true
	}
	y = y[:len(dst)]
	switch op {
	case ir.OpAdd:
		for j, a := range x {
			dst[j] = a + y[j]
		}
	case ir.OpSub:
		for j, a := range x {
			dst[j] = a - y[j]
		}
	case ir.OpMul:
		for j, a := range x {
			dst[j] = a * y[j]
		}
	case ir.OpDiv:
		for j, a := range x {
			dst[j] = a / y[j]
		}
	default:
		return false
	}
	return true
}

// kernelCompare is a broadcasting comparison with a bool result. Eq and Lt,
// which masks and causal patterns are made of, have loops of their own, the
// hot path of a folded mask; the others go through the op table.
func kernelCompare(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	a, b, out := args[0], args[1], newResult(n, 0)
	c := compareOps[n.Op]
	if !a.DType.IsFloat() {
		binary(out.Shape, a, b, func(o, i, j int) { out.I[o] = b2i(c.i(a.I[i], b.I[j])) })
		return one(out), nil
	}
	af, bf, oi := a.F, b.F, out.I
	sa, sb := bcastStrides(a.Shape, out.Shape), bcastStrides(b.Shape, out.Shape)
	r := len(out.Shape)
	ia1, ib1 := 0, 0 // the strides along the rows, 0 for rank 0
	if r > 0 {
		ia1, ib1 = sa[r-1], sb[r-1]
	}
	op := n.Op
	// A comparison and a store: 2 cheap operations an element.
	parallelRows(out.Shape, [][]int{sa, sb}, 2, func(o, m int, offs []int) {
		ia, ib := offs[0], offs[1]
		dst := oi[o : o+m]
		switch op {
		case ir.OpEq:
			for j := range dst {
				dst[j] = b2i(af[ia+j*ia1] == bf[ib+j*ib1])
			}
		case ir.OpLt:
			for j := range dst {
				dst[j] = b2i(af[ia+j*ia1] < bf[ib+j*ib1])
			}
		default:
			for j := range dst {
				dst[j] = b2i(c.f(af[ia+j*ia1], bf[ib+j*ib1]))
			}
		}
	})
	return one(out), nil
}

// kernelLogic is a broadcasting and, or or xor of bool tensors.
func kernelLogic(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	a, b, out := args[0], args[1], newResult(n, 0)
	fn := logicOps[n.Op]
	// Any non-zero element is true, as a bool cast of an integer would give.
	binary(out.Shape, a, b, func(o, i, j int) { out.I[o] = b2i(fn(a.I[i] != 0, b.I[j] != 0)) })
	return one(out), nil
}

// kernelWhere picks a or b per element by cond, all three broadcast to the
// result's shape.
func kernelWhere(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	c, a, b, out := args[0], args[1], args[2], newResult(n, 0)
	sts := [][]int{bcastStrides(c.Shape, out.Shape), bcastStrides(a.Shape, out.Shape),
		bcastStrides(b.Shape, out.Shape)}
	// Integer and bool where are rare (index arithmetic on small tensors): the
	// plain walk suffices.
	if !out.DType.IsFloat() {
		walk(out.Shape, sts, func(o int, offs []int) {
			if c.I[offs[0]] != 0 {
				out.I[o] = a.I[offs[1]]
			} else {
				out.I[o] = b.I[offs[2]]
			}
		})
		return one(out), nil
	}
	r := len(out.Shape)
	var sc, sa, sb int // the strides along the rows, 0 for rank 0
	if r > 0 {
		sc, sa, sb = sts[0][r-1], sts[1][r-1], sts[2][r-1]
	}
	ci, af, bf := c.I, a.F, b.F
	// A test and a move: 2 cheap operations an element.
	parallelRows(out.Shape, sts, 2, func(o, m int, offs []int) {
		ic, ia, ib := offs[0], offs[1], offs[2]
		dst := out.F[o : o+m]
		for j := range dst {
			if ci[ic+j*sc] != 0 {
				dst[j] = af[ia+j*sa]
			} else {
				dst[j] = bf[ib+j*sb]
			}
		}
	})
	return one(out), nil
}

// b2i is a bool as the 0 or 1 a bool tensor stores.
func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
