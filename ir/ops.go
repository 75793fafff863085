package ir

import (
	"fmt"
	"slices"

	"github.com/lcc-dev/lcc/tensor"
)

// Op is an operation code; its properties live in the table below.
type Op uint16

// InferFunc computes a node's result types from its argument types and
// attributes. It returns an error, never panics, on bad arguments.
type InferFunc func(n *Node) ([]Type, error)

// GradFunc emits, with b positioned after the forward node n, the vector-Jacobian
// product of n: given the cotangents dys of n's results (nil where a result has
// none), it returns one cotangent per argument (nil where an argument gets none).
type GradFunc func(b *Builder, n *Node, dys []*Value) []*Value

// AttrSpec declares one attribute an op accepts.
type AttrSpec struct {
	Name string
	Kind AttrKind
}

// OpInfo is one row of the op table.
type OpInfo struct {
	Name string
	// MinArgs and MaxArgs bound the argument count; MaxArgs < 0 means variadic.
	MinArgs, MaxArgs int
	Attrs            []AttrSpec
	// Defaults holds the value of each attribute that is not zero when absent
	// (axis=-1 of softmax, eps=1e-5 of the norms, reduction="mean" of the losses).
	// It is the one place a default is written: Node.AttrInt and its siblings read
	// through it, and a table test checks every entry against Attrs.
	Defaults Attrs
	Infer    InferFunc
	// Grad is the op's VJP rule; NoGrad marks ops that have none on purpose
	// (integer and boolean results, constants). A table test requires one or the other.
	Grad   GradFunc
	NoGrad bool
	// ONNX is the standard ONNX op equal to this one ("" for none; onnx_names.go).
	ONNX string
	// FLOPs counts a node's floating-point operations (flops.go).
	FLOPs FLOPsFunc
	// Elementwise ops map each output element from the elements at the same
	// (broadcast) index of their arguments; the fusion pass groups them.
	Elementwise bool
}

// The ops. The comment on each shows its text form.
const (
	OpInvalid Op = iota

	// %y = constant() {value=dense<f32[2]: 1, 2>} : f32[2]
	OpConstant
	// %y = full() {value=0} : f32[4,4]   (every element equal; never materialised)
	OpFull
	// %y = range() {start=0, delta=1} : i64[16]
	OpRange

	// Unary elementwise: %y = exp(%x) : f32[...]
	OpNeg
	OpExp
	OpLog
	OpSqrt
	OpRsqrt
	OpRecip
	OpTanh
	OpErf
	OpSigmoid
	OpRelu
	OpAbs
	OpCos
	OpSin
	OpSilu
	OpGelu // {tanh} selects the tanh approximation
	OpNot
	OpIsNaN
	OpCast // %y = cast(%x) {to=f32} : f32[...]

	// Binary elementwise with numpy broadcasting: %z = add(%x, %y) : f32[...]
	OpAdd
	OpSub
	OpMul
	OpDiv
	OpPow
	OpMax
	OpMin
	OpEq
	OpLt
	OpLe
	OpGt
	OpGe
	OpAnd
	OpOr
	OpXor
	// %y = where(%cond, %a, %b) : f32[...]
	OpWhere

	// Reductions: %y = reduce_sum(%x) {axes=[-1], keepdims} : f32[2,16,1]
	OpReduceSum
	OpReduceMean
	OpReduceMax
	OpReduceMin

	// %z = matmul(%a, %b) {transpose_b} : f32[2,16,64]  (batched, broadcast batch dims)
	OpMatMul

	// Data movement.
	OpReshape        // {shape=[2,16,4,16]}
	OpTranspose      // {perm=[0,2,1,3]}
	OpExpand         // {shape=[...]}: numpy broadcast to shape
	OpSlice          // {axes, starts, ends, steps}: normalised, in range
	OpConcat         // {axis}
	OpSplit          // {axis, sizes}: one result per size
	OpGather         // (data, indices) {axis}
	OpGatherElements // (data, indices) {axis}
	OpGatherND       // (data, indices) {batch_dims}
	OpTile           // {repeats}
	OpCumSum         // {axis, exclusive, reverse}
	OpTrilu          // {upper, k}: keep the lower (or upper) triangle of the last two dims
	// %y = scatter_add(%x, %indices) {axis=0, size=512}: the transpose of gather
	OpScatterAdd

	// Composite ops.
	OpSoftmax    // {axis}
	OpLogSoftmax // {axis}
	OpLayerNorm  // (x, [scale], [bias]) {axis, eps}: normalise dims axis..rank-1
	// %dx, %dscale, %dbias = layer_norm_grad(%x, %scale, %bias, %dy) {axis, eps}; bias optional
	OpLayerNormGrad
	OpRMSNorm // (x, [scale]) {axis, eps}
	// %dx, %dscale = rms_norm_grad(%x, %scale, %dy) {axis, eps}; %dx = rms_norm_grad(%x, %dy)
	OpRMSNormGrad
	// %o, %lse = attention(%q, %k, %v, [%mask]) {causal, scale=0.125} : f32[B,T,H,D], f32[B,H,T]
	OpAttention
	// %o, %lse = dilated_attention(%q, %k, %v) {segments, dilations, offsets, causal, scale}
	OpDilatedAttention
	// %loss = softmax_cross_entropy(%logits, %labels) {ignore_index=-100, reduction="mean"}
	OpSoftmaxCrossEntropy
	// %loss = nll_loss(%logprobs, %labels) {ignore_index=-100, reduction="mean"}
	OpNLLLoss
	// %dq, %dk, %dv = attention_grad(%q, %k, %v, %o, %lse, %do, [%mask]) {causal, scale}
	OpAttentionGrad
	// %dq, %dk, %dv = dilated_attention_grad(%q, %k, %v, %o, %lse, %do) {segments, ...}
	OpDilatedAttentionGrad

	// %loss = fused_linear_cross_entropy(%h, %w, %labels) {ignore_index=-100, reduction="mean"}
	OpFusedLinearCrossEntropy
	// %dh, %dw = fused_linear_cross_entropy_grad(%h, %w, %labels, %dloss) {ignore_index=-100}
	OpFusedLinearCrossEntropyGrad

	// Collectives and sequence-parallel attention (ops_collective.go).
	OpAllGather
	OpReduceScatter
	OpAllReduce
	OpAllToAll
	OpRingShift
	OpShardPositions
	OpRingAttention
	OpRingAttentionGrad
	OpShardedDilatedAttention
	OpShardedDilatedAttentionGrad

	// Activation offload to pinned host memory (ops_offload.go).
	OpOffload
	OpPrefetch

	// The identity whose gradient is zero (ops_stop_gradient.go).
	OpStopGradient

	// A group of elementwise ops as one node (ops_fused_elementwise.go).
	OpFusedElementwise

	// New ops go above this line; their rows may live in the file of their feature.
	numOps
)

