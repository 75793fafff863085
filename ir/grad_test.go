package ir_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/passes/autodiff/gradcheck"
	"github.com/lcc-dev/lcc/tensor"
)

// gradArg is one argument of a one-op gradient test: a float weight to
// differentiate, or a fixed input (indices, masks, conditions).
type gradArg struct {
	t   *tensor.Tensor
	wrt bool
}

// gradCase is a one-op function y = op(args) checked by finite differences on the
// objective Σ_j ⟨y_j, r_j⟩ with random r_j over the results in outs (nil: every
// floating-point result).
type gradCase struct {
	name  string
	op    ir.Op
	attrs ir.Attrs
	args  []gradArg
	outs  []int
}

// gen draws test inputs from a fixed seed, so the cases are the same every run.
type gen struct{ r *rand.Rand }

func newGen() *gen { return &gen{rand.New(rand.NewPCG(1, 2))} }

func (g *gen) fill(shape []int64, f func() float64) *tensor.Tensor {
	t := tensor.New(tensor.F64, shape...)
	for i := range t.F {
		t.F[i] = f()
	}
	return t
}

// w is a standard normal weight.
func (g *gen) w(shape ...int64) gradArg {
	return gradArg{t: g.fill(shape, g.r.NormFloat64), wrt: true}
}

// pos is a weight in [0.5, 2), for log, sqrt and friends.
func (g *gen) pos(shape ...int64) gradArg {
	return gradArg{t: g.fill(shape, func() float64 { return 0.5 + 1.5*g.r.Float64() }), wrt: true}
}

// away is a weight with |x| in [0.2, 1.7), away from the kinks of relu and abs.
func (g *gen) away(shape ...int64) gradArg {
	return gradArg{t: g.fill(shape, func() float64 {
		v := 0.2 + 1.5*g.r.Float64()
		if g.r.IntN(2) == 0 {
			return -v
		}
		return v
	}), wrt: true}
}

// distinct is a weight whose elements are a shuffled ramp with gaps of 0.1, so no
// max or min is ever tied, even after an FD step.
func (g *gen) distinct(shape ...int64) gradArg {
	t := tensor.New(tensor.F64, shape...)
	for i, p := range g.r.Perm(len(t.F)) {
		t.F[i] = 0.1*float64(p) - 0.05*float64(len(t.F))
	}
	return gradArg{t: t, wrt: true}
}

// fixed turns a weight into a fixed float input.
func fixed(a gradArg) gradArg { a.wrt = false; return a }

// ints is a fixed integer input.
func ints(dt tensor.DType, shape []int64, v ...int64) gradArg {
	return gradArg{t: tensor.FromInts(dt, shape, v)}
}

func sh(d ...int64) []int64 { return d }

func slice(axes, starts, ends, steps []int64) ir.Attrs {
	return ir.A("axes", axes, "starts", starts, "ends", ends, "steps", steps)
}

