package ir

import (
	"fmt"
	"math"
	"slices"
)

// VJP rules: the reverse-mode derivative of every differentiable op.
//
// Reverse-mode automatic differentiation (Griewank and Walther, "Evaluating
// Derivatives", 2nd ed., SIAM 2008, ch. 3; Baydin et al., "Automatic Differentiation
// in Machine Learning: a Survey", JMLR 18, 2018) propagates cotangents backwards:
// for y = f(x₁, …, xₙ) and the cotangent ȳ = ∂L/∂y, each rule emits x̄ᵢ = ȳ·∂f/∂xᵢ,
// the vector-Jacobian product, without forming the Jacobian. As in GoMLX
// (core/graph/rev_autodiff.go) the rules form a registry indexed by op (gradRules
// in grad.go, grad_nn.go and grad_shape.go, installed into OpInfo.Grad by def in
// ops.go); passes/autodiff walks the body backwards,
// calls each rule with a builder positioned after the forward code, and sums the
// cotangents of values read more than once.
//
// Contract of a rule (GradFunc): dys has one entry per result of n, nil where the
// result has no cotangent (at least one is non-nil); it returns one entry per
// argument, nil where the argument gets none (integer indices, masks, conditions).
// Each returned cotangent has exactly its argument's type (the pass checks). Rules
// emit code for every floating-point argument; the pass deletes what the objective
// does not need, so a rule never has to know which arguments are active. Rules
// report a failure with Builder.Fail, never a panic.
//
// Rules use only existing ops: composite ops (softmax, norms, losses) are
// differentiated through their textbook formulas written in primitive ops, and
// attention through attention_grad / dilated_attention_grad. Non-differentiable
// points follow PyTorch: relu'(0) = 0, abs'(0) = 0, ties of max/min (binary and
// reductions) share the cotangent evenly.
var gradRules = map[Op]GradFunc{
	OpNeg:     gradNeg,
	OpExp:     gradExp,
	OpLog:     gradLog,
	OpSqrt:    gradSqrt,
	OpRsqrt:   gradRsqrt,
	OpRecip:   gradRecip,
	OpTanh:    gradTanh,
	OpErf:     gradErf,
	OpSigmoid: gradSigmoid,
	OpRelu:    gradRelu,
	OpAbs:     gradAbs,
	OpCos:     gradCos,
	OpSin:     gradSin,
	OpSilu:    gradSilu,
	OpGelu:    gradGelu,
	OpCast:    gradCast,

	OpAdd:   gradAdd,
	OpSub:   gradSub,
	OpMul:   gradMul,
	OpDiv:   gradDiv,
	OpPow:   gradPow,
	OpMax:   gradMaxMin,
	OpMin:   gradMaxMin,
	OpWhere: gradWhere,

	OpReduceSum:  gradReduceSum,
	OpReduceMean: gradReduceMean,
	OpReduceMax:  gradReduceMaxMin,
	OpReduceMin:  gradReduceMaxMin,

	OpMatMul: gradMatMul,

	OpReshape:        gradReshape,
	OpTranspose:      gradTranspose,
	OpExpand:         gradExpand,
	OpSlice:          gradSlice,
	OpConcat:         gradConcat,
	OpSplit:          gradSplit,
	OpGather:         gradGather,
	OpGatherElements: gradGatherElements,
	OpGatherND:       gradGatherND,
	OpTile:           gradTile,
	OpCumSum:         gradCumSum,
	OpTrilu:          gradTrilu,
	OpScatterAdd:     gradScatterAdd,

	OpSoftmax:             gradSoftmax,
	OpLogSoftmax:          gradLogSoftmax,
	OpLayerNorm:           gradLayerNorm,
	OpRMSNorm:             gradRMSNorm,
	OpAttention:           gradAttention,
	OpDilatedAttention:    gradDilatedAttention,
	OpSoftmaxCrossEntropy: gradCrossEntropy,
	OpNLLLoss:             gradNLLLoss,

	OpFusedLinearCrossEntropy: gradFLCE, // ops_fused.go

	// Collectives and sharded attention (ops_collective.go).
	OpAllGather:               gradAllGather,
	OpReduceScatter:           gradReduceScatter,
	OpAllReduce:               gradAllReduce,
	OpAllToAll:                gradAllToAll,
	OpRingShift:               gradRingShift,
	OpRingAttention:           gradRingAttention,
	OpShardedDilatedAttention: gradShardedDilated,
}

