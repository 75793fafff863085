package autodiff_test

import (
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

var f64 = interp.Options{Precision: tensor.F64}

func randn(r *rand.Rand, scale float64, shape ...int64) *tensor.Tensor {
	t := tensor.New(tensor.F64, shape...)
	for i := range t.F {
		t.F[i] = scale * r.NormFloat64()
	}
	return t
}

// block builds a pre-norm transformer block with a language-model head and loss:
// layer_norm → q, k, v projections → causal grouped-query attention (4 query heads,
// 2 kv heads) → output projection + residual → layer_norm → gelu MLP + residual →
// logits → softmax_cross_entropy (mean, one ignored label).
func block(t testing.TB) (*ir.Func, map[string]*tensor.Tensor) {
	const bsz, seq, d, hq, hkv, hd, ff, vocab = 2, 4, 8, 4, 2, 2, 12, 6
	r := rand.New(rand.NewPCG(7, 8))
	b := ir.NewBuilder("block")
	x := b.Input("x", ir.T(tensor.F64, bsz, seq, d))
	labels := b.Label("labels", ir.T(tensor.I64, bsz*seq))
	w := func(name string, scale float64, shape ...int64) *ir.Value {
		return b.Weight(name, randn(r, scale, shape...))
	}
	g1, b1 := w("ln1.g", 0.3, d), w("ln1.b", 0.3, d)
	for i := range g1.Param.Data.F {
		g1.Param.Data.F[i] += 1
	}
	h := b.LayerNorm(x, g1, b1, 1e-5)
	q := b.Reshape(b.MatMul(h, w("wq", 0.5, d, hq*hd), false, false), bsz, seq, hq, hd)
	k := b.Reshape(b.MatMul(h, w("wk", 0.5, hkv*hd, d), false, true), bsz, seq, hkv, hd)
	v := b.Reshape(b.MatMul(h, w("wv", 0.5, d, hkv*hd), false, false), bsz, seq, hkv, hd)
	o, _ := b.Attention(q, k, v, true, 1/math.Sqrt(hd))
	o = b.MatMul(b.Reshape(o, bsz, seq, hq*hd), w("wo", 0.5, hq*hd, d), false, false)
	x1 := b.Add(x, o)
	h2 := b.LayerNorm(x1, w("ln2.g", 0.3, d), nil, 1e-5)
	m := b.Apply1(ir.OpGelu, nil, b.Add(b.MatMul(h2, w("w1", 0.5, d, ff), false, false), w("b1", 0.1, ff)))
	x2 := b.Add(x1, b.MatMul(m, w("w2", 0.5, ff, d), false, false))
	logits := b.MatMul(b.Reshape(x2, bsz*seq, d), w("head", 0.5, d, vocab), false, false)
	loss := b.Apply1(ir.OpSoftmaxCrossEntropy, ir.A("ignore_index", -100), logits, labels)
	b.Output("loss", loss)
	b.Output("logits", logits)
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	inputs := map[string]*tensor.Tensor{
		"x":      randn(r, 1, bsz, seq, d),
		"labels": tensor.FromInts(tensor.I64, []int64{bsz * seq}, []int64{1, 5, -100, 0, 2, 2, 4, 3}),
	}
	return f, inputs
}

// TestBlockFiniteDifferences checks every weight gradient of a whole transformer
// block against central differences.
func TestBlockFiniteDifferences(t *testing.T) {
	f, inputs := block(t)
	res, err := gradcheck.Check(f, inputs, gradcheck.Objective{Loss: "loss"}, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 11 {
		t.Errorf("checked %d weights, want 11", len(res))
	}
	for _, p := range res {
		if p.RelErr > 1e-6 || math.IsNaN(p.RelErr) {
			t.Errorf("d loss/d %s: relative error %.3g\n autodiff %.6g\n finite   %.6g",
				p.Param, p.RelErr, p.AD, p.FD)
		}
	}
}

// TestGradOutputs checks output naming and order, KeepOutputs, round-tripping of
// the result through the text form, and that f is left unchanged.
func TestGradOutputs(t *testing.T) {
	f, inputs := block(t)
	before := ir.Print(f)
	g, err := autodiff.Grad(f, autodiff.Options{Loss: "loss"})
	if err != nil {
		t.Fatal(err)
	}
	if ir.Print(f) != before {
		t.Error("Grad modified its input")
	}
	var names []string
	for _, o := range g.Outputs {
		names = append(names, o.Name)
	}
	want := "loss grad.ln1.g grad.ln1.b grad.wq grad.wk grad.wv grad.wo grad.ln2.g grad.w1 grad.b1 " +
		"grad.w2 grad.head"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("outputs %q, want %q", got, want)
	}
	for _, p := range f.Params {
		if v := g.Output("grad." + p.Name); v != nil && !v.Type.Equal(p.Value.Type) {
			t.Errorf("grad.%s has type %v, want %v", p.Name, v.Type, p.Value.Type)
		}
	}
	s := ir.Print(g)
	h, err := ir.Parse(s)
	if err != nil {
		t.Fatalf("Parse(Print(grad)): %v", err)
	}
	if ir.Print(h) != s {
		t.Error("the gradient function does not round-trip through the text form")
	}

	k, err := autodiff.Grad(f, autodiff.Options{Loss: "loss", KeepOutputs: true})
	if err != nil {
		t.Fatal(err)
	}
	if k.Outputs[0].Name != "loss" || k.Outputs[1].Name != "logits" || len(k.Outputs) != 13 {
		t.Errorf("KeepOutputs: outputs start %q, %q (%d), want loss, logits (13)",
			k.Outputs[0].Name, k.Outputs[1].Name, len(k.Outputs))
	}
	a, err := interp.Run(g, inputs, f64)
	if err != nil {
		t.Fatal(err)
	}
	c, err := interp.Run(k, inputs, f64)
	if err != nil {
		t.Fatal(err)
	}
	if !tensor.Equal(a["grad.wq"], c["grad.wq"]) || !tensor.Equal(a["loss"], c["loss"]) {
		t.Error("KeepOutputs changed the gradients")
	}
}

// TestGradSeedsAndWRT: an objective given by output cotangents, a custom WRT set,
// a parameter used twice, and one the objective does not reach (zeros).
func TestGradSeedsAndWRT(t *testing.T) {
	b := ir.NewBuilder("f")
	x := b.Input("x", ir.T(tensor.F64, 3))
	w := b.Weight("w", tensor.FromFloats(tensor.F64, []int64{3}, []float64{1, 2, 3}))
	u := b.Weight("u", tensor.FromFloats(tensor.F64, []int64{3}, []float64{4, 5, 6}))
	frozen := b.Weight("frozen", tensor.FromFloats(tensor.F64, []int64{3}, []float64{1, 1, 1}))
	frozen.Param.Frozen = true
	y := b.Mul(b.Mul(w, w), b.Add(x, frozen)) // y = w²·(x + 1)
	b.Output("y", y)
	b.Output("z", b.Unary(ir.OpExp, u))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	g, err := autodiff.Grad(f, autodiff.Options{Seeds: map[string]string{"y": "dy"}})
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]*tensor.Tensor{
		"x":  tensor.FromFloats(tensor.F64, []int64{3}, []float64{0, 1, 2}),
		"dy": tensor.FromFloats(tensor.F64, []int64{3}, []float64{1, 10, 100}),
	}
	out, err := interp.Run(g, in, f64)
	if err != nil {
		t.Fatal(err)
	}
	// d/dw Σ dy·w²·(x+1) = 2·w·(x+1)·dy
	wantW := []float64{2 * 1 * 1 * 1, 2 * 2 * 2 * 10, 2 * 3 * 3 * 100}
	if got := out["grad.w"].F; !close(got, wantW) {
		t.Errorf("grad.w = %v, want %v", got, wantW)
	}
	if got := out["grad.u"].F; !close(got, []float64{0, 0, 0}) {
		t.Errorf("grad.u = %v, want zeros (z is not in the objective)", got)
	}
	if out["grad.frozen"] != nil || len(g.Outputs) != 3 || g.Outputs[0].Name != "y" {
		t.Errorf("outputs %v: want y, grad.w, grad.u", g.Outputs)
	}
	// Nothing of z's forward nor any backward for u survives dead-code deletion.
	if s := ir.Print(g); strings.Contains(s, "exp(") {
		t.Errorf("dead forward code kept:\n%s", s)
	}

	// WRT an input, with the frozen weight included explicitly.
	g, err = autodiff.Grad(f, autodiff.Options{Seeds: map[string]string{"y": "dy"},
		WRT: func(p *ir.Param) bool { return p.Name == "x" || p.Name == "frozen" }})
	if err != nil {
		t.Fatal(err)
	}
	out, err = interp.Run(g, in, f64)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{1, 4 * 10, 9 * 100} // w²·dy
	if !close(out["grad.x"].F, want) || !close(out["grad.frozen"].F, want) {
		t.Errorf("grad.x = %v, grad.frozen = %v, want %v", out["grad.x"].F, out["grad.frozen"].F, want)
	}
}