// gradCases covers every op that has a VJP rule, with broadcasting, transposes,
// attribute variants and multi-result ops.
func gradCases() []gradCase {
	g := newGen()
	var cs []gradCase
	add := func(name string, op ir.Op, attrs ir.Attrs, args ...gradArg) {
		cs = append(cs, gradCase{name: name, op: op, attrs: attrs, args: args})
	}
	// Unary elementwise.
	add("neg", ir.OpNeg, nil, g.w(2, 3))
	add("exp", ir.OpExp, nil, g.w(2, 3))
	add("log", ir.OpLog, nil, g.pos(2, 3))
	add("sqrt", ir.OpSqrt, nil, g.pos(2, 3))
	add("rsqrt", ir.OpRsqrt, nil, g.pos(2, 3))
	add("recip", ir.OpRecip, nil, g.away(2, 3))
	add("tanh", ir.OpTanh, nil, g.w(2, 3))
	add("erf", ir.OpErf, nil, g.w(2, 3))
	add("sigmoid", ir.OpSigmoid, nil, g.w(2, 3))
	add("relu", ir.OpRelu, nil, g.away(2, 3))
	add("abs", ir.OpAbs, nil, g.away(2, 3))
	add("cos", ir.OpCos, nil, g.w(2, 3))
	add("sin", ir.OpSin, nil, g.w(2, 3))
	add("silu", ir.OpSilu, nil, g.w(2, 3))
	add("gelu", ir.OpGelu, nil, g.w(2, 3))
	add("gelu tanh", ir.OpGelu, ir.A("tanh", true), g.w(2, 3))
	f32 := g.w(2, 3)
	f32.t.DType = tensor.F32
	f32.t.RoundTo(tensor.F32)
	add("cast f32 to f64", ir.OpCast, ir.A("to", tensor.F64), f32)
	add("cast f64 to f64", ir.OpCast, ir.A("to", tensor.F64), g.w(3))

	// Binary elementwise, with broadcasting on either side.
	add("add", ir.OpAdd, nil, g.w(2, 3), g.w(2, 3))
	add("add broadcast", ir.OpAdd, nil, g.w(2, 3, 4), g.w(3, 1))
	add("sub broadcast both", ir.OpSub, nil, g.w(2, 1, 4), g.w(3, 1))
	add("mul broadcast", ir.OpMul, nil, g.w(4), g.w(2, 3, 4))
	add("mul same arg", ir.OpMul, nil, g.w(3, 2), g.w(1))
	add("div broadcast", ir.OpDiv, nil, g.w(2, 3), g.away(2, 1))
	add("pow", ir.OpPow, nil, g.pos(2, 3), g.w(2, 3))
	add("pow const exponent", ir.OpPow, nil, g.pos(2, 3),
		fixed(gradArg{t: tensor.Scalar(tensor.F64, 3)}))
	x, y := g.w(2, 3), g.away(2, 3)
	for i := range y.t.F {
		y.t.F[i] += x.t.F[i] // |x − y| ≥ 0.2: no ties
	}
	add("max", ir.OpMax, nil, x, y)
	add("min", ir.OpMin, nil, x, y)
	add("max broadcast", ir.OpMax, nil, g.distinct(2, 3), fixed(gradArg{t: tensor.Scalar(tensor.F64, 0.03)}))
	add("where", ir.OpWhere, nil, ints(tensor.Bool, sh(2, 3), 1, 0, 0, 1, 1, 0), g.w(2, 3), g.w(3))

	// Reductions.
	add("reduce_sum axis keepdims", ir.OpReduceSum, ir.A("axes", []int{1}, "keepdims", true), g.w(2, 3, 4))
	add("reduce_sum all", ir.OpReduceSum, nil, g.w(2, 3))
	add("reduce_mean", ir.OpReduceMean, ir.A("axes", []int{0, 2}), g.w(2, 3, 4))
	add("reduce_max", ir.OpReduceMax, ir.A("axes", []int{-1}), g.distinct(2, 3, 4))
	add("reduce_min all keepdims", ir.OpReduceMin, ir.A("keepdims", true), g.distinct(3, 4))

	// Matmul: every transpose combination, and broadcast batch dims.
	add("matmul", ir.OpMatMul, nil, g.w(3, 4), g.w(4, 2))
	add("matmul ta", ir.OpMatMul, ir.A("transpose_a", true), g.w(4, 3), g.w(4, 2))
	add("matmul tb", ir.OpMatMul, ir.A("transpose_b", true), g.w(3, 4), g.w(2, 4))
	add("matmul ta tb", ir.OpMatMul, ir.A("transpose_a", true, "transpose_b", true), g.w(4, 3), g.w(2, 4))
	add("matmul batch", ir.OpMatMul, nil, g.w(2, 3, 4), g.w(2, 4, 2))
	add("matmul batch broadcast", ir.OpMatMul, ir.A("transpose_b", true), g.w(2, 1, 3, 4), g.w(3, 2, 4))
	add("matmul rank2 weight ta", ir.OpMatMul, ir.A("transpose_a", true), g.w(2, 4, 3), g.w(4, 2))
	add("matmul rank2 weight", ir.OpMatMul, nil, g.w(2, 2, 3, 4), g.w(4, 2))
	add("matmul rank2 weight tb", ir.OpMatMul, ir.A("transpose_b", true), g.w(3, 3, 4), g.w(2, 4))

	// Data movement.
	add("reshape", ir.OpReshape, ir.A("shape", []int{3, 2, 2}), g.w(2, 6))
	add("transpose", ir.OpTranspose, ir.A("perm", []int{2, 0, 1}), g.w(2, 3, 4))
	add("expand", ir.OpExpand, ir.A("shape", []int{2, 3, 4}), g.w(3, 1))
	add("slice unit steps", ir.OpSlice, slice(sh(0, 2), sh(1, 0), sh(3, 3), sh(1, 1)), g.w(4, 3, 5))
	add("slice step 2", ir.OpSlice, slice(sh(-1), sh(1), sh(5), sh(2)), g.w(3, 5))
	add("slice negative step", ir.OpSlice, slice(sh(0, 1), sh(3, 1), sh(-1, 4), sh(-2, 1)), g.w(4, 5))
	add("concat", ir.OpConcat, ir.A("axis", -1), g.w(2, 1), g.w(2, 3), g.w(2, 2))
	add("split", ir.OpSplit, ir.A("axis", 1, "sizes", []int{1, 2, 2}), g.w(2, 5))
	add("gather", ir.OpGather, ir.A("axis", 1), g.w(2, 4, 3), ints(tensor.I64, sh(2, 3), 0, 3, 3, -1, 1, 0))
	add("gather rows i32", ir.OpGather, nil, g.w(5, 3), ints(tensor.I32, sh(4), 4, 0, 4, 2))
	add("gather_elements", ir.OpGatherElements, ir.A("axis", 1), g.w(3, 4),
		ints(tensor.I64, sh(2, 3), 3, 0, 3, -1, 1, 1))
	add("gather_elements axis 0", ir.OpGatherElements, nil, g.w(3, 2, 2),
		ints(tensor.I64, sh(2, 2, 1), 2, 0, 2, 1))
	add("gather_nd", ir.OpGatherND, nil, g.w(3, 4, 2), ints(tensor.I64, sh(3, 2), 0, 1, 2, 3, 0, 1))
	add("gather_nd batch_dims", ir.OpGatherND, ir.A("batch_dims", 1), g.w(2, 3, 4),
		ints(tensor.I64, sh(2, 3, 1), 1, 2, 1, 0, -1, 0))
	add("tile", ir.OpTile, ir.A("repeats", []int{2, 1, 3}), g.w(2, 3, 2))
	add("cumsum", ir.OpCumSum, ir.A("axis", 1), g.w(2, 4))
	add("cumsum exclusive reverse", ir.OpCumSum, ir.A("axis", 0, "exclusive", true, "reverse", true), g.w(4, 2))
	add("trilu lower", ir.OpTrilu, nil, g.w(2, 3, 4))
	add("trilu upper k", ir.OpTrilu, ir.A("upper", true, "k", 1), g.w(4, 3))
	add("scatter_add", ir.OpScatterAdd, ir.A("axis", 1, "size", 4), g.w(2, 3, 2),
		ints(tensor.I64, sh(3), 3, 0, 3))

	// Composite ops.
	add("softmax", ir.OpSoftmax, ir.A("axis", -1), g.w(2, 5))
	add("softmax axis 0", ir.OpSoftmax, ir.A("axis", 0), g.w(3, 2, 2))
	add("log_softmax", ir.OpLogSoftmax, ir.A("axis", 1), g.w(2, 5, 2))
	add("layer_norm", ir.OpLayerNorm, ir.A("axis", -1, "eps", 1e-5), g.w(3, 5))
	add("layer_norm scale bias", ir.OpLayerNorm, ir.A("axis", -1, "eps", 1e-5), g.w(3, 5), g.w(5), g.w(5))
	add("layer_norm scale 2 dims", ir.OpLayerNorm, ir.A("axis", -2, "eps", 1e-5), g.w(2, 3, 4), g.w(3, 4))
	add("layer_norm 2 dims broadcast scale", ir.OpLayerNorm, ir.A("axis", 1), g.w(2, 3, 4), g.w(4), g.w(3, 1))
	add("rms_norm", ir.OpRMSNorm, ir.A("axis", -1, "eps", 1e-6), g.w(3, 5))
	add("rms_norm scale", ir.OpRMSNorm, ir.A("axis", -1), g.w(3, 5), g.w(5))

	attn := func(causal bool) ir.Attrs { return ir.A("causal", causal, "scale", 0.6) }
	add("attention causal gqa", ir.OpAttention, attn(true), g.w(1, 4, 4, 3), g.w(1, 4, 2, 3), g.w(1, 4, 2, 3))
	add("attention default scale", ir.OpAttention, nil, g.w(2, 3, 2, 2), g.w(2, 5, 1, 2), g.w(2, 5, 1, 2))
	mask := g.w(3, 4)
	mask.t.F[1] = math.Inf(-1)
	add("attention float mask", ir.OpAttention, attn(false), g.w(1, 3, 2, 2), g.w(1, 4, 2, 2),
		g.w(1, 4, 2, 2), fixed(mask))
	add("attention bool mask", ir.OpAttention, attn(false), g.w(2, 3, 2, 2), g.w(2, 3, 1, 2),
		g.w(2, 3, 1, 2), ints(tensor.Bool, sh(2, 1, 3, 3), 1, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1))
	dil := ir.A("segments", []int{4, 8}, "dilations", []int{1, 2}, "causal", true, "scale", 0.5)
	add("dilated_attention", ir.OpDilatedAttention, dil, g.w(1, 8, 2, 2), g.w(1, 8, 2, 2), g.w(1, 8, 2, 2))
	add("dilated_attention block gqa", ir.OpDilatedAttention, dil.With("offsets", "block"),
		g.w(1, 8, 4, 2), g.w(1, 8, 2, 2), g.w(1, 8, 2, 2))

	labels := ints(tensor.I64, sh(4), 2, -100, 0, 4)
	for _, red := range []string{"mean", "sum", "none"} {
		add("softmax_cross_entropy "+red, ir.OpSoftmaxCrossEntropy,
			ir.A("reduction", red, "ignore_index", -100), g.w(4, 5), labels)
		add("nll_loss "+red, ir.OpNLLLoss, ir.A("reduction", red, "ignore_index", -100), g.w(4, 5), labels)
	}
	add("fused_linear_cross_entropy", ir.OpFusedLinearCrossEntropy,
		ir.A("ignore_index", -100, "chunk_rows", 3), g.w(4, 3), g.w(3, 7), labels)
	add("softmax_cross_entropy no ignore i32", ir.OpSoftmaxCrossEntropy, nil, g.w(3, 4),
		ints(tensor.I32, sh(3), 1, 3, 1))

	// Only some results in the objective: the others' cotangents are absent.
	cs = append(cs,
		gradCase{name: "split one result", op: ir.OpSplit, attrs: ir.A("axis", 0, "sizes", []int{1, 2}),
			args: []gradArg{g.w(3, 2)}, outs: []int{1}},
		gradCase{name: "attention o only", op: ir.OpAttention, attrs: attn(true),
			args: []gradArg{g.w(1, 3, 2, 2), g.w(1, 3, 2, 2), g.w(1, 3, 2, 2)}, outs: []int{0}},
		gradCase{name: "attention lse only", op: ir.OpAttention, attrs: attn(true),
			args: []gradArg{g.w(1, 3, 2, 2), g.w(1, 3, 1, 2), g.w(1, 3, 1, 2)}, outs: []int{1}},
		gradCase{name: "dilated_attention lse only", op: ir.OpDilatedAttention, attrs: dil,
			args: []gradArg{g.w(1, 8, 2, 2), g.w(1, 8, 2, 2), g.w(1, 8, 2, 2)}, outs: []int{1}},
	)
	cs = append(cs, collectiveGradCases(g)...)
	return cs
}