var opTable [numOps]OpInfo

// Info returns op's row of the op table.
func (op Op) Info() *OpInfo {
	if op == OpInvalid || op >= numOps {
		panic(fmt.Sprintf("lcc: BUG: no op %d", op))
	}
	return &opTable[op]
}

func (op Op) String() string {
	if op == OpInvalid || op >= numOps || opTable[op].Name == "" {
		return fmt.Sprintf("op(%d)", uint16(op))
	}
	return opTable[op].Name
}

// LookupOp finds an op by its text name.
func LookupOp(name string) (Op, bool) {
	op, ok := opsByName[name]
	return op, ok
}

// AllOps lists every op in table order.
func AllOps() []Op {
	var ops []Op
	for op := OpInvalid + 1; op < numOps; op++ {
		ops = append(ops, op)
	}
	return ops
}

var opsByName = map[string]Op{}

// def installs op's row, with its VJP rule from gradRules and its FLOPs rule from
// flopRules (package-level maps, so initialised before any init function runs).
func def(op Op, info OpInfo) {
	if rule, ok := gradRules[op]; ok {
		info.Grad = rule
	}
	info.FLOPs = flopRules[op]
	info.ONNX = onnxNames[op]
	opTable[op] = info
	opsByName[info.Name] = op
}

// defaultNormEps is the eps of layer_norm and rms_norm without the attribute
// (ONNX's and PyTorch's default).
const defaultNormEps = 1e-5

var (
	axisAttr  = []AttrSpec{{"axis", AttrInt}}
	reduceAt  = []AttrSpec{{"axes", AttrInts}, {"keepdims", AttrBool}}
	lossAt    = []AttrSpec{{"ignore_index", AttrInt}, {"reduction", AttrString}}
	normAt    = []AttrSpec{{"axis", AttrInt}, {"eps", AttrFloat}}
	attnAt    = []AttrSpec{{"causal", AttrBool}, {"scale", AttrFloat}, {"docs", AttrBool}, {"window", AttrInt}}
	dilatedAt = []AttrSpec{{"segments", AttrInts}, {"dilations", AttrInts},
		{"offsets", AttrString}, {"causal", AttrBool}, {"scale", AttrFloat}, {"docs", AttrBool}}

	// Shared defaults. A loss without ignore_index ignores no label.
	lastAxis     = A("axis", -1)
	normDefaults = A("axis", -1, "eps", defaultNormEps)
	lossDefaults = A("reduction", "mean")
	dilatedDefs  = A("offsets", OffsetsPaper)
)