// Full returns a value of type t whose elements all equal v (a full node, which
// backends never materialise).
func (b *Builder) Full(t Type, v float64) *Value {
	return b.Apply1(OpFull, A("value", v, "shape", append([]int64{}, t.Shape...),
		"dtype", t.DType))
}

// SumTo sums x over the dims along which a value of shape was broadcast to x's
// shape (numpy rules), returning a value of that shape: the transpose of implicit
// broadcasting, used to give each argument of an elementwise op its cotangent.
func (b *Builder) SumTo(x *Value, shape []int64) *Value {
	xs := x.Type.Shape
	if slices.Equal(xs, shape) {
		return x
	}
	lead := len(xs) - len(shape)
	if lead < 0 {
		b.Fail(fmt.Errorf("lcc: BUG: cannot sum %v to shape %v", x.Type, shape))
		return poison
	}
	var axes []int64
	for i := range xs {
		if i < lead || (shape[i-lead] == 1 && xs[i] != 1) {
			axes = append(axes, int64(i))
		}
	}
	if len(axes) > 0 {
		x = b.ReduceSum(x, true, axes...)
	}
	return b.reshapeTo(x, shape)
}

// reshapeTo reshapes x unless it already has shape.
func (b *Builder) reshapeTo(x *Value, shape []int64) *Value {
	if slices.Equal(x.Type.Shape, shape) {
		return x
	}
	return b.Reshape(x, shape...)
}

// expandTo broadcasts x to shape unless it already has it.
func (b *Builder) expandTo(x *Value, shape []int64) *Value {
	if slices.Equal(x.Type.Shape, shape) {
		return x
	}
	return b.Expand(x, shape...)
}

// like returns a rank-0 constant v of x's dtype, which broadcasts against x.
func (b *Builder) like(x *Value, v float64) *Value { return b.Scalar(x.Type.DType, v) }

func (b *Builder) bin(op Op, x, y *Value) *Value { return b.Apply1(op, nil, x, y) }

func (b *Builder) where(c, x, y *Value) *Value { return b.Apply1(OpWhere, nil, c, x, y) }

// reduce applies a reduction op over axes with keepdims.
func (b *Builder) reduce(op Op, x *Value, axes []int64) *Value {
	return b.Apply1(op, A("axes", append([]int64{}, axes...), "keepdims", true), x)
}

// ---- unary elementwise ----

// d/dx −x = −1
func gradNeg(b *Builder, n *Node, dys []*Value) []*Value {
	return []*Value{b.Neg(dys[0])}
}

// d/dx exp(x) = exp(x)
func gradExp(b *Builder, n *Node, dys []*Value) []*Value {
	return []*Value{b.Mul(dys[0], n.Result())}
}

// d/dx log(x) = 1/x
func gradLog(b *Builder, n *Node, dys []*Value) []*Value {
	return []*Value{b.Div(dys[0], n.Args[0])}
}

// d/dx √x = 1/(2√x)
func gradSqrt(b *Builder, n *Node, dys []*Value) []*Value {
	y := n.Result()
	return []*Value{b.Div(b.Mul(dys[0], b.like(y, 0.5)), y)}
}

// d/dx x^(−1/2) = −x^(−3/2)/2 = −y³/2
func gradRsqrt(b *Builder, n *Node, dys []*Value) []*Value {
	y := n.Result()
	y3 := b.Mul(b.Mul(y, y), y)
	return []*Value{b.Mul(dys[0], b.Mul(y3, b.like(y, -0.5)))}
}

// d/dx 1/x = −1/x² = −y²
func gradRecip(b *Builder, n *Node, dys []*Value) []*Value {
	y := n.Result()
	return []*Value{b.Neg(b.Mul(dys[0], b.Mul(y, y)))}
}

// d/dx tanh(x) = 1 − tanh²(x)
func gradTanh(b *Builder, n *Node, dys []*Value) []*Value {
	y := n.Result()
	return []*Value{b.Mul(dys[0], b.Sub(b.like(y, 1), b.Mul(y, y)))}
}

