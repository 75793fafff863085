package onnx

import (
	"fmt"
	"math"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// lowerFunc lowers one ONNX node to IR values, one per ONNX output it supports.
type lowerFunc func(c *nodeCtx) ([]*ir.Value, error)

// nodeCtx gives a lowering typed access to its node's inputs and attributes.
type nodeCtx struct {
	l *lowerer
	n *Node
	b *ir.Builder
}

// has reports whether optional input i is present.
func (c *nodeCtx) has(i int) bool { return i < len(c.n.Inputs) && c.n.Inputs[i] != "" }

// in returns input i as an IR value.
func (c *nodeCtx) in(i int) *ir.Value {
	if !c.has(i) {
		c.b.Fail(fmt.Errorf("required input %d is missing", i))
		return c.b.Scalar(tensor.F32, 0)
	}
	v, err := c.l.value(c.b, c.n.Inputs[i])
	if err != nil {
		c.b.Fail(err)
		return c.b.Scalar(tensor.F32, 0)
	}
	return v
}

// constIn returns input i's value, which must be known at compile time.
func (c *nodeCtx) constIn(i int) (*tensor.Tensor, error) {
	if !c.has(i) {
		return nil, fmt.Errorf("required input %d is missing", i)
	}
	e := c.l.env[c.n.Inputs[i]]
	if e != nil && e.c == nil {
		e.c = c.l.boundInput(c.n.Inputs[i], e)
	}
	if e == nil || e.c == nil {
		hint := ""
		if e != nil && e.v != nil && e.v.Param != nil && e.v.Param.Role == ir.RoleInput {
			if dt := e.v.Type.DType; dt.IsInt() || dt == tensor.Bool {
				hint = "; it is a model input: give it a value (lcc check --ref, lcc run --inputs) to bind it"
			} else {
				hint = fmt.Sprintf("; it is a %v model input, and only integer and bool inputs are bound to given values", dt)
			}
		}
		return nil, fmt.Errorf("input %d (%q) is computed at run time; lcc needs it constant once dims are bound%s",
			i, c.n.Inputs[i], hint)
	}
	return e.c, nil
}

func (c *nodeCtx) constInts(i int) ([]int64, error) {
	t, err := c.constIn(i)
	if err != nil {
		return nil, err
	}
	return t.Ints(), nil
}

func (c *nodeCtx) attr(name string) (Attr, bool) {
	a, ok := c.n.Attrs[name]
	return a, ok
}

func (c *nodeCtx) aInt(name string, def int64) int64 {
	if a, ok := c.attr(name); ok && a.Kind == AttrInt {
		return a.Int
	}
	return def
}

func (c *nodeCtx) aFloat(name string, def float64) float64 {
	if a, ok := c.attr(name); ok && a.Kind == AttrFloat {
		return a.Float
	}
	return def
}

func (c *nodeCtx) aInts(name string) ([]int64, bool) {
	if a, ok := c.attr(name); ok && a.Kind == AttrInts {
		return a.Ints, true
	}
	return nil, false
}

func (c *nodeCtx) aString(name, def string) string {
	if a, ok := c.attr(name); ok && a.Kind == AttrString {
		return a.String
	}
	return def
}

// opset is the default domain's opset version.
func (c *nodeCtx) opset() int64 { return c.l.m.Opsets[""] }

func one(v *ir.Value) ([]*ir.Value, error) { return []*ir.Value{v}, nil }

var lowerings map[string]lowerFunc

func init() {
	lowerings = map[string]lowerFunc{
		"Identity": func(c *nodeCtx) ([]*ir.Value, error) { return one(c.in(0)) },
		"Dropout":  lowerDropout,
		"Neg":      lowerNeg,
		"Gelu":     lowerGelu,
		"Cast":     lowerCast,
		"CastLike": func(c *nodeCtx) ([]*ir.Value, error) { return one(c.b.Cast(c.in(0), c.in(1).Type.DType)) },
		"Div":      lowerDiv,
		"Pow":      lowerPow,
		"Max":      variadic(ir.OpMax),
		"Min":      variadic(ir.OpMin),
		"Sum":      variadic(ir.OpAdd),
		"Mean":     lowerMean,
		"Where": func(c *nodeCtx) ([]*ir.Value, error) {
			return one(c.b.Apply1(ir.OpWhere, nil, c.in(0), c.in(1), c.in(2)))
		},
		"MatMul":          lowerMatMul,
		"Gemm":            lowerGemm,
		"Reshape":         lowerReshape,
		"Transpose":       lowerTranspose,
		"Expand":          lowerExpand,
		"Slice":           lowerSlice,
		"Concat":          lowerConcat,
		"Pad":             lowerPad,
		"Clip":            lowerClip,
		"ArgMax":          lowerArgExtreme(ir.OpReduceMax),
		"ArgMin":          lowerArgExtreme(ir.OpReduceMin),
		"Hardmax":         lowerHardmax,
		"RotaryEmbedding": lowerRotaryEmbedding,
		"IsInf":           lowerIsInf,
		"Elu":             activation(actElu),
		"Selu":            activation(actSelu),
		"LeakyRelu":       activation(actLeakyRelu),
		"ThresholdedRelu": activation(actThresholdedRelu),
		"HardSigmoid":     activation(actHardSigmoid),
		"HardSwish":       activation(actHardSwish),
		"Softplus":        activation(actSoftplus),
		"Softsign":        activation(actSoftsign),
		"Sinh":            activation(actSinh),
		"Cosh":            activation(actCosh),
		"Tan":             activation(actTan),
		"PRelu":           lowerPRelu,
		"Split":           lowerSplit,
		"Gather":          lowerGather,
		"GatherElements": func(c *nodeCtx) ([]*ir.Value, error) {
			return one(c.b.Apply1(ir.OpGatherElements, ir.A("axis", c.aInt("axis", 0)), c.in(0), c.in(1)))
		},
		"GatherND": func(c *nodeCtx) ([]*ir.Value, error) {
			return one(c.b.Apply1(ir.OpGatherND, ir.A("batch_dims", c.aInt("batch_dims", 0)), c.in(0), c.in(1)))
		},
		"Squeeze":         lowerSqueeze,
		"Unsqueeze":       lowerUnsqueeze,
		"Flatten":         lowerFlatten,
		"Shape":           lowerShape,
		"Size":            lowerSize,
		"ConstantOfShape": lowerConstantOfShape,
		"Constant":        lowerConstant,
		"Range":           lowerRange,
		"Tile":            lowerTile,
		"CumSum":          lowerCumSum,
		"Trilu":           lowerTrilu,
		"ReduceSum":       reduce(ir.OpReduceSum, 13),
		"ReduceMean":      reduce(ir.OpReduceMean, 18),
		"ReduceMax":       reduce(ir.OpReduceMax, 18),
		"ReduceMin":       reduce(ir.OpReduceMin, 18),
		"ReduceL1":        reduceComposite(func(b *ir.Builder, x *ir.Value) *ir.Value { return b.Unary(ir.OpAbs, x) }, nil),
		"ReduceL2":        reduceComposite(square, func(b *ir.Builder, y *ir.Value) *ir.Value { return b.Unary(ir.OpSqrt, y) }),
		"ReduceSumSquare": reduceComposite(square, nil),
		"ReduceLogSum":    reduceComposite(nil, func(b *ir.Builder, y *ir.Value) *ir.Value { return b.Unary(ir.OpLog, y) }),
		"ReduceLogSumExp": lowerReduceLogSumExp,
		"ReduceProd":      lowerReduceProd,
		"Mod":             lowerMod,
		"Softmax": func(c *nodeCtx) ([]*ir.Value, error) {
			return one(c.b.Apply1(ir.OpSoftmax, ir.A("axis", c.aInt("axis", -1)), c.in(0)))
		},
		"LogSoftmax": func(c *nodeCtx) ([]*ir.Value, error) {
			return one(c.b.Apply1(ir.OpLogSoftmax, ir.A("axis", c.aInt("axis", -1)), c.in(0)))
		},
		"LayerNormalization":        lowerLayerNorm,
		"RMSNormalization":          lowerRMSNorm,
		"Attention":                 lowerAttention,
		"SoftmaxCrossEntropyLoss":   lowerLoss(ir.OpSoftmaxCrossEntropy),
		"NegativeLogLikelihoodLoss": lowerLoss(ir.OpNLLLoss),
	}
	// An ONNX op equal to an IR op (the op table's ONNX column) lowers to it
	// directly, unless an entry above handles more than the IR op does.
	for _, op := range ir.AllOps() {
		name := op.Info().ONNX
		if name == "" || lowerings[name] != nil {
			continue
		}
		switch op.Info().MinArgs {
		case 1:
			lowerings[name] = unary(op)
		case 2:
			lowerings[name] = binaryOp(op)
		default:
			panic("lcc: BUG: onnx: no direct lowering of " + name + " to " + op.String())
		}
	}
}

func unary(op ir.Op) lowerFunc {
	return func(c *nodeCtx) ([]*ir.Value, error) { return one(c.b.Unary(op, c.in(0))) }
}

func binaryOp(op ir.Op) lowerFunc {
	return func(c *nodeCtx) ([]*ir.Value, error) { return one(c.b.Apply1(op, nil, c.in(0), c.in(1))) }
}

func variadic(op ir.Op) lowerFunc {
	return func(c *nodeCtx) ([]*ir.Value, error) {
		acc := c.in(0)
		for i := 1; i < len(c.n.Inputs); i++ {
			acc = c.b.Apply1(op, nil, acc, c.in(i))
		}
		return one(acc)
	}
}

func lowerMean(c *nodeCtx) ([]*ir.Value, error) {
	sum, _ := variadic(ir.OpAdd)(c)
	return one(c.b.Div(sum[0], c.b.Scalar(sum[0].Type.DType, float64(len(c.n.Inputs)))))
}

// lowerDiv is Div; integer division truncates in ONNX, which the CPU kernel does.
func lowerDiv(c *nodeCtx) ([]*ir.Value, error) { return binaryOp(ir.OpDiv)(c) }

// Pow allows an exponent of another type; lcc casts it to the base's type.
func lowerPow(c *nodeCtx) ([]*ir.Value, error) {
	x, y := c.in(0), c.in(1)
	return one(c.b.Apply1(ir.OpPow, nil, x, c.b.Cast(y, x.Type.DType)))
}

func lowerGelu(c *nodeCtx) ([]*ir.Value, error) {
	approx := c.aString("approximate", "none")
	if approx != "none" && approx != "tanh" {
		return nil, fmt.Errorf("approximate=%q: want none or tanh", approx)
	}
	return one(c.b.Apply1(ir.OpGelu, ir.A("tanh", approx == "tanh"), c.in(0)))
}

func lowerCast(c *nodeCtx) ([]*ir.Value, error) {
	to, ok := DType(int32(c.aInt("to", 0)))
	if !ok {
		return nil, fmt.Errorf("%w: cast to ONNX type %d", ErrUnsupported, c.aInt("to", 0))
	}
	return one(c.b.Cast(c.in(0), to))
}

// MatMul follows numpy: a 1-D operand is promoted to a matrix and the added dim
// removed from the result.
func lowerMatMul(c *nodeCtx) ([]*ir.Value, error) {
	if w := c.transposedWeight(1); w != nil && c.in(0).Type.Rank() >= 2 {
		// x·Wᵀ of a Linear whose transpose the exporter folded: PyTorch's layout.
		return one(c.b.MatMul(c.in(0), w, false, true))
	}
	a, b := c.in(0), c.in(1)
	if a.Type.Rank() == 0 || b.Type.Rank() == 0 {
		return nil, fmt.Errorf("MatMul of a scalar")
	}
	aVec, bVec := a.Type.Rank() == 1, b.Type.Rank() == 1
	if aVec {
		a = c.b.Reshape(a, 1, a.Type.Shape[0])
	}
	if bVec {
		b = c.b.Reshape(b, b.Type.Shape[0], 1)
	}
	y := c.b.MatMul(a, b, false, false)
	if err := c.b.Err(); err != nil {
		return nil, err // operands that do not multiply: y has no shape to trim
	}
	if aVec || bVec {
		shape := append([]int64{}, y.Type.Shape...)
		if bVec {
			shape = shape[:len(shape)-1]
		}
		if aVec {
			shape = append(shape[:len(shape)-1-btoi(!bVec)], shape[len(shape)-btoi(!bVec):]...)
		}
		y = c.b.Reshape(y, shape...)
	}
	return one(y)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Gemm: alpha·A'·B' + beta·C.
func lowerGemm(c *nodeCtx) ([]*ir.Value, error) {
	bT := c.aInt("transB", 0) != 0
	var b *ir.Value
	if w := c.transposedWeight(1); w != nil {
		b, bT = w, !bT
	} else {
		b = c.in(1)
	}
	y := c.b.MatMul(c.in(0), b, c.aInt("transA", 0) != 0, bT)
	if alpha := c.aFloat("alpha", 1); alpha != 1 {
		y = c.b.Mul(y, c.b.Scalar(y.Type.DType, alpha))
	}
	if c.has(2) {
		bias := c.in(2)
		if beta := c.aFloat("beta", 1); beta != 1 {
			bias = c.b.Mul(bias, c.b.Scalar(bias.Type.DType, beta))
		}
		y = c.b.Add(y, bias)
	}
	return one(y)
}

func lowerReshape(c *nodeCtx) ([]*ir.Value, error) {
	x := c.in(0)
	spec, err := c.constInts(1)
	if err != nil {
		return nil, err
	}
	allowZero := c.aInt("allowzero", 0) != 0
	shape := make([]int64, len(spec))
	infer := -1
	known := int64(1)
	for i, d := range spec {
		switch {
		case d == 0 && !allowZero:
			if i >= x.Type.Rank() {
				return nil, fmt.Errorf("shape %s copies dim %d of a rank-%d input", tensor.Brief(spec), i,
					x.Type.Rank())
			}
			shape[i] = x.Type.Shape[i]
		case d == -1:
			if infer >= 0 {
				return nil, fmt.Errorf("shape %s has two -1 dims", tensor.Brief(spec))
			}
			infer = i
			continue
		case d < -1:
			return nil, fmt.Errorf("shape %s has a negative dim", tensor.Brief(spec))
		default:
			shape[i] = d
		}
		known *= shape[i]
	}
	if infer >= 0 {
		if known == 0 || x.Type.Numel()%known != 0 {
			return nil, fmt.Errorf("cannot reshape %v to %s", x.Type, tensor.Brief(spec))
		}
		shape[infer] = x.Type.Numel() / known
	}
	return one(c.b.Reshape(x, shape...))
}

func lowerTranspose(c *nodeCtx) ([]*ir.Value, error) {
	x := c.in(0)
	perm, ok := c.aInts("perm")
	if !ok {
		for i := x.Type.Rank() - 1; i >= 0; i-- {
			perm = append(perm, int64(i))
		}
	}
	return one(c.b.Transpose(x, perm...))
}

// Expand broadcasts both ways: the result has the broadcast of x's shape and the
// given shape.
func lowerExpand(c *nodeCtx) ([]*ir.Value, error) {
	x := c.in(0)
	shape, err := c.constInts(1)
	if err != nil {
		return nil, err
	}
	out, err := ir.Broadcast(x.Type.Shape, shape)
	if err != nil {
		return nil, err
	}
	if len(out) == x.Type.Rank() && x.Type.SameShape(ir.T(0, out...)) {
		return one(x)
	}
	return one(c.b.Expand(x, out...))
}

// Slice normalises ONNX's clamped, possibly negative bounds to in-range ones.
func lowerSlice(c *nodeCtx) ([]*ir.Value, error) {
	x := c.in(0)
	starts, err := c.constInts(1)
	if err != nil {
		return nil, err
	}
	ends, err := c.constInts(2)
	if err != nil {
		return nil, err
	}
	axes := make([]int64, len(starts))
	for i := range axes {
		axes[i] = int64(i)
	}
	if c.has(3) {
		if axes, err = c.constInts(3); err != nil {
			return nil, err
		}
	}
	steps := make([]int64, len(starts))
	for i := range steps {
		steps[i] = 1
	}
	if c.has(4) {
		if steps, err = c.constInts(4); err != nil {
			return nil, err
		}
	}
	if len(ends) != len(starts) || len(axes) != len(starts) || len(steps) != len(starts) {
		return nil, fmt.Errorf("starts, ends, axes and steps differ in length")
	}
	var na, ns, ne, nst []int64
	for i := range starts {
		ax, err := ir.AxisIndex(axes[i], x.Type.Rank())
		if err != nil {
			return nil, err
		}
		d := x.Type.Shape[ax]
		s, e, st := starts[i], ends[i], steps[i]
		if st == 0 {
			return nil, fmt.Errorf("slice step 0")
		}
		if s < 0 {
			s += d
		}
		if e < 0 && e > math.MinInt64+d {
			e += d
		} else if e < 0 {
			e = -1
		}
		if st > 0 && e > d && e < 1<<40 && c.l.clipped == "" {
			// Exporters end open slices at INT64_MAX; a concrete end past the axis is
			// a request for more rows than exist (HF BERT's position_ids[:, :seq]).
			c.l.clipped = fmt.Sprintf("%s asked for %d entries of %q %v, whose axis %d holds %d",
				c.n.String(), e, c.n.Inputs[0], x.Type.Shape, ax, d)
		}
		if st > 0 {
			s, e = clamp(s, 0, d), clamp(e, 0, d)
		} else {
			s, e = clamp(s, 0, d-1), clamp(e, -1, d-1)
		}
		if st > 0 && s == 0 && e == d && st == 1 {
			continue // the whole axis
		}
		na, ns, ne, nst = append(na, int64(ax)), append(ns, s), append(ne, e), append(nst, st)
	}
	if len(na) == 0 {
		return one(x)
	}
	return one(c.b.Apply1(ir.OpSlice, ir.A("axes", na, "starts", ns, "ends", ne, "steps", nst), x))
}

func clamp(v, lo, hi int64) int64 { return max(lo, min(v, hi)) }

// argIndex returns the index along axis ax of x's extreme element (op is
// reduce_max or reduce_min), keeping the dim: the first such index, or the last
// with last. It is a composition: the positions equal to the extreme, an index
// ramp along the axis, and a min (or max) over the ramp where equal.
func argIndex(b *ir.Builder, x *ir.Value, ax int, op ir.Op, last bool) *ir.Value {
	r := x.Type.Rank()
	d := x.Type.Shape[ax]
	m := b.Apply1(op, ir.A("axes", []int64{int64(ax)}, "keepdims", true), x)
	eq := b.Apply1(ir.OpEq, nil, x, m)
	if x.Type.DType.IsFloat() {
		// max and min propagate NaN: then the NaNs are the extreme, as in numpy.
		eq = b.Apply1(ir.OpOr, nil, eq, b.Unary(ir.OpIsNaN, x))
	}
	shape := make([]int64, r)
	for i := range shape {
		shape[i] = 1
	}
	shape[ax] = d
	ramp := b.Reshape(b.Apply1(ir.OpRange, ir.A("start", 0.0, "delta", 1.0, "count", d, "dtype", tensor.I64)), shape...)
	pick, miss := ir.OpReduceMin, d
	if last {
		pick, miss = ir.OpReduceMax, -1
	}
	cand := b.Apply1(ir.OpWhere, nil, eq, ramp, b.Scalar(tensor.I64, float64(miss)))
	return b.Apply1(pick, ir.A("axes", []int64{int64(ax)}, "keepdims", true), cand)
}

// lowerArgExtreme lowers ArgMax/ArgMin to int64 indices.
func lowerArgExtreme(op ir.Op) lowerFunc {
	return func(c *nodeCtx) ([]*ir.Value, error) {
		x := c.in(0)
		ax, err := ir.AxisIndex(c.aInt("axis", 0), x.Type.Rank())
		if err != nil {
			return nil, err
		}
		idx := argIndex(c.b, x, ax, op, c.aInt("select_last_index", 0) != 0)
		if c.aInt("keepdims", 1) == 0 {
			shape := append(append([]int64{}, x.Type.Shape[:ax]...), x.Type.Shape[ax+1:]...)
			idx = c.b.Reshape(idx, shape...)
		}
		return one(idx)
	}
}

// lowerHardmax is 1 at the first maximum along axis, 0 elsewhere.
func lowerHardmax(c *nodeCtx) ([]*ir.Value, error) {
	x := c.in(0)
	ax, err := ir.AxisIndex(c.aInt("axis", -1), x.Type.Rank())
	if err != nil {
		return nil, err
	}
	idx := argIndex(c.b, x, ax, ir.OpReduceMax, false)
	shape := make([]int64, x.Type.Rank())
	for i := range shape {
		shape[i] = 1
	}
	shape[ax] = x.Type.Shape[ax]
	ramp := c.b.Reshape(c.b.Apply1(ir.OpRange, ir.A("start", 0.0, "delta", 1.0, "count", x.Type.Shape[ax],
		"dtype", tensor.I64)), shape...)
	return one(c.b.Cast(c.b.Apply1(ir.OpEq, nil, ramp, idx), x.Type.DType))
}

// lowerIsInf compares x with ±inf (detect_positive, detect_negative).
func lowerIsInf(c *nodeCtx) ([]*ir.Value, error) {
	x := c.in(0)
	if !x.Type.DType.IsFloat() {
		return nil, fmt.Errorf("IsInf of %v", x.Type.DType)
	}
	var out *ir.Value
	for _, s := range []struct {
		attr string
		v    float64
	}{{"detect_positive", math.Inf(1)}, {"detect_negative", math.Inf(-1)}} {
		if c.aInt(s.attr, 1) == 0 {
			continue
		}
		e := c.b.Apply1(ir.OpEq, nil, x, c.b.Scalar(x.Type.DType, s.v))
		if out == nil {
			out = e
		} else {
			out = c.b.Apply1(ir.OpOr, nil, out, e)
		}
	}
	if out == nil {
		out = c.b.Full(ir.T(tensor.Bool, x.Type.Shape...), 0) // detecting neither: all false
	}
	return one(out)
}

// activation lowers a floating-point elementwise op built from IR ops by f, which
// gets a constant maker k for x's dtype.
func activation(f func(c *nodeCtx, x *ir.Value, k func(float64) *ir.Value) *ir.Value) lowerFunc {
	return func(c *nodeCtx) ([]*ir.Value, error) {
		x := c.in(0)
		if !x.Type.DType.IsFloat() {
			return nil, fmt.Errorf("%s of %v", c.n.OpType, x.Type.DType)
		}
		return one(f(c, x, func(v float64) *ir.Value { return c.b.Scalar(x.Type.DType, v) }))
	}
}

func where(c *nodeCtx, cond, a, b *ir.Value) *ir.Value {
	return c.b.Apply1(ir.OpWhere, nil, cond, a, b)
}
func gt(c *nodeCtx, a, b *ir.Value) *ir.Value { return c.b.Apply1(ir.OpGt, nil, a, b) }
func lt(c *nodeCtx, a, b *ir.Value) *ir.Value { return c.b.Apply1(ir.OpLt, nil, a, b) }

// elu: x > 0 ? x : α(eˣ − 1).
func actElu(c *nodeCtx, x *ir.Value, k func(float64) *ir.Value) *ir.Value {
	em1 := c.b.Sub(c.b.Unary(ir.OpExp, x), k(1))
	return where(c, gt(c, x, k(0)), x, c.b.Mul(k(float64(float32(c.aFloat("alpha", 1)))), em1))
}

// selu: γ·(x > 0 ? x : α(eˣ − 1)).
func actSelu(c *nodeCtx, x *ir.Value, k func(float64) *ir.Value) *ir.Value {
	alpha := float64(float32(c.aFloat("alpha", 1.67326319217681884765625)))
	gamma := float64(float32(c.aFloat("gamma", 1.05070102214813232421875)))
	em1 := c.b.Mul(k(alpha), c.b.Sub(c.b.Unary(ir.OpExp, x), k(1)))
	return c.b.Mul(k(gamma), where(c, gt(c, x, k(0)), x, em1))
}

// leaky relu: x ≥ 0 ? x : αx.
func actLeakyRelu(c *nodeCtx, x *ir.Value, k func(float64) *ir.Value) *ir.Value {
	return where(c, lt(c, x, k(0)), c.b.Mul(k(float64(float32(c.aFloat("alpha", 0.01)))), x), x)
}

// thresholded relu: x > α ? x : 0.
func actThresholdedRelu(c *nodeCtx, x *ir.Value, k func(float64) *ir.Value) *ir.Value {
	return where(c, gt(c, x, k(float64(float32(c.aFloat("alpha", 1))))), x, k(0))
}

// hard sigmoid: max(0, min(1, αx + β)).
func actHardSigmoid(c *nodeCtx, x *ir.Value, k func(float64) *ir.Value) *ir.Value {
	y := c.b.Add(c.b.Mul(k(float64(float32(c.aFloat("alpha", 0.2)))), x), k(float64(float32(c.aFloat("beta", 0.5)))))
	return c.b.Apply1(ir.OpMax, nil, k(0), c.b.Apply1(ir.OpMin, nil, k(1), y))
}

// hard swish: x · max(0, min(1, x/6 + 1/2)).
func actHardSwish(c *nodeCtx, x *ir.Value, k func(float64) *ir.Value) *ir.Value {
	y := c.b.Add(c.b.Mul(k(1.0/6), x), k(0.5))
	return c.b.Mul(x, c.b.Apply1(ir.OpMax, nil, k(0), c.b.Apply1(ir.OpMin, nil, k(1), y)))
}

// softplus: log(1 + eˣ), as max(x, 0) + log(1 + e^−|x|).
func actSoftplus(c *nodeCtx, x *ir.Value, k func(float64) *ir.Value) *ir.Value {
	t := c.b.Unary(ir.OpLog, c.b.Add(k(1), c.b.Unary(ir.OpExp, c.b.Neg(c.b.Unary(ir.OpAbs, x)))))
	return c.b.Add(c.b.Apply1(ir.OpMax, nil, x, k(0)), t)
}

// softsign: x / (1 + |x|).
func actSoftsign(c *nodeCtx, x *ir.Value, k func(float64) *ir.Value) *ir.Value {
	return c.b.Div(x, c.b.Add(k(1), c.b.Unary(ir.OpAbs, x)))
}

func actSinh(c *nodeCtx, x *ir.Value, k func(float64) *ir.Value) *ir.Value {
	return c.b.Mul(k(0.5), c.b.Sub(c.b.Unary(ir.OpExp, x), c.b.Unary(ir.OpExp, c.b.Neg(x))))
}

func actCosh(c *nodeCtx, x *ir.Value, k func(float64) *ir.Value) *ir.Value {
	return c.b.Mul(k(0.5), c.b.Add(c.b.Unary(ir.OpExp, x), c.b.Unary(ir.OpExp, c.b.Neg(x))))
}

func actTan(c *nodeCtx, x *ir.Value, _ func(float64) *ir.Value) *ir.Value {
	return c.b.Div(c.b.Unary(ir.OpSin, x), c.b.Unary(ir.OpCos, x))
}

// lowerPRelu: x < 0 ? slope·x : x, the slope broadcast.
func lowerPRelu(c *nodeCtx) ([]*ir.Value, error) {
	x, slope := c.in(0), c.in(1)
	if !x.Type.DType.IsFloat() {
		return nil, fmt.Errorf("PRelu of %v", x.Type.DType)
	}
	zero := c.b.Scalar(x.Type.DType, 0)
	return one(where(c, lt(c, x, zero), c.b.Mul(c.b.Cast(slope, x.Type.DType), x), x))
}

// lowerClip is min(max(x, lo), hi) with the bounds present (opset 13 inputs); with
// lo > hi every element becomes hi, as ONNX specifies.
func lowerClip(c *nodeCtx) ([]*ir.Value, error) {
	x := c.in(0)
	if c.has(1) {
		x = c.b.Apply1(ir.OpMax, nil, x, c.b.Cast(c.in(1), x.Type.DType))
	}
	if c.has(2) {
		x = c.b.Apply1(ir.OpMin, nil, x, c.b.Cast(c.in(2), x.Type.DType))
	}
	return one(x)
}

// lowerPad lowers constant-mode Pad: negative pads slice, positive ones concat
// blocks of the constant value (0 when absent) on each side.
func lowerPad(c *nodeCtx) ([]*ir.Value, error) {
	if mode := c.aString("mode", "constant"); mode != "constant" {
		return nil, fmt.Errorf("%w: Pad mode %q", ErrUnsupported, mode)
	}
	x := c.in(0)
	r := x.Type.Rank()
	pads, err := c.constInts(1)
	if err != nil {
		return nil, err
	}
	axes := make([]int64, r)
	for i := range axes {
		axes[i] = int64(i)
	}
	if c.has(3) {
		if axes, err = c.constInts(3); err != nil {
			return nil, err
		}
	}
	if len(pads) != 2*len(axes) {
		return nil, fmt.Errorf("Pad: %d pads for %d axes", len(pads), len(axes))
	}
	begin, end := make([]int64, r), make([]int64, r)
	for i, a := range axes {
		ax, err := ir.AxisIndex(a, r)
		if err != nil {
			return nil, err
		}
		begin[ax], end[ax] = pads[i], pads[len(axes)+i]
	}
	var sa, ss, se, st []int64
	for ax := 0; ax < r; ax++ {
		d := x.Type.Shape[ax]
		if begin[ax] < 0 || end[ax] < 0 {
			s, e := max(-begin[ax], 0), d-max(-end[ax], 0)
			if s > e {
				return nil, fmt.Errorf("Pad: pads %d, %d remove more than dim %d's %d", begin[ax], end[ax], ax, d)
			}
			sa, ss, se, st = append(sa, int64(ax)), append(ss, s), append(se, e), append(st, 1)
		}
	}
	if len(sa) > 0 {
		x = c.b.Apply1(ir.OpSlice, ir.A("axes", sa, "starts", ss, "ends", se, "steps", st), x)
	}
	// The padding is a full, not a constant: a file's pads decide its size, and a
	// constant would hold it at import.
	fill := func(shape []int64) *ir.Value {
		if c.has(2) {
			if cv, err := c.constIn(2); err == nil && cv.Numel() == 1 {
				return c.b.Full(ir.T(x.Type.DType, shape...), cv.Float(0))
			}
			ones := make([]int64, r)
			for i := range ones {
				ones[i] = 1
			}
			return c.b.Expand(c.b.Reshape(c.b.Cast(c.in(2), x.Type.DType), ones...), shape...)
		}
		return c.b.Full(ir.T(x.Type.DType, shape...), 0)
	}
	out := append([]int64{}, x.Type.Shape...)
	for ax := range out {
		out[ax] = addDims(out[ax], max(begin[ax], 0), max(end[ax], 0))
	}
	if _, err := ir.ShapeNumel(out); err != nil {
		return nil, fmt.Errorf("Pad: pads %s make %w", tensor.Brief(pads), err)
	}
	for ax := 0; ax < r; ax++ {
		if begin[ax] <= 0 && end[ax] <= 0 {
			continue
		}
		parts := []*ir.Value{}
		if begin[ax] > 0 {
			s := append([]int64{}, x.Type.Shape...)
			s[ax] = begin[ax]
			parts = append(parts, fill(s))
		}
		parts = append(parts, x)
		if end[ax] > 0 {
			s := append([]int64{}, x.Type.Shape...)
			s[ax] = end[ax]
			parts = append(parts, fill(s))
		}
		x = c.b.Apply1(ir.OpConcat, ir.A("axis", int64(ax)), parts...)
	}
	return one(x)
}

// addDims is the sum of non-negative dims, or -1 where it overflows (a shape check
// then refuses it).
func addDims(ds ...int64) int64 {
	var sum int64
	for _, d := range ds {
		if sum > math.MaxInt64-d {
			return -1
		}
		sum += d
	}
	return sum
}

func lowerConcat(c *nodeCtx) ([]*ir.Value, error) {
	var args []*ir.Value
	for i := range c.n.Inputs {
		if c.has(i) {
			v := c.in(i)
			if v.Type.Numel() == 0 && len(c.n.Inputs) > 1 {
				continue // empty pieces are legal in ONNX and contribute nothing
			}
			args = append(args, v)
		}
	}
	if len(args) == 0 {
		args = append(args, c.in(0))
	}
	axis := c.aInt("axis", 0)
	if _, err := ir.AxisIndex(axis, args[0].Type.Rank()); err != nil {
		return nil, err // also where one input is left and no concat is made
	}
	if len(args) == 1 {
		return one(args[0])
	}
	return one(c.b.Apply1(ir.OpConcat, ir.A("axis", axis), args...))
}

func lowerSplit(c *nodeCtx) ([]*ir.Value, error) {
	x, ax, d, err := c.splitInput()
	if err != nil {
		return nil, err
	}
	var sizes []int64
	switch {
	case c.has(1):
		if sizes, err = c.constInts(1); err != nil {
			return nil, err
		}
	case c.n.Attrs["split"].Kind == AttrInts:
		sizes = c.n.Attrs["split"].Ints
	default:
		k := c.aInt("num_outputs", int64(len(c.n.Outputs)))
		if k <= 0 {
			return nil, fmt.Errorf("num_outputs %d", k)
		}
		// ONNX: ceil(d/k) each, the last one smaller.
		sizes = chunks(d, (d+k-1)/k)
	}
	if len(sizes) != len(c.n.Outputs) {
		return nil, fmt.Errorf("split into %d parts %s for %d outputs", len(sizes), tensor.Brief(sizes),
			len(c.n.Outputs))
	}
	return c.b.Apply(ir.OpSplit, ir.A("axis", int64(ax), "sizes", sizes), x)[:len(sizes)], nil
}

// lowerGather checks indices known at compile time against the axis they index:
// a sequence longer than a learned position table is an error here, naming the
// node, rather than at run time.
func lowerGather(c *nodeCtx) ([]*ir.Value, error) {
	data, idx := c.in(0), c.in(1)
	axis := c.aInt("axis", 0)
	if ax, err := ir.AxisIndex(axis, data.Type.Rank()); err == nil {
		lo, hi, known := indexRange(c, idx)
		if d := data.Type.Shape[ax]; known && (lo < -d || hi >= d) {
			return nil, fmt.Errorf("indices reach %d but %q %v has %d entries on axis %d: "+
				"a sequence longer than that position table?", max(hi, -lo-1), c.n.Inputs[0],
				data.Type.Shape, d, ax)
		}
	}
	return one(c.withPadding(c.b.Apply1(ir.OpGather, ir.A("axis", axis), data, idx), data, idx))
}

// indexRange returns the smallest and largest index of v when they are known at
// compile time: a folded constant or a range.
func indexRange(c *nodeCtx, v *ir.Value) (lo, hi int64, known bool) {
	if v.Def == nil {
		return 0, 0, false
	}
	switch v.Def.Op {
	case ir.OpConstant:
		t := v.Def.AttrTensor("value")
		if t.Numel() == 0 {
			return 0, 0, false
		}
		lo, hi = t.Int(0), t.Int(0)
		for i := 1; i < t.Numel(); i++ {
			lo, hi = min(lo, t.Int(i)), max(hi, t.Int(i))
		}
		return lo, hi, true
	case ir.OpRange:
		n := v.Def.AttrInt("count")
		if n == 0 {
			return 0, 0, false
		}
		start, delta := v.Def.AttrFloat("start"), v.Def.AttrFloat("delta")
		a, b := int64(start), int64(start+float64(n-1)*delta)
		return min(a, b), max(a, b), true
	case ir.OpReshape, ir.OpExpand:
		return indexRange(c, v.Def.Args[0])
	}
	return 0, 0, false
}

// axesOf reads axes from input i (opset >= 13) or the "axes" attribute.
func (c *nodeCtx) axesOf(i int) ([]int64, bool, error) {
	if c.has(i) {
		a, err := c.constInts(i)
		return a, true, err
	}
	a, ok := c.aInts("axes")
	return a, ok, nil
}

func lowerSqueeze(c *nodeCtx) ([]*ir.Value, error) {
	x := c.in(0)
	axes, given, err := c.axesOf(1)
	if err != nil {
		return nil, err
	}
	drop := make([]bool, x.Type.Rank())
	for _, a := range axes {
		ax, err := ir.AxisIndex(a, x.Type.Rank())
		if err != nil {
			return nil, err
		}
		if x.Type.Shape[ax] != 1 {
			return nil, fmt.Errorf("cannot squeeze dim %d of size %d", ax, x.Type.Shape[ax])
		}
		drop[ax] = true
	}
	var shape []int64
	for i, d := range x.Type.Shape {
		if drop[i] || (!given && d == 1) {
			continue
		}
		shape = append(shape, d)
	}
	return one(c.b.Reshape(x, shape...))
}

func lowerUnsqueeze(c *nodeCtx) ([]*ir.Value, error) {
	x := c.in(0)
	axes, _, err := c.axesOf(1)
	if err != nil {
		return nil, err
	}
	rank := x.Type.Rank() + len(axes)
	ins := make([]bool, rank)
	for _, a := range axes {
		ax, err := ir.AxisIndex(a, rank)
		if err != nil {
			return nil, err
		}
		if ins[ax] {
			return nil, fmt.Errorf("axis %d repeated", a)
		}
		ins[ax] = true
	}
	shape := make([]int64, 0, rank)
	j := 0
	for i := 0; i < rank; i++ {
		if ins[i] {
			shape = append(shape, 1)
		} else {
			shape = append(shape, x.Type.Shape[j])
			j++
		}
	}
	return one(c.b.Reshape(x, shape...))
}

func lowerFlatten(c *nodeCtx) ([]*ir.Value, error) {
	x := c.in(0)
	r := x.Type.Rank()
	ax := c.aInt("axis", 1)
	if ax < 0 {
		ax += int64(r)
	}
	if ax < 0 || ax > int64(r) {
		return nil, fmt.Errorf("axis %d out of range for rank %d", c.aInt("axis", 1), r)
	}
	outer := ir.T(0, x.Type.Shape[:ax]...).Numel()
	return one(c.b.Reshape(x, outer, x.Type.Numel()/max(outer, 1)))
}

func lowerShape(c *nodeCtx) ([]*ir.Value, error) {
	x := c.in(0)
	r := int64(x.Type.Rank())
	start, end := c.aInt("start", 0), c.aInt("end", r)
	if start < 0 {
		start += r
	}
	if end < 0 {
		end += r
	}
	start, end = clamp(start, 0, r), clamp(end, 0, r)
	dims := []int64{}
	if end > start {
		dims = append(dims, x.Type.Shape[start:end]...)
	}
	return one(c.b.Const(tensor.FromInts(tensor.I64, []int64{int64(len(dims))}, dims)))
}

func lowerSize(c *nodeCtx) ([]*ir.Value, error) {
	return one(c.b.Const(tensor.Scalar(tensor.I64, float64(c.in(0).Type.Numel()))))
}

func lowerConstantOfShape(c *nodeCtx) ([]*ir.Value, error) {
	shape, err := c.constInts(0)
	if err != nil {
		return nil, err
	}
	if _, err := tensor.Numel(shape); err != nil {
		return nil, err
	}
	dt, v := tensor.F32, 0.0
	if a, ok := c.attr("value"); ok && a.Kind == AttrTensor && a.Tensor.Numel() == 1 {
		dt, v = a.Tensor.DType, a.Tensor.Float(0)
	}
	return one(c.b.Apply1(ir.OpFull, ir.A("value", v, "shape", shape, "dtype", dt)))
}

func lowerConstant(c *nodeCtx) ([]*ir.Value, error) {
	for name, a := range c.n.Attrs {
		switch name {
		case "value":
			return one(c.b.Const(a.Tensor))
		case "value_float":
			return one(c.b.Const(tensor.Scalar(tensor.F32, a.Float)))
		case "value_floats":
			return one(c.b.Const(tensor.FromFloats(tensor.F32, []int64{int64(len(a.Floats))}, a.Floats)))
		case "value_int":
			return one(c.b.Const(tensor.Scalar(tensor.I64, float64(a.Int))))
		case "value_ints":
			return one(c.b.Const(tensor.FromInts(tensor.I64, []int64{int64(len(a.Ints))}, a.Ints)))
		}
	}
	return nil, fmt.Errorf("%w: Constant without a supported value attribute", ErrUnsupported)
}

func lowerRange(c *nodeCtx) ([]*ir.Value, error) {
	var v [3]*tensor.Tensor
	for i := range v {
		t, err := c.constIn(i)
		if err != nil {
			return nil, err
		}
		if t.Numel() != 1 {
			return nil, fmt.Errorf("Range input %d must be a scalar", i)
		}
		v[i] = t
	}
	start, limit, delta := v[0].Float(0), v[1].Float(0), v[2].Float(0)
	if delta == 0 {
		return nil, fmt.Errorf("Range with delta 0")
	}
	n := int64(math.Max(math.Ceil((limit-start)/delta), 0))
	if _, err := tensor.Numel([]int64{n}); err != nil {
		return nil, err
	}
	return one(c.b.Apply1(ir.OpRange, ir.A("start", start, "delta", delta, "count", n, "dtype", v[0].DType)))
}

func lowerTile(c *nodeCtx) ([]*ir.Value, error) {
	r, err := c.constInts(1)
	if err != nil {
		return nil, err
	}
	return one(c.b.Apply1(ir.OpTile, ir.A("repeats", r), c.in(0)))
}

func lowerCumSum(c *nodeCtx) ([]*ir.Value, error) {
	ax, err := c.constInts(1)
	if err != nil {
		return nil, err
	}
	if len(ax) != 1 {
		return nil, fmt.Errorf("CumSum axis must be a scalar")
	}
	return one(c.b.Apply1(ir.OpCumSum, ir.A("axis", ax[0], "exclusive", c.aInt("exclusive", 0) != 0,
		"reverse", c.aInt("reverse", 0) != 0), c.in(0)))
}

func lowerTrilu(c *nodeCtx) ([]*ir.Value, error) {
	k := int64(0)
	if c.has(1) {
		kk, err := c.constInts(1)
		if err != nil {
			return nil, err
		}
		if len(kk) != 1 {
			return nil, fmt.Errorf("Trilu k must be a scalar")
		}
		k = kk[0]
	}
	return one(c.b.Apply1(ir.OpTrilu, ir.A("upper", c.aInt("upper", 1) != 0, "k", k), c.in(0)))
}

// reduce lowers ReduceX; from opset `inputSince` the axes come as an input.
func reduce(op ir.Op, inputSince int64) lowerFunc {
	return func(c *nodeCtx) ([]*ir.Value, error) {
		x := c.in(0)
		axes, given, err := c.axesOf(1)
		if err != nil {
			return nil, err
		}
		keep := c.aInt("keepdims", 1) != 0
		if (!given || len(axes) == 0) && c.aInt("noop_with_empty_axes", 0) != 0 {
			return one(x)
		}
		as := ir.A("keepdims", keep)
		if given && len(axes) > 0 {
			as = as.With("axes", axes)
		}
		return one(c.b.Apply1(op, as, x))
	}
}

// lowerLayerNorm lowers LayerNormalization to layer_norm. Its optional Mean and
// InvStdDev outputs (x's shape with the normalised dims kept as 1) are computed
// beside it: the mean and 1/sqrt(var+eps) over dims axis..rank-1.
func lowerLayerNorm(c *nodeCtx) ([]*ir.Value, error) {
	x := c.in(0)
	axis := c.aInt("axis", -1)
	eps := float64(float32(c.aFloat("epsilon", 1e-5)))
	args := []*ir.Value{x}
	if c.has(1) {
		args = append(args, c.in(1))
		if c.has(2) {
			args = append(args, c.in(2))
		}
	}
	y := c.b.Apply1(ir.OpLayerNorm, ir.A("axis", axis, "eps", eps), args...)
	if !c.usedLater(1) && !c.usedLater(2) {
		return one(y)
	}
	ax, err := ir.AxisIndex(axis, x.Type.Rank())
	if err != nil {
		return nil, err
	}
	var axes []int64
	for a := ax; a < x.Type.Rank(); a++ {
		axes = append(axes, int64(a))
	}
	mean := c.b.Apply1(ir.OpReduceMean, ir.A("axes", axes, "keepdims", true), x)
	d := c.b.Sub(x, mean)
	v := c.b.Apply1(ir.OpReduceMean, ir.A("axes", axes, "keepdims", true), c.b.Mul(d, d))
	inv := c.b.Unary(ir.OpRsqrt, c.b.Add(v, c.b.Scalar(v.Type.DType, eps)))
	return []*ir.Value{y, mean, inv}, nil
}

// lowerNeg: integer negation is 0 − x (the IR's neg is floating-point).
func lowerNeg(c *nodeCtx) ([]*ir.Value, error) {
	x := c.in(0)
	if x.Type.DType.IsFloat() {
		return one(c.b.Neg(x))
	}
	return one(c.b.Sub(c.b.Scalar(x.Type.DType, 0), x))
}

// lowerMod lowers integer Mod from truncating division: r = a − (a/b)·b has the
// dividend's sign (fmod=1); with fmod=0 (the default) a nonzero r whose sign
// differs from b's is moved by b, giving the divisor's sign as Python's %.
// Floating-point Mod is not supported.
func lowerMod(c *nodeCtx) ([]*ir.Value, error) {
	a, bv := c.in(0), c.in(1)
	dt := a.Type.DType
	if !dt.IsInt() || bv.Type.DType != dt {
		return nil, fmt.Errorf("%w: Mod of %v and %v (integers of one type only)", ErrUnsupported, dt, bv.Type.DType)
	}
	b := c.b
	r := b.Sub(a, b.Mul(b.Div(a, bv), bv))
	if c.aInt("fmod", 0) != 0 {
		return one(r)
	}
	zero := b.Scalar(dt, 0)
	differ := b.Apply1(ir.OpXor, nil, b.Apply1(ir.OpLt, nil, r, zero), b.Apply1(ir.OpLt, nil, bv, zero))
	move := b.Apply1(ir.OpAnd, nil, b.Apply1(ir.OpNot, nil, b.Apply1(ir.OpEq, nil, r, zero)), differ)
	return one(b.Apply1(ir.OpWhere, nil, move, b.Add(r, bv), r))
}

func square(b *ir.Builder, x *ir.Value) *ir.Value { return b.Mul(x, x) }

// reduceComposite lowers a Reduce* op that is pre, then reduce_sum, then post
// (nil: none). With noop_with_empty_axes and no axes, nothing is reduced, as in
// ONNX's reference: post(pre(x)).
func reduceComposite(pre, post func(b *ir.Builder, x *ir.Value) *ir.Value) lowerFunc {
	return func(c *nodeCtx) ([]*ir.Value, error) {
		x := c.in(0)
		if pre != nil {
			x = pre(c.b, x)
		}
		axes, given, err := c.axesOf(1)
		if err != nil {
			return nil, err
		}
		y := x
		if given && len(axes) > 0 || c.aInt("noop_with_empty_axes", 0) == 0 {
			as := ir.A("keepdims", c.aInt("keepdims", 1) != 0)
			if given && len(axes) > 0 {
				as = as.With("axes", axes)
			}
			y = c.b.Apply1(ir.OpReduceSum, as, x)
		}
		if post != nil {
			y = post(c.b, y)
		}
		return one(y)
	}
}

// lowerReduceLogSumExp is m + log(Σ exp(x − m)) with m the max over the axes,
// clamped to the finite range so that an empty or all −inf slice gives −inf.
func lowerReduceLogSumExp(c *nodeCtx) ([]*ir.Value, error) {
	x := c.in(0)
	if !x.Type.DType.IsFloat() {
		return nil, fmt.Errorf("%w: ReduceLogSumExp of %v", ErrUnsupported, x.Type.DType)
	}
	axes, given, err := c.axesOf(1)
	if err != nil {
		return nil, err
	}
	if (!given || len(axes) == 0) && c.aInt("noop_with_empty_axes", 0) != 0 {
		return one(x)
	}
	keep := ir.A("keepdims", true)
	if given && len(axes) > 0 {
		keep = keep.With("axes", axes)
	}
	b, dt := c.b, x.Type.DType
	m := b.Apply1(ir.OpReduceMax, keep, x)
	m = b.Apply1(ir.OpMin, nil, b.Apply1(ir.OpMax, nil, m, b.Scalar(dt, -math.MaxFloat32)), b.Scalar(dt, math.MaxFloat32))
	s := b.Apply1(ir.OpReduceSum, keep, b.Unary(ir.OpExp, b.Sub(x, m)))
	y := b.Add(b.Unary(ir.OpLog, s), m)
	if c.aInt("keepdims", 1) == 0 {
		var shape []int64
		for i, d := range x.Type.Shape {
			if reducedAxis(axes, i, x.Type.Rank()) {
				continue
			}
			shape = append(shape, d)
		}
		y = b.Reshape(y, shape...)
	}
	return one(y)
}

// lowerReduceProd lowers floating-point ReduceProd without a product op: 0 where
// the slice holds a zero, else cos(π·#negatives)·exp(Σ log|x|) (the sign is ±1 to
// rounding; an empty slice gives 1). Its gradient is prod/x, exact except at a
// zero, where it is 0 (the product of the other elements would be exact).
func lowerReduceProd(c *nodeCtx) ([]*ir.Value, error) {
	x := c.in(0)
	dt := x.Type.DType
	if !dt.IsFloat() {
		return nil, fmt.Errorf("%w: ReduceProd of %v (floating-point only)", ErrUnsupported, dt)
	}
	axes, given, err := c.axesOf(1)
	if err != nil {
		return nil, err
	}
	if (!given || len(axes) == 0) && c.aInt("noop_with_empty_axes", 0) != 0 {
		return one(x)
	}
	as := ir.A("keepdims", c.aInt("keepdims", 1) != 0)
	if given && len(axes) > 0 {
		as = as.With("axes", axes)
	}
	b := c.b
	zero, one_ := b.Scalar(dt, 0), b.Scalar(dt, 1)
	isZero := b.Apply1(ir.OpEq, nil, x, zero)
	count := func(cond *ir.Value) *ir.Value { return b.Apply1(ir.OpReduceSum, as, b.Cast(cond, dt)) }
	logs := b.Apply1(ir.OpReduceSum, as, b.Unary(ir.OpLog, b.Apply1(ir.OpWhere, nil, isZero, one_, b.Unary(ir.OpAbs, x))))
	sign := b.Unary(ir.OpCos, b.Mul(count(b.Apply1(ir.OpLt, nil, x, zero)), b.Scalar(dt, math.Pi)))
	anyZero := b.Apply1(ir.OpGt, nil, count(isZero), zero)
	return one(b.Apply1(ir.OpWhere, nil, anyZero, zero, b.Mul(sign, b.Unary(ir.OpExp, logs))))
}

// reducedAxis reports whether dim i is among axes (all dims when axes is empty).
func reducedAxis(axes []int64, i, rank int) bool {
	if len(axes) == 0 {
		return true
	}
	for _, a := range axes {
		if ax, err := ir.AxisIndex(a, rank); err == nil && ax == i {
			return true
		}
	}
	return false
}

// usedLater reports whether output i of the node is read by any node or output.
func (c *nodeCtx) usedLater(i int) bool {
	if i >= len(c.n.Outputs) || c.n.Outputs[i] == "" {
		return false
	}
	name := c.n.Outputs[i]
	g := &c.l.m.Graph
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			if in == name {
				return true
			}
		}
	}
	for _, o := range g.Outputs {
		if o.Name == name {
			return true
		}
	}
	return false
}