func init() {
	def(OpConstant, OpInfo{Name: "constant", Attrs: []AttrSpec{{"value", AttrTensor}},
		Infer: inferConstant, NoGrad: true})
	def(OpFull, OpInfo{Name: "full", Attrs: []AttrSpec{{"value", AttrFloat},
		{"shape", AttrInts}, {"dtype", AttrDType}}, Defaults: A("dtype", tensor.F32),
		Infer: inferFull, NoGrad: true})
	def(OpRange, OpInfo{Name: "range", Attrs: []AttrSpec{{"start", AttrFloat},
		{"delta", AttrFloat}, {"count", AttrInt}, {"dtype", AttrDType}},
		Defaults: A("delta", 1.0, "dtype", tensor.I64), Infer: inferRange, NoGrad: true})

	for _, u := range []struct {
		op   Op
		name string
	}{{OpNeg, "neg"}, {OpExp, "exp"}, {OpLog, "log"}, {OpSqrt, "sqrt"}, {OpRsqrt, "rsqrt"},
		{OpRecip, "recip"}, {OpTanh, "tanh"}, {OpErf, "erf"}, {OpSigmoid, "sigmoid"},
		{OpRelu, "relu"}, {OpAbs, "abs"}, {OpCos, "cos"}, {OpSin, "sin"}, {OpSilu, "silu"}} {
		def(u.op, OpInfo{Name: u.name, MinArgs: 1, MaxArgs: 1, Infer: inferFloatUnary,
			Elementwise: true})
	}
	def(OpGelu, OpInfo{Name: "gelu", MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{"tanh", AttrBool}}, Infer: inferFloatUnary, Elementwise: true})
	def(OpNot, OpInfo{Name: "not", MinArgs: 1, MaxArgs: 1, Infer: inferNot, NoGrad: true,
		Elementwise: true})
	def(OpIsNaN, OpInfo{Name: "isnan", MinArgs: 1, MaxArgs: 1, Infer: inferIsNaN,
		NoGrad: true, Elementwise: true})
	def(OpCast, OpInfo{Name: "cast", MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{"to", AttrDType}}, Infer: inferCast, Elementwise: true})

	for _, b := range []struct {
		op   Op
		name string
	}{{OpAdd, "add"}, {OpSub, "sub"}, {OpMul, "mul"}, {OpDiv, "div"}, {OpPow, "pow"},
		{OpMax, "max"}, {OpMin, "min"}} {
		def(b.op, OpInfo{Name: b.name, MinArgs: 2, MaxArgs: 2, Infer: inferArith,
			Elementwise: true})
	}
	for _, b := range []struct {
		op   Op
		name string
	}{{OpEq, "eq"}, {OpLt, "lt"}, {OpLe, "le"}, {OpGt, "gt"}, {OpGe, "ge"}} {
		def(b.op, OpInfo{Name: b.name, MinArgs: 2, MaxArgs: 2, Infer: inferCompare,
			NoGrad: true, Elementwise: true})
	}
	for _, b := range []struct {
		op   Op
		name string
	}{{OpAnd, "and"}, {OpOr, "or"}, {OpXor, "xor"}} {
		def(b.op, OpInfo{Name: b.name, MinArgs: 2, MaxArgs: 2, Infer: inferLogic,
			NoGrad: true, Elementwise: true})
	}
	def(OpWhere, OpInfo{Name: "where", MinArgs: 3, MaxArgs: 3, Infer: inferWhere,
		Elementwise: true})

	def(OpReduceSum, OpInfo{Name: "reduce_sum", MinArgs: 1, MaxArgs: 1, Attrs: reduceAt,
		Infer: inferReduce})
	def(OpReduceMean, OpInfo{Name: "reduce_mean", MinArgs: 1, MaxArgs: 1, Attrs: reduceAt,
		Infer: inferReduce})
	def(OpReduceMax, OpInfo{Name: "reduce_max", MinArgs: 1, MaxArgs: 1, Attrs: reduceAt,
		Infer: inferReduce})
	def(OpReduceMin, OpInfo{Name: "reduce_min", MinArgs: 1, MaxArgs: 1, Attrs: reduceAt,
		Infer: inferReduce})

	def(OpMatMul, OpInfo{Name: "matmul", MinArgs: 2, MaxArgs: 2,
		Attrs: []AttrSpec{{"transpose_a", AttrBool}, {"transpose_b", AttrBool}},
		Infer: inferMatMul})

	def(OpReshape, OpInfo{Name: "reshape", MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{"shape", AttrInts}}, Infer: inferReshape})
	def(OpTranspose, OpInfo{Name: "transpose", MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{"perm", AttrInts}}, Infer: inferTranspose})
	def(OpExpand, OpInfo{Name: "expand", MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{"shape", AttrInts}}, Infer: inferExpand})
	def(OpSlice, OpInfo{Name: "slice", MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{"axes", AttrInts}, {"starts", AttrInts}, {"ends", AttrInts},
			{"steps", AttrInts}}, Infer: inferSlice})
	def(OpConcat, OpInfo{Name: "concat", MinArgs: 1, MaxArgs: -1, Attrs: axisAttr,
		Infer: inferConcat})
	def(OpSplit, OpInfo{Name: "split", MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{"axis", AttrInt}, {"sizes", AttrInts}}, Infer: inferSplit})
	def(OpGather, OpInfo{Name: "gather", MinArgs: 2, MaxArgs: 2, Attrs: axisAttr,
		Infer: inferGather})
	def(OpGatherElements, OpInfo{Name: "gather_elements", MinArgs: 2, MaxArgs: 2,
		Attrs: axisAttr, Infer: inferGatherElements})
	def(OpGatherND, OpInfo{Name: "gather_nd", MinArgs: 2, MaxArgs: 2,
		Attrs: []AttrSpec{{"batch_dims", AttrInt}}, Infer: inferGatherND})
	def(OpTile, OpInfo{Name: "tile", MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{"repeats", AttrInts}}, Infer: inferTile})
	def(OpCumSum, OpInfo{Name: "cumsum", MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{"axis", AttrInt}, {"exclusive", AttrBool}, {"reverse", AttrBool}},
		Infer: withAxis(inferSame)})
	def(OpTrilu, OpInfo{Name: "trilu", MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{"upper", AttrBool}, {"k", AttrInt}}, Infer: inferTrilu})
	def(OpScatterAdd, OpInfo{Name: "scatter_add", MinArgs: 2, MaxArgs: 2,
		Attrs: []AttrSpec{{"axis", AttrInt}, {"size", AttrInt}}, Infer: inferScatterAdd})

	def(OpSoftmax, OpInfo{Name: "softmax", MinArgs: 1, MaxArgs: 1, Attrs: axisAttr,
		Defaults: lastAxis, Infer: withAxis(inferFloatUnary)})
	def(OpLogSoftmax, OpInfo{Name: "log_softmax", MinArgs: 1, MaxArgs: 1, Attrs: axisAttr,
		Defaults: lastAxis, Infer: withAxis(inferFloatUnary)})
	def(OpLayerNorm, OpInfo{Name: "layer_norm", MinArgs: 1, MaxArgs: 3, Attrs: normAt,
		Defaults: normDefaults, Infer: inferNorm})
	def(OpRMSNorm, OpInfo{Name: "rms_norm", MinArgs: 1, MaxArgs: 2, Attrs: normAt,
		Defaults: normDefaults, Infer: inferNorm})
	// The fourth operand of attention is its mask, or with docs its doc starts (docs.go).
	def(OpAttention, OpInfo{Name: "attention", MinArgs: 3, MaxArgs: 4,
		Attrs: attnAt, Infer: inferAttention})
	def(OpDilatedAttention, OpInfo{Name: "dilated_attention", MinArgs: 3, MaxArgs: 4,
		Attrs: dilatedAt, Defaults: dilatedDefs, Infer: inferDilatedAttention})
	def(OpAttentionGrad, OpInfo{Name: "attention_grad", MinArgs: 6, MaxArgs: 7,
		Attrs: attnAt, Infer: inferAttentionGrad, NoGrad: true})
	def(OpDilatedAttentionGrad, OpInfo{Name: "dilated_attention_grad", MinArgs: 6, MaxArgs: 7,
		Attrs: dilatedAt, Defaults: dilatedDefs, Infer: inferDilatedAttentionGrad, NoGrad: true})
	def(OpSoftmaxCrossEntropy, OpInfo{Name: "softmax_cross_entropy", MinArgs: 2, MaxArgs: 2,
		Attrs: lossAt, Defaults: lossDefaults, Infer: inferLoss})
	def(OpNLLLoss, OpInfo{Name: "nll_loss", MinArgs: 2, MaxArgs: 2, Attrs: lossAt,
		Defaults: lossDefaults, Infer: inferLoss})
}