// TestGradOnlyOnPath: backward code is emitted only for nodes between the
// differentiated weights and the loss.
func TestGradOnlyOnPath(t *testing.T) {
	b := ir.NewBuilder("f")
	x := b.Input("x", ir.T(tensor.F64, 4))
	w := b.Weight("w", tensor.FromFloats(tensor.F64, []int64{4}, []float64{1, 2, 3, 4}))
	// A long chain on the input alone needs no backward.
	c := x
	for range 5 {
		c = b.Unary(ir.OpTanh, c)
	}
	loss := b.ReduceSum(b.Mul(w, c), false)
	b.Output("loss", loss)
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	g, err := autodiff.Grad(f, autodiff.Options{Loss: "loss"})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(ir.Print(g), "tanh("); n != 5 {
		t.Errorf("%d tanh nodes, want the 5 forward ones only:\n%s", n, ir.Print(g))
	}
	if len(g.Body) > len(f.Body)+3 {
		t.Errorf("backward of Σ w·c has %d nodes, want at most 3:\n%s", len(g.Body)-len(f.Body), ir.Print(g))
	}
}

// TestGradErrors: bad objectives and missing rules are errors, never panics.
func TestGradErrors(t *testing.T) {
	src := `func @f(
    %0: f64[3] weight "w",
    %1: i64[3] input "ids",
) {
  %2 = reduce_sum(%0) : f64[]
  %3 = reduce_sum(%1) : i64[]
  %4 = exp(%0) : f64[3]
  return %2 "loss", %3 "count", %4 "vec"
}
`
	f, err := ir.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		opts autodiff.Options
		want string
	}{
		"missing loss":   {autodiff.Options{Loss: "nope"}, `no output named "nope"`},
		"non-scalar":     {autodiff.Options{Loss: "vec"}, `loss "vec" has type f64[3], want a scalar`},
		"integer loss":   {autodiff.Options{Loss: "count"}, `want a floating-point scalar`},
		"no objective":   {autodiff.Options{}, "no objective"},
		"seed missing":   {autodiff.Options{Seeds: map[string]string{"nope": "d"}}, "no such output"},
		"seed name used": {autodiff.Options{Seeds: map[string]string{"vec": "w"}}, `"w" is empty or taken`},
		"integer wrt": {autodiff.Options{Loss: "loss", WRT: func(*ir.Param) bool { return true }},
			`cannot differentiate with respect to "ids"`},
	} {
		_, err := autodiff.Grad(f, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.want)
		}
	}

	// An op with no rule on the path is named; off the path it does not matter.
	info := ir.OpExp.Info()
	saved := info.Grad
	info.Grad = nil
	defer func() { info.Grad = saved }()
	_, err = autodiff.Grad(f, autodiff.Options{Seeds: map[string]string{"vec": "d"}})
	if err == nil || !strings.Contains(err.Error(), "node 2 (exp) has no gradient rule") {
		t.Errorf("missing rule: error %v", err)
	}
	if _, err := autodiff.Grad(f, autodiff.Options{Loss: "loss"}); err != nil {
		t.Errorf("missing rule off the path: %v", err)
	}
	// A rule that panics or builds ill-typed code is an error naming the node.
	info.Grad = func(b *ir.Builder, n *ir.Node, dys []*ir.Value) []*ir.Value { panic("boom") }
	_, err = autodiff.Grad(f, autodiff.Options{Seeds: map[string]string{"vec": "d"}})
	if err == nil || !strings.Contains(err.Error(), "exp") || !strings.Contains(err.Error(), "boom") {
		t.Errorf("panicking rule: error %v", err)
	}
	info.Grad = func(b *ir.Builder, n *ir.Node, dys []*ir.Value) []*ir.Value {
		return []*ir.Value{b.ReduceSum(dys[0], false)}
	}
	_, err = autodiff.Grad(f, autodiff.Options{Seeds: map[string]string{"vec": "d"}})
	if err == nil || !strings.Contains(err.Error(), "cotangent f64[], want f64[3]") {
		t.Errorf("ill-typed rule: error %v", err)
	}
}

func close(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-9*max(1, math.Abs(b[i])) {
			return false
		}
	}
	return true
}