func lowerRMSNorm(c *nodeCtx) ([]*ir.Value, error) {
	args := []*ir.Value{c.in(0)}
	if c.has(1) {
		args = append(args, c.in(1))
	}
	return one(c.b.Apply1(ir.OpRMSNorm, ir.A("axis", c.aInt("axis", -1),
		"eps", float64(float32(c.aFloat("epsilon", 1e-5)))), args...))
}

// lowerDropout: Dropout is the identity in the exported (eval-mode) graph, and its
// mask output all true. In training mode (a true training_mode input) with a
// nonzero ratio it draws a random mask, which lcc does not model.
func lowerDropout(c *nodeCtx) ([]*ir.Value, error) {
	if c.has(2) {
		mode, err := c.constIn(2)
		if err != nil {
			return nil, err
		}
		if mode.Numel() == 1 && mode.Int(0) != 0 {
			ratio := 0.5
			if c.has(1) {
				r, err := c.constIn(1)
				if err != nil {
					return nil, err
				}
				ratio = r.Float(0)
			}
			if ratio != 0 {
				return nil, fmt.Errorf("%w: Dropout in training mode (ratio %g draws a random mask)", ErrUnsupported, ratio)
			}
		}
	}
	x := c.in(0)
	if !c.usedLater(1) {
		return one(x)
	}
	return []*ir.Value{x, c.b.Full(ir.T(tensor.Bool, x.Type.Shape...), 1)}, nil
}