// withAxis is infer for an op whose axis attribute must index its first argument:
// a kernel never sees an axis out of range.
func withAxis(infer func(*Node) ([]Type, error)) func(*Node) ([]Type, error) {
	return func(n *Node) ([]Type, error) {
		if _, err := AxisIndex(n.AttrInt("axis"), n.Args[0].Type.Rank()); err != nil {
			return nil, err
		}
		return infer(n)
	}
}

// AxisIndex normalises a possibly negative axis for a rank, or reports it out of range.
func AxisIndex(axis int64, rank int) (int, error) {
	if axis < -int64(rank) || axis >= int64(rank) {
		return 0, fmt.Errorf("axis %d out of range for rank %d", axis, rank)
	}
	if axis < 0 {
		axis += int64(rank)
	}
	return int(axis), nil
}

// Broadcast returns the numpy broadcast of shapes, or an error naming them.
func Broadcast(shapes ...[]int64) ([]int64, error) {
	rank := 0
	for _, s := range shapes {
		rank = max(rank, len(s))
	}
	out := make([]int64, rank)
	for i := range out {
		out[i] = 1
	}
	for _, s := range shapes {
		for i, d := range s {
			j := rank - len(s) + i
			switch {
			case out[j] == d || d == 1:
			case out[j] == 1:
				out[j] = d
			default:
				return nil, fmt.Errorf("shapes %s do not broadcast", tensor.Brief(shapes))
			}
		}
	}
	return out, nil
}

func one(t Type) []Type { return []Type{t} }

func inferConstant(n *Node) ([]Type, error) {
	v := n.AttrTensor("value")
	if v == nil {
		return nil, fmt.Errorf("missing attribute value")
	}
	return one(T(v.DType, v.Shape...)), nil
}