// d/dx erf(x) = 2/√π · exp(−x²)
func gradErf(b *Builder, n *Node, dys []*Value) []*Value {
	x := n.Args[0]
	e := b.Unary(OpExp, b.Neg(b.Mul(x, x)))
	return []*Value{b.Mul(dys[0], b.Mul(e, b.like(x, 2/math.Sqrt(math.Pi))))}
}

// d/dx σ(x) = σ(x)(1 − σ(x))
func gradSigmoid(b *Builder, n *Node, dys []*Value) []*Value {
	y := n.Result()
	return []*Value{b.Mul(dys[0], b.Mul(y, b.Sub(b.like(y, 1), y)))}
}

// d/dx relu(x) = [x > 0] (0 at the kink, as PyTorch)
func gradRelu(b *Builder, n *Node, dys []*Value) []*Value {
	x := n.Args[0]
	return []*Value{b.where(b.bin(OpGt, x, b.like(x, 0)), dys[0], b.like(x, 0))}
}

// d/dx |x| = sign(x) (0 at the kink, as PyTorch)
func gradAbs(b *Builder, n *Node, dys []*Value) []*Value {
	x := n.Args[0]
	dt := x.Type.DType
	zero := b.like(x, 0)
	sign := b.Sub(b.Cast(b.bin(OpGt, x, zero), dt), b.Cast(b.bin(OpLt, x, zero), dt))
	return []*Value{b.Mul(dys[0], sign)}
}

// d/dx cos(x) = −sin(x)
func gradCos(b *Builder, n *Node, dys []*Value) []*Value {
	return []*Value{b.Neg(b.Mul(dys[0], b.Unary(OpSin, n.Args[0])))}
}

// d/dx sin(x) = cos(x)
func gradSin(b *Builder, n *Node, dys []*Value) []*Value {
	return []*Value{b.Mul(dys[0], b.Unary(OpCos, n.Args[0]))}
}

// d/dx x·σ(x) = σ(x)·(1 + x·(1 − σ(x)))
func gradSilu(b *Builder, n *Node, dys []*Value) []*Value {
	x := n.Args[0]
	s := b.Unary(OpSigmoid, x)
	one := b.like(x, 1)
	return []*Value{b.Mul(dys[0], b.Mul(s, b.Add(one, b.Mul(x, b.Sub(one, s)))))}
}

// exact:  d/dx x·Φ(x) = Φ(x) + x·φ(x), Φ(x) = (1 + erf(x/√2))/2, φ(x) = exp(−x²/2)/√(2π)
// {tanh}: y = x·(1 + tanh u)/2, u = √(2/π)(x + 0.044715x³):
//
//	dy/dx = (1 + tanh u)/2 + x·(1 − tanh² u)/2 · √(2/π)(1 + 3·0.044715x²)
func gradGelu(b *Builder, n *Node, dys []*Value) []*Value {
	x := n.Args[0]
	c := func(v float64) *Value { return b.like(x, v) }
	var d *Value
	if n.AttrBool("tanh") {
		const k = 0.044715
		x2 := b.Mul(x, x)
		u := b.Mul(c(math.Sqrt(2/math.Pi)), b.Add(x, b.Mul(c(k), b.Mul(x2, x))))
		t := b.Unary(OpTanh, u)
		du := b.Mul(c(math.Sqrt(2/math.Pi)), b.Add(c(1), b.Mul(c(3*k), x2)))
		left := b.Mul(c(0.5), b.Add(c(1), t))
		right := b.Mul(b.Mul(c(0.5), x), b.Mul(b.Sub(c(1), b.Mul(t, t)), du))
		d = b.Add(left, right)
	} else {
		cdf := b.Mul(c(0.5), b.Add(c(1), b.Unary(OpErf, b.Mul(x, c(1/math.Sqrt2)))))
		pdf := b.Mul(c(1/math.Sqrt(2*math.Pi)), b.Unary(OpExp, b.Mul(c(-0.5), b.Mul(x, x))))
		d = b.Add(cdf, b.Mul(x, pdf))
	}
	return []*Value{b.Mul(dys[0], d)}
}

// float → float: cast the cotangent back; to or from integers and bool: none.
func gradCast(b *Builder, n *Node, dys []*Value) []*Value {
	x := n.Args[0]
	if !x.Type.DType.IsFloat() || !n.Result().Type.DType.IsFloat() {
		return []*Value{nil}
	}
	return []*Value{b.Cast(dys[0], x.Type.DType)}
}