// lowerAttention lowers the opset-23 Attention op: Q, K, V as [B,H,T,D] (or
// [B,T,H·D] with q_num_heads/kv_num_heads) to lcc's [B,T,H,D] attention, a causal
// sliding window (left_window_size) included; what the op does not express
// lowers explicitly (explicitAttention).
func lowerAttention(c *nodeCtx) ([]*ir.Value, error) {
	if explicitAttention(c) {
		return lowerAttentionExplicit(c)
	}
	q, k, v := c.in(0), c.in(1), c.in(2)
	three := q.Type.Rank() == 3
	toBTHD := func(x *ir.Value, heads int64) (*ir.Value, error) {
		if three {
			if heads <= 0 || x.Type.Shape[2]%heads != 0 {
				return nil, fmt.Errorf("3-D Attention input %v needs q_num_heads/kv_num_heads dividing its last dim", x.Type)
			}
			s := x.Type.Shape
			return c.b.Reshape(x, s[0], s[1], heads, s[2]/heads), nil
		}
		if x.Type.Rank() != 4 {
			return nil, fmt.Errorf("Attention input %v must be rank 3 or 4", x.Type)
		}
		return c.b.Transpose(x, 0, 2, 1, 3), nil
	}
	var err error
	if q, err = toBTHD(q, c.aInt("q_num_heads", 0)); err != nil {
		return nil, err
	}
	if k, err = toBTHD(k, c.aInt("kv_num_heads", 0)); err != nil {
		return nil, err
	}
	if v, err = toBTHD(v, c.aInt("kv_num_heads", 0)); err != nil {
		return nil, err
	}
	d := q.Type.Shape[3]
	scale := c.aFloat("scale", 0)
	if _, ok := c.attr("scale"); !ok {
		scale = 1 / math.Sqrt(float64(d))
	}
	args := []*ir.Value{q, k, v}
	if c.has(3) {
		args = append(args, c.in(3))
	}
	attrs := ir.A("causal", c.aInt("is_causal", 0) != 0, "scale", scale)
	if w, _ := fusedWindow(c); w > 0 {
		attrs = attrs.With("window", w)
	}
	o := c.b.Apply(ir.OpAttention, attrs, args...)[0]
	if three {
		s := o.Type.Shape
		return one(c.b.Reshape(o, s[0], s[1], s[2]*s[3]))
	}
	return one(c.b.Transpose(o, 0, 2, 1, 3))
}