func inferFull(n *Node) ([]Type, error) {
	dt := n.AttrDType("dtype")
	shape := n.AttrInts("shape")
	if _, err := ShapeNumel(shape); err != nil {
		return nil, err
	}
	return one(T(dt, shape...)), nil
}

func inferRange(n *Node) ([]Type, error) {
	if _, ok := n.Attrs.Get("count"); !ok {
		return nil, fmt.Errorf("missing attribute count")
	}
	c := n.AttrInt("count")
	if c < 0 {
		return nil, fmt.Errorf("range needs count >= 0, got %d", c)
	}
	return one(T(n.AttrDType("dtype"), c)), nil
}

func inferSame(n *Node) ([]Type, error) {
	return one(T(n.Args[0].Type.DType, n.Args[0].Type.Shape...)), nil
}

func inferFloatUnary(n *Node) ([]Type, error) {
	if !n.Args[0].Type.DType.IsFloat() {
		return nil, fmt.Errorf("needs a floating-point argument, got %v", n.Args[0].Type)
	}
	return inferSame(n)
}

func inferNot(n *Node) ([]Type, error) {
	if n.Args[0].Type.DType != tensor.Bool {
		return nil, fmt.Errorf("needs a bool argument, got %v", n.Args[0].Type)
	}
	return inferSame(n)
}

func inferIsNaN(n *Node) ([]Type, error) {
	return one(T(tensor.Bool, n.Args[0].Type.Shape...)), nil
}

func inferCast(n *Node) ([]Type, error) {
	to := n.AttrDType("to")
	if to == tensor.Invalid {
		return nil, fmt.Errorf("missing attribute to")
	}
	return one(T(to, n.Args[0].Type.Shape...)), nil
}

func broadcastArgs(n *Node) ([]int64, error) {
	var shapes [][]int64
	for _, a := range n.Args {
		shapes = append(shapes, a.Type.Shape)
	}
	return Broadcast(shapes...)
}

func inferArith(n *Node) ([]Type, error) {
	a, b := n.Args[0].Type, n.Args[1].Type
	if a.DType != b.DType {
		return nil, fmt.Errorf("dtypes differ: %v and %v", a, b)
	}
	if a.DType == tensor.Bool {
		return nil, fmt.Errorf("needs numbers, got %v", a)
	}
	s, err := broadcastArgs(n)
	if err != nil {
		return nil, err
	}
	return one(T(a.DType, s...)), nil
}

func inferCompare(n *Node) ([]Type, error) {
	a, b := n.Args[0].Type, n.Args[1].Type
	if a.DType != b.DType {
		return nil, fmt.Errorf("dtypes differ: %v and %v", a, b)
	}
	s, err := broadcastArgs(n)
	if err != nil {
		return nil, err
	}
	return one(T(tensor.Bool, s...)), nil
}

func inferLogic(n *Node) ([]Type, error) {
	for _, a := range n.Args {
		if a.Type.DType != tensor.Bool {
			return nil, fmt.Errorf("needs bool arguments, got %v", a.Type)
		}
	}
	s, err := broadcastArgs(n)
	if err != nil {
		return nil, err
	}
	return one(T(tensor.Bool, s...)), nil
}

func inferWhere(n *Node) ([]Type, error) {
	c, a, b := n.Args[0].Type, n.Args[1].Type, n.Args[2].Type
	if c.DType != tensor.Bool {
		return nil, fmt.Errorf("condition must be bool, got %v", c)
	}
	if a.DType != b.DType {
		return nil, fmt.Errorf("branch dtypes differ: %v and %v", a, b)
	}
	s, err := broadcastArgs(n)
	if err != nil {
		return nil, err
	}
	return one(T(a.DType, s...)), nil
}

// ReduceAxes returns the normalised, sorted, unique axes of a reduction; no axes
// attribute means all axes.
func ReduceAxes(attrs Attrs, rank int) ([]int, error) {
	axes := attrs.Ints("axes")
	seen := make([]bool, rank)
	if axes == nil {
		for i := range seen {
			seen[i] = true
		}
	}
	for _, a := range axes {
		i, err := AxisIndex(a, rank)
		if err != nil {
			return nil, err
		}
		if seen[i] {
			return nil, fmt.Errorf("axis %d repeated", a)
		}
		seen[i] = true
	}
	var out []int
	for i, s := range seen {
		if s {
			out = append(out, i)
		}
	}
	return out, nil
}

func inferReduce(n *Node) ([]Type, error) {
	x := n.Args[0].Type
	axes, err := ReduceAxes(n.Attrs, x.Rank())
	if err != nil {
		return nil, err
	}
	keep := n.AttrBool("keepdims")
	var shape []int64
	j := 0
	for i, d := range x.Shape {
		if j < len(axes) && axes[j] == i {
			j++
			if keep {
				shape = append(shape, 1)
			}
			continue
		}
		shape = append(shape, d)
	}
	return one(T(x.DType, shape...)), nil
}