// ---- binary elementwise (numpy broadcasting: SumTo undoes it) ----

// d(x + y) = dx + dy
func gradAdd(b *Builder, n *Node, dys []*Value) []*Value {
	dz := dys[0]
	return []*Value{b.SumTo(dz, n.Args[0].Type.Shape), b.SumTo(dz, n.Args[1].Type.Shape)}
}

// d(x − y) = dx − dy
func gradSub(b *Builder, n *Node, dys []*Value) []*Value {
	dz := dys[0]
	return []*Value{b.SumTo(dz, n.Args[0].Type.Shape), b.SumTo(b.Neg(dz), n.Args[1].Type.Shape)}
}

// d(x·y) = y·dx + x·dy
func gradMul(b *Builder, n *Node, dys []*Value) []*Value {
	x, y, dz := n.Args[0], n.Args[1], dys[0]
	return []*Value{b.SumTo(b.Mul(dz, y), x.Type.Shape), b.SumTo(b.Mul(dz, x), y.Type.Shape)}
}

// d(x/y) = dx/y − (x/y)/y·dy
func gradDiv(b *Builder, n *Node, dys []*Value) []*Value {
	x, y, dz := n.Args[0], n.Args[1], dys[0]
	dx := b.Div(dz, y)
	dy := b.Neg(b.Div(b.Mul(dz, n.Result()), y))
	return []*Value{b.SumTo(dx, x.Type.Shape), b.SumTo(dy, y.Type.Shape)}
}

// ∂/∂x x^y = y·x^(y−1); ∂/∂y x^y = x^y·log x, taken as 0 where x = 0 (PyTorch)
func gradPow(b *Builder, n *Node, dys []*Value) []*Value {
	x, y, dz := n.Args[0], n.Args[1], dys[0]
	dx := b.Mul(dz, b.Mul(y, b.bin(OpPow, x, b.Sub(y, b.like(y, 1)))))
	zero := b.like(x, 0)
	logx := b.where(b.bin(OpEq, x, zero), zero, b.Unary(OpLog, x))
	dy := b.Mul(dz, b.Mul(n.Result(), logx))
	return []*Value{b.SumTo(dx, x.Type.Shape), b.SumTo(dy, y.Type.Shape)}
}

// max(x, y): the cotangent goes to the larger argument; on a tie each gets half
// (PyTorch's maximum/minimum). min is the same with < for >.
func gradMaxMin(b *Builder, n *Node, dys []*Value) []*Value {
	x, y, dz := n.Args[0], n.Args[1], dys[0]
	dt := x.Type.DType
	cmp := OpGt
	if n.Op == OpMin {
		cmp = OpLt
	}
	wins := b.Cast(b.bin(cmp, x, y), dt)
	ties := b.Cast(b.bin(OpEq, x, y), dt)
	wx := b.Add(wins, b.Mul(ties, b.like(x, 0.5)))
	wy := b.Sub(b.like(x, 1), wx)
	return []*Value{b.SumTo(b.Mul(dz, wx), x.Type.Shape), b.SumTo(b.Mul(dz, wy), y.Type.Shape)}
}

// where(c, a, b): the cotangent goes to the selected branch; c gets none.
func gradWhere(b *Builder, n *Node, dys []*Value) []*Value {
	c, x, y, dz := n.Args[0], n.Args[1], n.Args[2], dys[0]
	zero := b.like(dz, 0)
	dx := b.where(c, dz, zero)
	dy := b.where(c, zero, dz)
	return []*Value{nil, b.SumTo(dx, x.Type.Shape), b.SumTo(dy, y.Type.Shape)}
}

// ---- reductions ----

// keptShape is x's shape with the reduced axes of n set to 1, and those axes.
func keptShape(n *Node) ([]int64, []int64) {
	x := n.Args[0].Type
	axes, err := ReduceAxes(n.Attrs, x.Rank())
	if err != nil {
		panic("lcc: BUG: reduction verified but axes bad: " + err.Error())
	}
	shape := append([]int64{}, x.Shape...)
	var as []int64
	for _, a := range axes {
		shape[a] = 1
		as = append(as, int64(a))
	}
	return shape, as
}

