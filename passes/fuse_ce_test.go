package passes_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/passes/loss"
	"github.com/lcc-dev/lcc/tensor"
)

// lossModel loads a test model with a mean cross-entropy loss added and only the
// loss kept as an output (as for training), so the logits have no other reader.
func lossModel(t *testing.T, name string) *ir.Func {
	t.Helper()
	return lossModelSeq(t, name, 16)
}

// lossModelSeq is lossModel at sequence length seq.
func lossModelSeq(t *testing.T, name string, seq int64) *ir.Func {
	t.Helper()
	f, err := driver.Load("../testdata/onnx/"+name+".onnx", driver.Bindings{SeqLen: seq, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loss.Apply(f, loss.CrossEntropy, false); err != nil {
		t.Fatal(err)
	}
	passes.DeadCode(f)
	return f
}

// randomInputs draws token ids and labels (every fifth label ignored, -100) for f's
// integer inputs from a fixed seed.
func randomInputs(f *ir.Func, vocab int64) map[string]*tensor.Tensor {
	r := rand.New(rand.NewPCG(11, 12))
	in := map[string]*tensor.Tensor{}
	for _, p := range f.Params {
		if p.Data != nil {
			continue
		}
		x := tensor.New(p.Value.Type.DType, p.Value.Type.Shape...)
		for i := range x.I {
			x.I[i] = r.Int64N(vocab)
			if p.Role == ir.RoleLabel && i%5 == 1 {
				x.I[i] = loss.IgnoreIndex
			}
		}
		in[p.Name] = x
	}
	return in
}

func countOps(f *ir.Func, op ir.Op) int {
	c := 0
	for _, n := range f.Body {
		if n.Op == op {
			c++
		}
	}
	return c
}

// TestFuseCrossEntropyModels fuses the head of two exported models and checks the
// loss and, after autodiff, every gradient against the unfused graph on the CPU.
func TestFuseCrossEntropyModels(t *testing.T) {
	for _, name := range []string{"llama_mini", "gpt_mini"} {
		t.Run(name, func(t *testing.T) {
			f := lossModel(t, name)
			fused := f.Clone()
			if _, err := passes.Run(fused, []passes.Pass{passes.FuseCrossEntropy},
				passes.Options{VerifyEach: true}); err != nil {
				t.Fatal(err)
			}
			if countOps(fused, ir.OpFusedLinearCrossEntropy) != 1 ||
				countOps(fused, ir.OpSoftmaxCrossEntropy) != 0 {
				t.Fatalf("not fused:\n%s", ir.Print(fused))
			}
			in := randomInputs(f, 512)
			compareRuns(t, f, fused, in, 1e-5)
			g, err := autodiff.Grad(f, autodiff.Options{Loss: "loss"})
			if err != nil {
				t.Fatal(err)
			}
			gf, err := autodiff.Grad(fused, autodiff.Options{Loss: "loss"})
			if err != nil {
				t.Fatal(err)
			}
			if countOps(gf, ir.OpFusedLinearCrossEntropyGrad) != 1 {
				t.Errorf("backward does not use fused_linear_cross_entropy_grad")
			}
			compareRuns(t, g, gf, in, 1e-5)
		})
	}
}

// compareRuns runs both functions and compares every output of want by relative
// L2 error.
func compareRuns(t *testing.T, want, got *ir.Func, in map[string]*tensor.Tensor, tol float64) {
	t.Helper()
	w, err := interp.Run(want, in, interp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := interp.Run(got, in, interp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, wt := range w {
		gt := g[name]
		if gt == nil {
			t.Errorf("output %s missing", name)
			continue
		}
		var num, den float64
		for i := range wt.F {
			num += (gt.F[i] - wt.F[i]) * (gt.F[i] - wt.F[i])
			den += wt.F[i] * wt.F[i]
		}
		if e := math.Sqrt(num / math.Max(den, 1e-300)); e > tol || math.IsNaN(e) {
			t.Errorf("%s: relative error %.3g", name, e)
		}
	}
}

// TestFuseCrossEntropyForms checks the log_softmax + nll_loss form fuses, and
// that logits read elsewhere (an output) are left alone.
func TestFuseCrossEntropyForms(t *testing.T) {
	for _, c := range []struct {
		name      string
		src       string
		wantFused bool
	}{
		{"log_softmax nll", `func @f(
    %0: f32[2,3,4] input "h",
    %1: f32[6,4] weight "w",
    %2: i64[6] label "y",
) {
  %3 = matmul(%0, %1) {transpose_b} : f32[2,3,6]
  %4 = log_softmax(%3) {axis=-1} : f32[2,3,6]
  %5 = reshape(%4) {shape=[6,6]} : f32[6,6]
  %6 = nll_loss(%5, %2) {ignore_index=-100, reduction="sum"} : f32[]
  return %6 "loss"
}
`, true},
		{"logits also an output", `func @f(
    %0: f32[6,4] input "h",
    %1: f32[4,6] weight "w",
    %2: i64[6] label "y",
) {
  %3 = matmul(%0, %1) : f32[6,6]
  %4 = softmax_cross_entropy(%3, %2) {ignore_index=-100} : f32[]
  return %4 "loss", %3 "logits"
}
`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := ir.Parse(c.src)
			if err != nil {
				t.Fatal(err)
			}
			g := f.Clone()
			if _, err := passes.Run(g, []passes.Pass{passes.FuseCrossEntropy},
				passes.Options{VerifyEach: true}); err != nil {
				t.Fatal(err)
			}
			if got := countOps(g, ir.OpFusedLinearCrossEntropy) == 1; got != c.wantFused {
				t.Fatalf("fused = %v, want %v:\n%s", got, c.wantFused, ir.Print(g))
			}
			r := rand.New(rand.NewPCG(1, 1))
			in := map[string]*tensor.Tensor{}
			for _, p := range f.Params {
				x := tensor.New(p.Value.Type.DType, p.Value.Type.Shape...)
				for i := range x.F {
					x.F[i] = r.NormFloat64()
				}
				for i := range x.I {
					x.I[i] = int64(i % 6)
				}
				if len(x.I) > 1 {
					x.I[1] = -100
				}
				in[p.Name] = x
			}
			compareRuns(t, f, g, in, 1e-5)
			if c.wantFused && !strings.Contains(ir.Print(g), "transpose_w") {
				t.Errorf("transpose_b was not carried over:\n%s", ir.Print(g))
			}
		})
	}
}