// MatMulDims returns the batch shape and m, k, n of a matmul node's arguments.
func MatMulDims(a, b Type, ta, tb bool) (batch []int64, m, k, n int64, err error) {
	if a.Rank() < 2 || b.Rank() < 2 {
		return nil, 0, 0, 0, fmt.Errorf("needs rank >= 2, got %v and %v", a, b)
	}
	m, k = a.Shape[a.Rank()-2], a.Shape[a.Rank()-1]
	if ta {
		m, k = k, m
	}
	k2, n := b.Shape[b.Rank()-2], b.Shape[b.Rank()-1]
	if tb {
		k2, n = n, k2
	}
	if k != k2 {
		return nil, 0, 0, 0, fmt.Errorf("inner dims differ: %v and %v", a, b)
	}
	batch, err = Broadcast(a.Shape[:a.Rank()-2], b.Shape[:b.Rank()-2])
	return batch, m, k, n, err
}

func inferMatMul(n *Node) ([]Type, error) {
	a, b := n.Args[0].Type, n.Args[1].Type
	if a.DType != b.DType || !a.DType.IsFloat() {
		return nil, fmt.Errorf("needs equal floating-point dtypes, got %v and %v", a, b)
	}
	batch, m, _, nn, err := MatMulDims(a, b, n.AttrBool("transpose_a"), n.AttrBool("transpose_b"))
	if err != nil {
		return nil, err
	}
	return one(T(a.DType, append(batch, m, nn)...)), nil
}

func inferReshape(n *Node) ([]Type, error) {
	x := n.Args[0].Type
	shape := n.AttrInts("shape")
	c, err := ShapeNumel(shape)
	if err != nil {
		return nil, err
	}
	if c != x.Numel() {
		return nil, fmt.Errorf("cannot reshape %v (%d elements) to %s", x, x.Numel(), tensor.Brief(shape))
	}
	return one(T(x.DType, shape...)), nil
}

func inferTranspose(n *Node) ([]Type, error) {
	x := n.Args[0].Type
	perm := n.AttrInts("perm")
	if len(perm) != x.Rank() {
		return nil, fmt.Errorf("perm %s does not fit %v", tensor.Brief(perm), x)
	}
	seen := make([]bool, len(perm))
	shape := make([]int64, len(perm))
	for i, p := range perm {
		if p < 0 || int(p) >= len(perm) || seen[p] {
			return nil, fmt.Errorf("perm %s is not a permutation", tensor.Brief(perm))
		}
		seen[p] = true
		shape[i] = x.Shape[p]
	}
	return one(T(x.DType, shape...)), nil
}

func inferExpand(n *Node) ([]Type, error) {
	x := n.Args[0].Type
	shape := n.AttrInts("shape")
	s, err := Broadcast(x.Shape, shape)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(s, shape) {
		return nil, fmt.Errorf("cannot expand %v to %s", x, tensor.Brief(shape))
	}
	if _, err := ShapeNumel(s); err != nil {
		return nil, err
	}
	return one(T(x.DType, s...)), nil
}

// SliceLen is the number of elements of range(start, end, step) (step != 0).
func SliceLen(start, end, step int64) int64 {
	if step > 0 && end > start {
		return (end - start + step - 1) / step
	}
	if step < 0 && end < start {
		return (start - end - step - 1) / -step
	}
	return 0
}

func inferSlice(n *Node) ([]Type, error) {
	x := n.Args[0].Type
	axes, starts, ends, steps := n.AttrInts("axes"), n.AttrInts("starts"),
		n.AttrInts("ends"), n.AttrInts("steps")
	if len(starts) != len(axes) || len(ends) != len(axes) || len(steps) != len(axes) {
		return nil, fmt.Errorf("axes, starts, ends and steps need equal lengths")
	}
	shape := append([]int64{}, x.Shape...)
	for i, a := range axes {
		ax, err := AxisIndex(a, x.Rank())
		if err != nil {
			return nil, err
		}
		d := x.Shape[ax]
		s, e, st := starts[i], ends[i], steps[i]
		// Normalised form: 0 <= start < d (or the slice is empty), -1 <= end <= d.
		if st == 0 || s < 0 || s > d || e < -1 || e > d {
			return nil, fmt.Errorf("slice of axis %d (size %d): start %d, end %d, step %d not normalised",
				a, d, s, e, st)
		}
		shape[ax] = SliceLen(s, e, st)
	}
	return one(T(x.DType, shape...)), nil
}

func inferConcat(n *Node) ([]Type, error) {
	x := n.Args[0].Type
	ax, err := AxisIndex(n.AttrInt("axis"), x.Rank())
	if err != nil {
		return nil, err
	}
	shape := append([]int64{}, x.Shape...)
	for _, a := range n.Args[1:] {
		t := a.Type
		if t.DType != x.DType || t.Rank() != x.Rank() {
			return nil, fmt.Errorf("cannot concatenate %v and %v", x, t)
		}
		for i := range shape {
			if i != ax && t.Shape[i] != x.Shape[i] {
				return nil, fmt.Errorf("cannot concatenate %v and %v on axis %d", x, t, ax)
			}
		}
		shape[ax] += t.Shape[ax]
	}
	return one(T(x.DType, shape...)), nil
}