// build makes the one-op function of c and its fixed inputs; weights are named
// a0, a1, … and results y0, y1, …
func (c gradCase) build() (*ir.Func, map[string]*tensor.Tensor, error) {
	b := ir.NewBuilder(strings.ReplaceAll(c.name, " ", "_"))
	inputs := map[string]*tensor.Tensor{}
	var args []*ir.Value
	for i, a := range c.args {
		name := fmt.Sprintf("a%d", i)
		if a.wrt {
			args = append(args, b.Weight(name, a.t))
		} else {
			args = append(args, b.Input(name, ir.T(a.t.DType, a.t.Shape...)))
			inputs[name] = a.t
		}
	}
	rs := b.Apply(c.op, c.attrs, args...)
	if err := b.Err(); err != nil {
		return nil, nil, err
	}
	outs := c.outs
	if outs == nil {
		for i, r := range rs {
			if r.Type.DType.IsFloat() {
				outs = append(outs, i)
			}
		}
	}
	for _, i := range outs {
		b.Output(fmt.Sprintf("y%d", i), rs[i])
	}
	f, err := b.Build()
	return f, inputs, err
}

// TestGradRules checks every rule against central finite differences in float64.
func TestGradRules(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range gradCases() {
		t.Run(c.name, func(t *testing.T) {
			f, inputs, err := c.build()
			if err != nil {
				t.Fatal(err)
			}
			seeds := map[string]*tensor.Tensor{}
			for _, o := range f.Outputs {
				s := tensor.New(tensor.F64, o.Value.Type.Shape...)
				for i := range s.F {
					s.F[i] = r.NormFloat64()
				}
				s.DType = o.Value.Type.DType
				seeds[o.Name] = s
			}
			res, err := gradcheck.Check(f, inputs, gradcheck.Objective{Seeds: seeds}, 1e-6)
			if err != nil {
				t.Fatalf("%v\n%s", err, ir.Print(f))
			}
			if len(res) == 0 {
				t.Fatal("no weight checked")
			}
			for _, p := range res {
				if p.RelErr > 1e-6 || math.IsNaN(p.RelErr) {
					t.Errorf("d/d%s: relative error %.3g\n autodiff %.6g\n finite   %.6g",
						p.Param, p.RelErr, p.AD, p.FD)
				}
			}
		})
	}
}