// unreduce gives dy, the cotangent of a reduction's result, the reduced axes back
// as size-1 dims, unless numpy broadcasting already supplies them (leading axes).
func (b *Builder) unreduce(dy *Value, kept []int64) *Value {
	lead := len(kept) - dy.Type.Rank()
	if lead >= 0 && slices.Equal(dy.Type.Shape, kept[lead:]) {
		return dy
	}
	return b.reshapeTo(dy, kept)
}

// d/dx Σ x = 1: broadcast the cotangent back over the reduced axes.
func gradReduceSum(b *Builder, n *Node, dys []*Value) []*Value {
	kept, _ := keptShape(n)
	return []*Value{b.expandTo(b.unreduce(dys[0], kept), n.Args[0].Type.Shape)}
}

// d/dx mean(x) = 1/count
func gradReduceMean(b *Builder, n *Node, dys []*Value) []*Value {
	x := n.Args[0]
	kept, _ := keptShape(n)
	count := x.Type.Numel() / max(Type{Shape: kept}.Numel(), 1)
	dy := b.Div(b.unreduce(dys[0], kept), b.like(x, float64(max(count, 1))))
	return []*Value{b.expandTo(dy, x.Type.Shape)}
}

// d/dx max(x) routes the cotangent to the positions equal to the max, split evenly
// among ties (PyTorch's amax/amin; torch.max(dim) instead picks one index). The
// same rule serves reduce_min.
func gradReduceMaxMin(b *Builder, n *Node, dys []*Value) []*Value {
	x := n.Args[0]
	kept, axes := keptShape(n)
	y := b.unreduce(n.Result(), kept)
	hit := b.Cast(b.bin(OpEq, x, y), x.Type.DType)
	count := b.reduce(OpReduceSum, hit, axes)
	dy := b.Div(b.unreduce(dys[0], kept), count)
	return []*Value{b.Mul(hit, dy)}
}

// ---- matmul ----

// C = op(A)·op(B) with op = transpose or identity per attribute. With A' = op(A),
// B' = op(B): dA' = dC·B'ᵀ and dB' = A'ᵀ·dC, transposed back when the attribute
// is set, then summed over broadcast batch dims:
//
//	A·B:    dA = dC·Bᵀ,  dB = Aᵀ·dC
//	A·Bᵀ:   dA = dC·B,   dB = dCᵀ·A
//	Aᵀ·B:   dA = B·dCᵀ,  dB = A·dC
//	Aᵀ·Bᵀ:  dA = Bᵀ·dCᵀ, dB = dCᵀ·Aᵀ
//
// A rank-2 B against a batched A (activations times a weight) gets its gradient
// from one GEMM over the flattened rows.
func gradMatMul(b *Builder, n *Node, dys []*Value) []*Value {
	a, bb, dc := n.Args[0], n.Args[1], dys[0]
	ta, tb := n.AttrBool("transpose_a"), n.AttrBool("transpose_b")
	var da, db *Value
	switch {
	case !ta && !tb:
		da, db = b.MatMul(dc, bb, false, true), b.MatMul(a, dc, true, false)
	case !ta && tb:
		da, db = b.MatMul(dc, bb, false, false), b.MatMul(dc, a, true, false)
	case ta && !tb:
		da, db = b.MatMul(bb, dc, false, true), b.MatMul(a, dc, false, false)
	default:
		da, db = b.MatMul(bb, dc, true, true), b.MatMul(dc, a, true, true)
	}
	if r := a.Type.Rank(); bb.Type.Rank() == 2 && r > 2 && !ta {
		// A weight shared by every batch entry (x·W): fold the batch into the rows,
		// one GEMM [k, M]·[M, n] instead of a batched one plus a sum over the batch.
		rows := Type{Shape: a.Type.Shape[:r-1]}.Numel()
		af := b.Reshape(a, rows, a.Type.Shape[r-1])
		dcf := b.Reshape(dc, rows, dc.Type.Shape[dc.Type.Rank()-1])
		if tb {
			db = b.MatMul(dcf, af, true, false)
		} else {
			db = b.MatMul(af, dcf, true, false)
		}
	}
	return []*Value{b.SumTo(da, a.Type.Shape), b.SumTo(db, bb.Type.Shape)}
}