func inferSplit(n *Node) ([]Type, error) {
	x := n.Args[0].Type
	ax, err := AxisIndex(n.AttrInt("axis"), x.Rank())
	if err != nil {
		return nil, err
	}
	sizes := n.AttrInts("sizes")
	var sum int64
	var out []Type
	for _, s := range sizes {
		if s < 0 {
			return nil, fmt.Errorf("negative split size %d", s)
		}
		sum += s
		shape := append([]int64{}, x.Shape...)
		shape[ax] = s
		out = append(out, T(x.DType, shape...))
	}
	if sum != x.Shape[ax] || len(sizes) == 0 {
		return nil, fmt.Errorf("split sizes %s do not add up to %d", tensor.Brief(sizes), x.Shape[ax])
	}
	return out, nil
}

func inferGather(n *Node) ([]Type, error) {
	x, idx := n.Args[0].Type, n.Args[1].Type
	if !idx.DType.IsInt() {
		return nil, fmt.Errorf("indices must be integers, got %v", idx)
	}
	ax, err := AxisIndex(n.AttrInt("axis"), x.Rank())
	if err != nil {
		return nil, err
	}
	shape := append(append(append([]int64{}, x.Shape[:ax]...), idx.Shape...), x.Shape[ax+1:]...)
	return one(T(x.DType, shape...)), nil
}

func inferGatherElements(n *Node) ([]Type, error) {
	x, idx := n.Args[0].Type, n.Args[1].Type
	if !idx.DType.IsInt() || idx.Rank() != x.Rank() {
		return nil, fmt.Errorf("indices must be integers of rank %d, got %v", x.Rank(), idx)
	}
	if _, err := AxisIndex(n.AttrInt("axis"), x.Rank()); err != nil {
		return nil, err
	}
	return one(T(x.DType, idx.Shape...)), nil
}

func inferGatherND(n *Node) ([]Type, error) {
	x, idx := n.Args[0].Type, n.Args[1].Type
	b := int(n.AttrInt("batch_dims"))
	if !idx.DType.IsInt() || idx.Rank() < 1 || b < 0 || b >= min(x.Rank(), idx.Rank()) {
		return nil, fmt.Errorf("bad gather_nd of %v by %v with batch_dims %d", x, idx, b)
	}
	last := int(idx.Shape[idx.Rank()-1])
	if last > x.Rank()-b {
		return nil, fmt.Errorf("index depth %d too large for %v", last, x)
	}
	shape := append(append([]int64{}, idx.Shape[:idx.Rank()-1]...), x.Shape[b+last:]...)
	return one(T(x.DType, shape...)), nil
}

func inferTile(n *Node) ([]Type, error) {
	x := n.Args[0].Type
	r := n.AttrInts("repeats")
	if len(r) != x.Rank() {
		return nil, fmt.Errorf("repeats %s do not fit %v", tensor.Brief(r), x)
	}
	shape := make([]int64, len(r))
	for i := range r {
		if r[i] < 0 {
			return nil, fmt.Errorf("negative repeat %d", r[i])
		}
		shape[i] = x.Shape[i] * r[i]
	}
	if _, err := ShapeNumel(shape); err != nil {
		return nil, err
	}
	return one(T(x.DType, shape...)), nil
}

func inferTrilu(n *Node) ([]Type, error) {
	if n.Args[0].Type.Rank() < 2 {
		return nil, fmt.Errorf("needs rank >= 2, got %v", n.Args[0].Type)
	}
	return inferSame(n)
}

func inferScatterAdd(n *Node) ([]Type, error) {
	x, idx := n.Args[0].Type, n.Args[1].Type
	ax := n.AttrInt("axis")
	size := n.AttrInt("size")
	if !idx.DType.IsInt() || ax < 0 || int(ax)+idx.Rank() > x.Rank() || size < 0 {
		return nil, fmt.Errorf("bad scatter_add of %v by %v at axis %d", x, idx, ax)
	}
	for i, d := range idx.Shape {
		if x.Shape[int(ax)+i] != d {
			return nil, fmt.Errorf("indices %v do not match updates %v at axis %d", idx, x, ax)
		}
	}
	shape := append(append(append([]int64{}, x.Shape[:ax]...), size), x.Shape[int(ax)+idx.Rank():]...)
	return one(T(x.DType, shape...)), nil
}

func inferNorm(n *Node) ([]Type, error) {
	x := n.Args[0].Type
	if !x.DType.IsFloat() {
		return nil, fmt.Errorf("needs a floating-point input, got %v", x)
	}
	ax, err := AxisIndex(n.AttrInt("axis"), x.Rank())
	if err != nil {
		return nil, err
	}
	for _, p := range n.Args[1:] {
		if _, err := Broadcast(x.Shape[ax:], p.Type.Shape); err != nil || p.Type.Rank() > x.Rank()-ax {
			return nil, fmt.Errorf("scale/bias %v does not fit normalised dims %v", p.Type, x.Shape[ax:])
		}
	}
	return inferSame(n)
}

