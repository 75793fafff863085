package ir

import (
	"fmt"

	"github.com/lcc-dev/lcc/tensor"
)

// Builder constructs and edits functions. It is lcc's public Go API for graphs.
//
// Each method appends nodes at the insertion point (the end of the body unless
// SetInsertPoint moved it). Type errors do not panic: the first one is recorded,
// later calls become no-ops returning placeholder values, and Err or Build reports
// it, naming the op. This keeps model-building code free of error checks per line,
// as bufio.Scanner does for reads.
type Builder struct {
	f    *Func
	pos  int // insertion index into f.Body; -1 appends
	err  error
	name string
	// sink, when set, takes each node instead of f.Body (see DeferInserts).
	sink func(n *Node, before int)
}

// NewBuilder starts an empty function.
func NewBuilder(name string) *Builder {
	return &Builder{f: &Func{Name: name}, pos: -1}
}

// Edit returns a builder that appends to f.
func Edit(f *Func) *Builder { return &Builder{f: f, pos: -1} }

// SetInsertPoint makes later nodes go before f.Body[i] (i == len(Body) appends).
func (b *Builder) SetInsertPoint(i int) {
	if i >= len(b.f.Body) {
		i = -1
	}
	b.pos = i
}

// DeferInserts makes the builder hand each node it builds to sink, with the
// index of the body node it goes before (len(Body) at the end), instead of
// inserting it. An insert moves every later node, so a rewrite driver that edits
// a large body collects the nodes and splices them in once per sweep: a rewrite
// then costs what it builds, not the size of the body. Insertion points stay
// indices into the unchanged body.
func (b *Builder) DeferInserts(sink func(n *Node, before int)) { b.sink = sink }

// SetName sets the source name given to the nodes built next (for error messages).
func (b *Builder) SetName(name string) { b.name = name }

// Func returns the function under construction.
func (b *Builder) Func() *Func { return b.f }

// Err returns the first error recorded.
func (b *Builder) Err() error { return b.err }

// Fail records err if none is recorded yet.
func (b *Builder) Fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// Build verifies the function and returns it, or the first error.
func (b *Builder) Build() (*Func, error) {
	if b.err != nil {
		return nil, b.err
	}
	if err := Verify(b.f); err != nil {
		return nil, err
	}
	return b.f, nil
}

// Input adds an input parameter.
func (b *Builder) Input(name string, t Type) *Value { return b.f.AddParam(name, RoleInput, t, nil) }

// Label adds a label parameter (training targets).
func (b *Builder) Label(name string, t Type) *Value { return b.f.AddParam(name, RoleLabel, t, nil) }

// Weight adds a weight parameter holding data.
func (b *Builder) Weight(name string, data *tensor.Tensor) *Value {
	return b.f.AddParam(name, RoleWeight, T(data.DType, data.Shape...), data)
}

// Output names v as a result of the function.
func (b *Builder) Output(name string, v *Value) {
	b.f.Outputs = append(b.f.Outputs, Output{Name: name, Value: v})
}

var poison = &Value{Type: Type{DType: tensor.Invalid}}

// Apply adds a node and returns its results. Result types come from the op's Infer.
func (b *Builder) Apply(op Op, attrs Attrs, args ...*Value) []*Value {
	if b.err != nil {
		return []*Value{poison, poison, poison, poison}
	}
	n := &Node{Op: op, Args: args, Attrs: attrs, Name: b.name}
	types, err := inferNode(n)
	if err != nil {
		b.err = err
		return []*Value{poison, poison, poison, poison}
	}
	for i, t := range types {
		n.Results = append(n.Results, &Value{Type: t, Def: n, Index: i})
	}
	b.Insert(n)
	return n.Results
}

// Insert places an already-typed node at the insertion point.
func (b *Builder) Insert(n *Node) {
	if b.sink != nil {
		before := b.pos
		if before < 0 {
			before = len(b.f.Body)
		}
		b.sink(n, before)
		return
	}
	if b.pos < 0 {
		b.f.Body = append(b.f.Body, n)
		return
	}
	b.f.Body = append(b.f.Body, nil)
	copy(b.f.Body[b.pos+1:], b.f.Body[b.pos:])
	b.f.Body[b.pos] = n
	b.pos++
}

// Apply1 is Apply for ops with one result.
func (b *Builder) Apply1(op Op, attrs Attrs, args ...*Value) *Value {
	return b.Apply(op, attrs, args...)[0]
}