// TestGradTable fails if an op lacks both a rule and NoGrad, or has a rule that no
// finite-difference case covers.
func TestGradTable(t *testing.T) {
	covered := map[ir.Op]bool{}
	for _, c := range gradCases() {
		covered[c.op] = true
	}
	for _, op := range ir.AllOps() {
		info := op.Info()
		switch {
		case info.Grad == nil && !info.NoGrad:
			t.Errorf("op %s has neither a Grad rule nor NoGrad", op)
		case info.Grad != nil && info.NoGrad:
			t.Errorf("op %s has a Grad rule and NoGrad", op)
		case info.Grad != nil && !covered[op]:
			t.Errorf("op %s has a Grad rule but no finite-difference case", op)
		}
	}
}

// TestGradTies checks the documented tie rule: ties of max and min (binary and
// reductions) share the cotangent evenly, as PyTorch's maximum and amax do.
func TestGradTies(t *testing.T) {
	for _, c := range []struct {
		op    ir.Op
		attrs ir.Attrs
		args  []float64
		want  [][]float64
	}{
		{ir.OpReduceMax, nil, []float64{1, 3, 3, 2}, [][]float64{{0, 0.5, 0.5, 0}}},
		{ir.OpReduceMin, nil, []float64{1, 1, 1, 2}, [][]float64{{1. / 3, 1. / 3, 1. / 3, 0}}},
		{ir.OpMax, nil, []float64{1, 3, 2, 3}, [][]float64{{0, 0.5}, {1, 0.5}}},
		{ir.OpRelu, nil, []float64{0, 1}, [][]float64{{0, 1}}},
		{ir.OpAbs, nil, []float64{0, -1}, [][]float64{{0, -1}}},
	} {
		b := ir.NewBuilder("ties")
		var args []*ir.Value
		nargs := len(c.want)
		per := int64(len(c.args) / nargs)
		for i := range nargs {
			data := tensor.FromFloats(tensor.F64, sh(per), c.args[int64(i)*per:int64(i+1)*per])
			args = append(args, b.Weight(fmt.Sprintf("a%d", i), data))
		}
		y := b.Apply1(c.op, c.attrs, args...)
		b.Output("y", b.ReduceSum(y, false))
		f, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		g, err := autodiff.Grad(f, autodiff.Options{Loss: "y"})
		if err != nil {
			t.Fatal(err)
		}
		out, err := interp.Run(g, nil, interp.Options{Precision: tensor.F64})
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range c.want {
			got := out[fmt.Sprintf("grad.a%d", i)].F
			for j := range want {
				if math.Abs(got[j]-want[j]) > 1e-12 {
					t.Errorf("%s%v: grad of arg %d = %v, want %v", c.op, c.args, i, got, want)
					break
				}
			}
		}
	}
}