func attentionTypes(n *Node) ([]Type, error) {
	q, k, v := n.Args[0].Type, n.Args[1].Type, n.Args[2].Type
	if q.Rank() != 4 || k.Rank() != 4 || v.Rank() != 4 {
		return nil, fmt.Errorf("q, k, v must be [B,T,H,D], got %v, %v, %v", q, k, v)
	}
	if q.DType != k.DType || q.DType != v.DType || !q.DType.IsFloat() {
		return nil, fmt.Errorf("q, k, v need one floating-point dtype")
	}
	if k.Shape[0] != q.Shape[0] || !k.SameShape(v) || k.Shape[3] != q.Shape[3] {
		return nil, fmt.Errorf("q %v does not fit k %v and v %v", q, k, v)
	}
	if k.Shape[2] == 0 || q.Shape[2]%k.Shape[2] != 0 {
		return nil, fmt.Errorf("%d query heads are not a multiple of %d kv heads", q.Shape[2], k.Shape[2])
	}
	b, t, h := q.Shape[0], q.Shape[1], q.Shape[2]
	return []Type{T(q.DType, q.Shape...), T(tensor.F32, b, h, t)}, nil
}

func inferAttention(n *Node) ([]Type, error) {
	ts, err := attentionTypes(n)
	if err != nil {
		return nil, err
	}
	if err := checkWindow(n); err != nil {
		return nil, err
	}
	if HasDocs(n) {
		return ts, checkDocs(n, 4)
	}
	if len(n.Args) == 4 {
		q, k, m := n.Args[0].Type, n.Args[1].Type, n.Args[3].Type
		want := []int64{q.Shape[0], q.Shape[2], q.Shape[1], k.Shape[1]}
		if s, err := Broadcast(want, m.Shape); err != nil || !slices.Equal(s, want) || m.Rank() > 4 {
			return nil, fmt.Errorf("mask %v does not broadcast to [B,H,T,S] %v", m, want)
		}
	}
	return ts, nil
}

func inferDilatedAttention(n *Node) ([]Type, error) {
	ts, err := attentionTypes(n)
	if err != nil {
		return nil, err
	}
	seg, dil := n.AttrInts("segments"), n.AttrInts("dilations")
	if len(seg) == 0 || len(seg) != len(dil) {
		return nil, fmt.Errorf("segments %v and dilations %v must be non-empty and of equal length", seg, dil)
	}
	for i := range seg {
		if seg[i] <= 0 || dil[i] <= 0 {
			return nil, fmt.Errorf("segment %d and dilation %d must be positive", seg[i], dil[i])
		}
	}
	if o := n.AttrString("offsets"); o != OffsetsPaper && o != OffsetsBlock {
		return nil, fmt.Errorf("offsets %q: want paper or block", o)
	}
	if len(n.Args) == 4 && !HasDocs(n) {
		return nil, fmt.Errorf("a fourth operand is doc starts and needs docs")
	}
	return ts, checkDocs(n, 4)
}

// inferDilatedAttentionGrad types (q, k, v, o, lse, do [, doc starts]) -> (dq, dk, dv).
func inferDilatedAttentionGrad(n *Node) ([]Type, error) {
	if len(n.Args) == 7 && !HasDocs(n) {
		return nil, fmt.Errorf("a seventh operand is doc starts and needs docs")
	}
	if err := checkDocs(n, 7); err != nil {
		return nil, err
	}
	return inferAttentionGrad(n)
}

func inferLoss(n *Node) ([]Type, error) {
	x, l := n.Args[0].Type, n.Args[1].Type
	if x.Rank() != 2 || !x.DType.IsFloat() || l.Rank() != 1 || !l.DType.IsInt() || l.Shape[0] != x.Shape[0] {
		return nil, fmt.Errorf("needs logits [N,C] and integer labels [N], got %v and %v", x, l)
	}
	switch r := n.AttrString("reduction"); r {
	case "mean", "sum":
		return one(T(x.DType)), nil
	case "none":
		return one(T(x.DType, x.Shape[0])), nil
	default:
		return nil, fmt.Errorf("reduction %q: want mean, sum or none", r)
	}
}

// inferAttentionGrad types (q, k, v, o, lse, do [, mask]) -> (dq, dk, dv).
func inferAttentionGrad(n *Node) ([]Type, error) {
	fwd := &Node{Op: n.Op, Args: n.Args[:3], Attrs: n.Attrs}
	ts, err := attentionTypes(fwd)
	if err != nil {
		return nil, err
	}
	o, lse, do := n.Args[3].Type, n.Args[4].Type, n.Args[5].Type
	if !o.Equal(ts[0]) || !do.Equal(ts[0]) || !lse.Equal(ts[1]) {
		return nil, fmt.Errorf("o %v, lse %v, do %v do not fit q %v", o, lse, do, n.Args[0].Type)
	}
	if err := checkDocs(n, 7); err != nil {
		return nil, err
	}
	if err := checkWindow(n); err != nil {
		return nil, err
	}
	a := n.Args
	return []Type{a[0].Type, a[1].Type, a[2].Type}, nil
}