// inferNode checks arity and attributes, then runs Infer; errors name the node.
func inferNode(n *Node) ([]Type, error) {
	if n.Op == OpInvalid || n.Op >= numOps {
		return nil, fmt.Errorf("unknown op %d", n.Op)
	}
	info := n.Op.Info()
	if len(n.Args) < info.MinArgs || (info.MaxArgs >= 0 && len(n.Args) > info.MaxArgs) {
		return nil, fmt.Errorf("%s has %d args, expected %s", n.Where(), len(n.Args), arity(info))
	}
	for i, a := range n.Args {
		if a == nil || a.Type.DType == tensor.Invalid {
			return nil, fmt.Errorf("%s: arg %d is undefined", n.Where(), i)
		}
	}
	for _, a := range n.Attrs {
		spec, ok := info.attr(a.Name)
		if !ok {
			return nil, fmt.Errorf("%s: unknown attribute %q", n.Where(), a.Name)
		}
		k, err := kindOf(a.Value)
		if err != nil || k != spec.Kind {
			return nil, fmt.Errorf("%s: attribute %s must be %v, got %T", n.Where(), a.Name, spec.Kind, a.Value)
		}
	}
	ts, err := info.Infer(n)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n.Where(), err)
	}
	return ts, nil
}

func (info *OpInfo) attr(name string) (AttrSpec, bool) {
	for _, s := range info.Attrs {
		if s.Name == name {
			return s, true
		}
	}
	return AttrSpec{}, false
}

func arity(info *OpInfo) string {
	switch {
	case info.MaxArgs < 0:
		return fmt.Sprintf("at least %d", info.MinArgs)
	case info.MinArgs == info.MaxArgs:
		return fmt.Sprint(info.MinArgs)
	}
	return fmt.Sprintf("%d to %d", info.MinArgs, info.MaxArgs)
}

// Const adds a constant node.
func (b *Builder) Const(t *tensor.Tensor) *Value { return b.Apply1(OpConstant, A("value", t)) }

// Scalar adds a rank-0 constant of dtype dt.
func (b *Builder) Scalar(dt tensor.DType, v float64) *Value { return b.Const(tensor.Scalar(dt, v)) }

// Add returns x + y.
func (b *Builder) Add(x, y *Value) *Value { return b.Apply1(OpAdd, nil, x, y) }

// Sub returns x - y.
func (b *Builder) Sub(x, y *Value) *Value { return b.Apply1(OpSub, nil, x, y) }

// Mul returns x * y.
func (b *Builder) Mul(x, y *Value) *Value { return b.Apply1(OpMul, nil, x, y) }

// Div returns x / y.
func (b *Builder) Div(x, y *Value) *Value { return b.Apply1(OpDiv, nil, x, y) }

// Neg returns -x.
func (b *Builder) Neg(x *Value) *Value { return b.Apply1(OpNeg, nil, x) }

// Unary applies a one-argument op without attributes.
func (b *Builder) Unary(op Op, x *Value) *Value { return b.Apply1(op, nil, x) }

// MatMul returns x @ y, with optional transposes of the last two dims.
func (b *Builder) MatMul(x, y *Value, transposeA, transposeB bool) *Value {
	return b.Apply1(OpMatMul, A("transpose_a", transposeA, "transpose_b", transposeB), x, y)
}

// Reshape returns x with a new shape of the same size.
func (b *Builder) Reshape(x *Value, shape ...int64) *Value {
	return b.Apply1(OpReshape, A("shape", append([]int64{}, shape...)), x)
}

// Transpose permutes the dims of x.
func (b *Builder) Transpose(x *Value, perm ...int64) *Value {
	return b.Apply1(OpTranspose, A("perm", append([]int64{}, perm...)), x)
}

// Expand broadcasts x to shape.
func (b *Builder) Expand(x *Value, shape ...int64) *Value {
	return b.Apply1(OpExpand, A("shape", append([]int64{}, shape...)), x)
}

// Cast converts x to dtype to.
func (b *Builder) Cast(x *Value, to tensor.DType) *Value {
	if x.Type.DType == to {
		return x
	}
	return b.Apply1(OpCast, A("to", to), x)
}

// ReduceSum sums x over axes (all axes when none are given).
func (b *Builder) ReduceSum(x *Value, keepdims bool, axes ...int64) *Value {
	as := A("keepdims", keepdims)
	if axes != nil {
		as = as.With("axes", append([]int64{}, axes...))
	}
	return b.Apply1(OpReduceSum, as, x)
}

// Softmax normalises x over axis.
func (b *Builder) Softmax(x *Value, axis int64) *Value {
	return b.Apply1(OpSoftmax, A("axis", axis), x)
}

// LayerNorm normalises x over its last dim with scale and bias (either may be nil).
func (b *Builder) LayerNorm(x, scale, bias *Value, eps float64) *Value {
	args := []*Value{x}
	if scale != nil {
		args = append(args, scale)
		if bias != nil {
			args = append(args, bias)
		}
	}
	return b.Apply1(OpLayerNorm, A("axis", int64(-1), "eps", eps), args...)
}

// Attention is scaled dot-product attention over q [B,T,Hq,D], k and v [B,S,Hkv,D];
// it returns the output and the log-sum-exp [B,Hq,T].
func (b *Builder) Attention(q, k, v *Value, causal bool, scale float64) (o, lse *Value) {
	rs := b.Apply(OpAttention, A("causal", causal, "scale", scale), q, k, v)
	return rs[0], rs[1]
}
