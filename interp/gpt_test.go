package interp

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// tinyGPT builds a 2-layer GPT (d=64, 4 heads, vocab 512, T tokens) and its
// gradient with respect to every weight, by walking the body backwards with the
// op table's VJP rules (a minimal stand-in for the autodiff pass).
func tinyGPT(t testing.TB, T int64) *ir.Func {
	const d, heads, vocab, layers = 64, 4, 512, 2
	b := ir.NewBuilder("gpt")
	seed := uint64(100)
	w := func(name string, shape ...int64) *ir.Value {
		seed++
		data := randF(seed, prod(shape))
		for i := range data {
			data[i] *= 0.2
		}
		return b.Weight(name, tensor.FromFloats(tensor.F32, shape, data))
	}
	tok := b.Input("tokens", ir.T(tensor.I64, T))
	labels := b.Label("labels", ir.T(tensor.I64, T))
	wte, wpe := w("wte", vocab, d), w("wpe", T, d)
	x := b.Add(b.Apply1(ir.OpGather, ir.A("axis", 0), wte, tok), wpe)
	for l := range layers {
		lw := func(name string, shape ...int64) *ir.Value {
			return w(fmt.Sprintf("h%d.%s", l, name), shape...)
		}
		h := b.LayerNorm(x, lw("ln1", d), nil, 1e-5)
		split := func(v *ir.Value) *ir.Value { return b.Reshape(v, 1, T, heads, d/heads) }
		q := split(b.MatMul(h, lw("wq", d, d), false, false))
		k := split(b.MatMul(h, lw("wk", d, d), false, false))
		v := split(b.MatMul(h, lw("wv", d, d), false, false))
		o, _ := b.Attention(q, k, v, true, 1/math.Sqrt(d/heads))
		x = b.Add(x, b.MatMul(b.Reshape(o, T, d), lw("wo", d, d), false, false))
		h = b.LayerNorm(x, lw("ln2", d), nil, 1e-5)
		h = b.Unary(ir.OpGelu, b.MatMul(h, lw("w1", d, 4*d), false, false))
		x = b.Add(x, b.MatMul(h, lw("w2", 4*d, d), false, false))
	}
	logits := b.MatMul(b.LayerNorm(x, w("lnf", d), nil, 1e-5), wte, false, true)
	loss := b.Apply1(ir.OpSoftmaxCrossEntropy, ir.A("ignore_index", -100), logits, labels)
	b.Output("loss", loss)
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	// Reverse sweep.
	fwd := slices.Clone(f.Body)
	cot := map[*ir.Value]*ir.Value{loss: b.Full(loss.Type, 1)}
	for i := len(fwd) - 1; i >= 0; i-- {
		n := fwd[i]
		dys := make([]*ir.Value, len(n.Results))
		any := false
		for j, r := range n.Results {
			dys[j] = cot[r]
			any = any || dys[j] != nil
		}
		info := n.Op.Info()
		if !any || info.Grad == nil {
			continue
		}
		for j, g := range info.Grad(b, n, dys) {
			if g == nil {
				continue
			}
			if old := cot[n.Args[j]]; old != nil {
				g = b.Add(old, g)
			}
			cot[n.Args[j]] = g
		}
	}
	for _, p := range f.Params {
		if p.Role == ir.RoleWeight && cot[p.Value] != nil {
			b.Output("grad."+p.Name, cot[p.Value])
		}
	}
	if f, err = b.Build(); err != nil {
		t.Fatal(err)
	}
	return f
}

func gptInputs(T int64) map[string]*tensor.Tensor {
	tok, lab := make([]int64, T), make([]int64, T)
	for i := range tok {
		tok[i] = int64(i*37) % 512
		lab[i] = int64(i*11+5) % 512
	}
	lab[0] = -100
	return map[string]*tensor.Tensor{"tokens": i64(sh(T), tok...), "labels": i64(sh(T), lab...)}
}

// TestTinyGPT runs forward and backward of a tiny GPT and checks one weight's
// gradient against a central difference in f64.
func TestTinyGPT(t *testing.T) {
	const T = 16
	f := tinyGPT(t, T)
	in := gptInputs(T)
	opts := Options{Precision: tensor.F64}
	out, err := Run(f, in, opts)
	if err != nil {
		t.Fatal(err)
	}
	loss := out["loss"].F[0]
	if math.IsNaN(loss) || loss < 1 {
		t.Fatalf("loss %v", loss)
	}
	wo := f.Param("h1.wo").Data
	g := out["grad.h1.wo"]
	for _, i := range []int{0, 77, 4095} {
		old := wo.F[i]
		wo.F[i] = old + 1e-6
		up, err := Run(f, in, opts)
		if err != nil {
			t.Fatal(err)
		}
		wo.F[i] = old - 1e-6
		down, _ := Run(f, in, opts)
		wo.F[i] = old
		num := (up["loss"].F[0] - down["loss"].F[0]) / 2e-6
		if math.Abs(num-g.F[i]) > 1e-6*(1+math.Abs(num)) {
			t.Errorf("grad.h1.wo[%d] = %v, finite difference %v", i, g.F[i], num)
		}
	}
}

// BenchmarkTinyGPT512 is a forward+backward of the tiny GPT on 512 tokens in f32.
func BenchmarkTinyGPT512(b *testing.B) {
	f := tinyGPT(b, 512)
	in := gptInputs(512)
	for b.Loop() {
		if _, err := Run(f, in, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestTinyGPTProfile logs where the time of one 512-token step goes (go test -v).
func TestTinyGPTProfile(t *testing.T) {
	if testing.Short() || !testing.Verbose() {
		t.Skip("profile only with -v")
	}
	f := tinyGPT(t, 512)
	vals, err := RunValues(f, gptInputs(512), Options{})
	if err != nil {
		t.Fatal(err)
	}
	per := map[ir.Op]time.Duration{}
	for _, n := range f.Body {
		args := make([]*tensor.Tensor, len(n.Args))
		for i, a := range n.Args {
			args[i] = vals[a]
		}
		t0 := time.Now()
		if _, err := exec(n, args, Options{}); err != nil {
			t.Fatal(err)
		}
		per[n.Op] += time.Since(t0)
	}
	var total time.Duration
	for op, d := range per {
		total += d
		t.Logf("%-24v %v", op, d)
	}
	t.Logf("total %v", total)
}
