package interp

import (
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// randomInputs fills every parameter of f without data with deterministic values.
func randomInputs(f *ir.Func, seed uint64) map[string]*tensor.Tensor {
	in := map[string]*tensor.Tensor{}
	for i, p := range f.Params {
		ty := p.Value.Type
		if ty.DType.IsFloat() {
			in[p.Name] = tensor.FromFloats(ty.DType, ty.Shape, randF(seed+uint64(i), int(ty.Numel())))
		} else {
			in[p.Name] = tensor.New(ty.DType, ty.Shape...)
		}
	}
	return in
}

func TestBlockFile(t *testing.T) {
	src, err := os.ReadFile("../ir/testdata/block.lcc")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ir.Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	in := randomInputs(f, 1)
	out, err := Run(f, in, Options{})
	if err != nil {
		t.Fatal(err)
	}
	y, rest := out["y"], out["rest"]
	if y == nil || rest == nil || !slices.Equal(y.Shape, sh(2, 8, 8)) || !slices.Equal(rest.Shape, sh(2, 8, 8)) {
		t.Fatalf("outputs %v", out)
	}
	for _, v := range append(append([]float64{}, y.F...), rest.F...) {
		if math.IsNaN(v) || math.IsInf(v, 0) || float64(float32(v)) != v {
			t.Fatalf("bad output element %v", v)
		}
	}
	// Deterministic, and RunValues agrees with Run.
	vals, err := RunValues(f, in, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !tensor.Equal(vals[f.Output("y")], y) {
		t.Error("RunValues and Run disagree")
	}
	if len(vals) != len(f.Params)+countResults(f) {
		t.Errorf("RunValues kept %d values, want %d", len(vals), len(f.Params)+countResults(f))
	}
	// f64 differs from f32 but only by rounding.
	out64, err := Run(f, in, Options{Precision: tensor.F64})
	if err != nil {
		t.Fatal(err)
	}
	var maxDiff float64
	for i, v := range out64["y"].F {
		maxDiff = math.Max(maxDiff, math.Abs(v-y.F[i]))
	}
	if maxDiff == 0 || maxDiff > 1e-5 {
		t.Errorf("f32 vs f64 max difference %v, want in (0, 1e-5]", maxDiff)
	}
}

func countResults(f *ir.Func) int {
	n := 0
	for _, nd := range f.Body {
		n += len(nd.Results)
	}
	return n
}

func TestRunErrors(t *testing.T) {
	b := ir.NewBuilder("f")
	x := b.Input("x", ir.T(tensor.F32, 2, 3))
	y := b.Input("y", ir.T(tensor.F32, 3))
	w := b.Weight("w", f32(sh(3), 1, 2, 3))
	b.Output("z", b.Add(b.Mul(x, w), y))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(f, map[string]*tensor.Tensor{}, Options{})
	if err == nil || !strings.Contains(err.Error(), `missing inputs "x", "y"`) {
		t.Errorf("missing inputs: err = %v", err)
	}
	_, err = Run(f, map[string]*tensor.Tensor{"x": f32(sh(3), 1, 2, 3), "y": f32(sh(3), 1, 2, 3)}, Options{})
	if err == nil || !strings.Contains(err.Error(), `parameter "x": expected f32[2,3], got f32[3]`) {
		t.Errorf("bad shape: err = %v", err)
	}
	_, err = Run(f, map[string]*tensor.Tensor{"x": f32(sh(2, 3), 1, 2, 3, 4, 5, 6),
		"y": f64(sh(3), 1, 2, 3)}, Options{})
	if err == nil || !strings.Contains(err.Error(), `parameter "y": expected f32[3], got f64[3]`) {
		t.Errorf("bad dtype: err = %v", err)
	}
	_, err = Run(f, map[string]*tensor.Tensor{"x": f32(sh(2, 3), 1, 2, 3, 4, 5, 6),
		"y": f32(sh(3), 1, 2, 3), "q": f32(sh(), 0)}, Options{})
	if err == nil || !strings.Contains(err.Error(), `unknown inputs "q"`) {
		t.Errorf("unknown input: err = %v", err)
	}
	// Weights default to their data and may be overridden.
	in := map[string]*tensor.Tensor{"x": f32(sh(2, 3), 1, 2, 3, 4, 5, 6), "y": f32(sh(3), 0, 0, 1)}
	out, err := Run(f, in, Options{})
	if err != nil {
		t.Fatal(err)
	}
	wantF(t, "z", out["z"], sh(2, 3), 0, 1, 4, 10, 4, 10, 19)
	in["w"] = f32(sh(3), 0, 0, 0)
	out, err = Run(f, in, Options{})
	if err != nil {
		t.Fatal(err)
	}
	wantF(t, "z with w=0", out["z"], sh(2, 3), 0, 0, 0, 1, 0, 0, 1)
}

func TestGatherOutOfRangeIsError(t *testing.T) {
	b := ir.NewBuilder("g")
	x := b.Input("x", ir.T(tensor.F32, 4, 2))
	idx := b.Input("idx", ir.T(tensor.I64, 3))
	b.SetName("/embed/Gather")
	b.Output("y", b.Apply1(ir.OpGather, ir.A("axis", 0), x, idx))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]*tensor.Tensor{"x": f32(sh(4, 2), 0, 1, 2, 3, 4, 5, 6, 7), "idx": i64(sh(3), 0, -1, 4)}
	_, err = Run(f, in, Options{})
	if err == nil || !strings.Contains(err.Error(), `gather "/embed/Gather"`) ||
		!strings.Contains(err.Error(), "index 4 out of range") {
		t.Fatalf("err = %v", err)
	}
	in["idx"] = i64(sh(3), 0, -1, 3)
	out, err := Run(f, in, Options{})
	if err != nil {
		t.Fatal(err)
	}
	wantF(t, "gather", out["y"], sh(3, 2), 0, 0, 1, 6, 7, 6, 7)
}

// TestPanicBecomesError registers a kernel that panics and checks that Run
// reports it as an error naming the node.
func TestPanicBecomesError(t *testing.T) {
	old := lookup(ir.OpSin)
	defer Register(ir.OpSin, old)
	Register(ir.OpSin, func(*ir.Node, []*tensor.Tensor, Options) ([]*tensor.Tensor, error) {
		var s []float64
		_ = s[3]
		return nil, nil
	})
	b := ir.NewBuilder("p")
	x := b.Input("x", ir.T(tensor.F32, 2))
	b.SetName("boom")
	b.Output("y", b.Unary(ir.OpSin, x))
	f, _ := b.Build()
	_, err := Run(f, map[string]*tensor.Tensor{"x": f32(sh(2), 1, 2)}, Options{})
	if err == nil || !strings.Contains(err.Error(), `sin "boom": kernel panicked`) {
		t.Fatalf("err = %v", err)
	}
}

// TestPrecision checks that f32 values are rounded after every op by default and
// kept exact under F64.
func TestPrecision(t *testing.T) {
	b := ir.NewBuilder("p")
	x := b.Input("x", ir.T(tensor.F32, 1))
	third := b.Div(x, b.Scalar(tensor.F32, 3))
	b.Output("y", b.Mul(third, b.Scalar(tensor.F32, 3)))
	b.Output("third", third)
	f, _ := b.Build()
	in := map[string]*tensor.Tensor{"x": f32(sh(1), 1)}
	out, err := Run(f, in, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := out["third"].F[0], float64(float32(1.0/3)); got != want {
		t.Errorf("f32 1/3 = %v, want %v", got, want)
	}
	out, err = Run(f, in, Options{Precision: tensor.F64})
	if err != nil {
		t.Fatal(err)
	}
	if got := out["third"].F[0]; got != 1.0/3 {
		t.Errorf("f64 1/3 = %v, want %v", got, 1.0/3)
	}
	// An unrounded f32 input is rounded (on a copy) before use.
	raw := &tensor.Tensor{DType: tensor.F32, Shape: sh(1), F: []float64{1.0 / 3}}
	out, err = Run(f, map[string]*tensor.Tensor{"x": raw}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if raw.F[0] != 1.0/3 {
		t.Error("Run modified its input")
	}
	if got := out["third"].F[0]; got != float64(float32(float64(float32(1.0/3))/3)) {
		t.Errorf("rounded input: third = %v", got)
	}
	// bf16 values round to 8 significant bits.
	res, err := EvalNode(&ir.Node{Op: ir.OpAdd}, []*tensor.Tensor{
		tensor.FromFloats(tensor.BF16, sh(1), []float64{1}),
		tensor.FromFloats(tensor.BF16, sh(1), []float64{1.0 / 256})}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].F[0] != 1 {
		t.Errorf("bf16 1 + 1/256 = %v, want 1 (ties to even)", res[0].F[0])
	}
}

// TestStore: Options.Store rounds the values it names to the narrower dtype, as
// if stored so (parameters and results; a constant in a copy), and leaves the
// rest, and the caller's tensors and the constant's data, as they are.
func TestStore(t *testing.T) {
	bf := func(v float64) float64 { return roundScalar(v, tensor.BF16) }
	b := ir.NewBuilder("s")
	x := b.Input("x", ir.T(tensor.F32, 1))
	c := b.Const(f32(sh(1), 1.0/3))
	inner := b.Add(x, c)                       // not stored: a fused kernel's register
	y := b.Mul(inner, b.Scalar(tensor.F32, 3)) // stored in bf16
	b.Output("y", y)
	b.Output("c", b.Reshape(c, 1)) // a move of the stored constant
	f, _ := b.Build()
	stored := map[*ir.Value]bool{x: true, c: true, y: true}
	store := func(v *ir.Value) tensor.DType {
		if stored[v] {
			return tensor.BF16
		}
		return v.Type.DType
	}
	in := f32(sh(1), 1.0/7)
	out, err := Run(f, map[string]*tensor.Tensor{"x": in}, Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	want := bf(float64(float32(float64(float32(bf(1.0/7)+bf(1.0/3))) * 3)))
	if got := out["y"].F[0]; got != want {
		t.Errorf("y = %v, want %v (x and c in bf16, x+c in f32, y in bf16)", got, want)
	}
	if got := out["c"].F[0]; got != bf(1.0/3) {
		t.Errorf("c = %v, want %v", got, bf(1.0/3))
	}
	if in.F[0] != float64(float32(1.0/7)) || c.Def.AttrTensor("value").F[0] != float64(float32(1.0/3)) {
		t.Error("Store rounded the caller's input or the constant's data in place")
	}
	// F64 ignores it.
	out, err = Run(f, map[string]*tensor.Tensor{"x": in}, Options{Precision: tensor.F64, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := out["y"].F[0], (float64(float32(1.0/7))+float64(float32(1.0/3)))*3; got != want {
		t.Errorf("F64 with Store: y = %v, want %v", got, want)
	}
}

// TestLiveness checks that Run drops intermediates: only outputs survive in the
// values map it builds.
func TestLiveness(t *testing.T) {
	b := ir.NewBuilder("chain")
	x := b.Input("x", ir.T(tensor.F32, 4))
	v := x
	for range 10 {
		v = b.Unary(ir.OpExp, b.Neg(v))
	}
	b.Output("y", v)
	f, _ := b.Build()
	vals, err := run(f, map[string]*tensor.Tensor{"x": f32(sh(4), 1, 2, 3, 4)}, Options{}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) != 1 || vals[v] == nil {
		t.Errorf("%d values alive after the run, want only the output", len(vals))
	}
}