// lowerLoss lowers SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss: scores
// [N, C, d...] and labels [N, d...] become rows [N·d, C] and [N·d].
func lowerLoss(op ir.Op) lowerFunc {
	return func(c *nodeCtx) ([]*ir.Value, error) {
		x, y := c.in(0), c.in(1)
		if x.Type.Rank() < 2 {
			return nil, fmt.Errorf("scores %v need rank >= 2", x.Type)
		}
		var logProb *ir.Value
		if c.usedLater(1) {
			if op != ir.OpSoftmaxCrossEntropy {
				return nil, fmt.Errorf("%w: output 1", ErrUnsupported)
			}
			// SoftmaxCrossEntropyLoss's log_prob: log_softmax over the classes.
			logProb = c.b.Apply1(ir.OpLogSoftmax, ir.A("axis", 1), x)
		}
		classes := x.Type.Shape[1]
		if x.Type.Rank() > 2 {
			perm := []int64{0}
			for i := 2; i < x.Type.Rank(); i++ {
				perm = append(perm, int64(i))
			}
			x = c.b.Transpose(x, append(perm, 1)...)
		}
		rows := x.Type.Numel() / max(classes, 1)
		x = c.b.Reshape(x, rows, classes)
		y = c.b.Reshape(y, rows)
		reduction := c.aString("reduction", "mean")
		as := ir.A("reduction", reduction)
		ignore, hasIgnore := int64(0), false
		if a, ok := c.attr("ignore_index"); ok && a.Kind == AttrInt {
			as = as.With("ignore_index", a.Int)
			ignore, hasIgnore = a.Int, true
		}
		var loss *ir.Value
		if !c.has(2) {
			loss = c.b.Apply1(op, as, x, y)
		} else {
			// Class weights: each row's loss times w[label] (0 for an ignored row);
			// mean divides by the sum of those weights.
			switch reduction {
			case "none", "sum", "mean":
			default:
				return nil, fmt.Errorf("reduction %q", reduction)
			}
			w := c.in(2)
			if w.Type.Rank() != 1 || w.Type.Shape[0] != classes {
				return nil, fmt.Errorf("class weights %v for %d classes", w.Type, classes)
			}
			per := c.b.Apply1(op, as.With("reduction", "none"), x, y)
			idx := y
			var kept *ir.Value
			if hasIgnore {
				ign := c.b.Scalar(y.Type.DType, float64(ignore))
				kept = c.b.Apply1(ir.OpNot, nil, c.b.Apply1(ir.OpEq, nil, y, ign))
				idx = c.b.Apply1(ir.OpWhere, nil, kept, y, c.b.Scalar(y.Type.DType, 0))
			}
			wy := c.b.Apply1(ir.OpGather, ir.A("axis", int64(0)), w, idx)
			if kept != nil {
				wy = c.b.Apply1(ir.OpWhere, nil, kept, wy, c.b.Scalar(wy.Type.DType, 0))
			}
			loss = c.b.Mul(per, wy)
			if reduction != "none" {
				loss = c.b.ReduceSum(loss, false)
				if reduction == "mean" {
					loss = c.b.Div(loss, c.b.ReduceSum(wy, false))
				}
			}
		}
		if reduction == "none" && len(y.Type.Shape) > 0 {
			shape := c.in(1).Type.Shape
			loss = c.b.Reshape(loss, shape...)
		}
		if logProb != nil {
			return []*ir.Value{loss, logProb}, nil
		}
		return one(loss)
	}
}
