package passes

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/frontends/onnx"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// importModel lowers one of the repository's test models at small dims.
func importModel(t *testing.T, name string, dims map[string]int64) *ir.Func {
	t.Helper()
	m, err := onnx.Load(filepath.Join("..", "testdata", "onnx", name), onnx.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := onnx.Import(m, onnx.ImportOptions{Dims: dims})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// randomInputs draws every input and label of f: token ids below vocab for
// integer inputs, standard normal values for floating ones.
func randomInputs(f *ir.Func, vocab int64, seed uint64) map[string]*tensor.Tensor {
	r := rand.New(rand.NewPCG(seed, 1))
	in := map[string]*tensor.Tensor{}
	for _, p := range f.Params {
		if p.Data != nil {
			continue
		}
		ty := p.Value.Type
		x := tensor.New(ty.DType, ty.Shape...)
		switch {
		case ty.DType.IsFloat():
			for i := range x.F {
				x.F[i] = r.NormFloat64()
			}
		case ty.DType == tensor.Bool:
			for i := range x.I {
				x.I[i] = int64(r.IntN(2))
			}
		default:
			for i := range x.I {
				x.I[i] = r.Int64N(vocab)
			}
		}
		in[p.Name] = x
	}
	return in
}

// relErr is ‖a − b‖ / ‖b‖ (NaN-aware: a NaN anywhere is an infinite error).
func relErr(a, b *tensor.Tensor) float64 {
	var num, den float64
	for i := range b.F {
		d := a.F[i] - b.F[i]
		num += d * d
		den += b.F[i] * b.F[i]
	}
	if math.IsNaN(num) {
		return math.Inf(1)
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// checkSame runs before and after on the same inputs in float64 and requires every
// output to agree to tol.
func checkSame(t *testing.T, before, after *ir.Func, in map[string]*tensor.Tensor, tol float64) {
	t.Helper()
	opts := interp.Options{Precision: tensor.F64}
	want, err := interp.Run(before, in, opts)
	if err != nil {
		t.Fatalf("before: %v", err)
	}
	got, err := interp.Run(after, in, opts)
	if err != nil {
		t.Fatalf("after: %v", err)
	}
	// Outputs pair up by position, so a hand-built function may name them freely.
	for i, o := range before.Outputs {
		if e := relErr(got[after.Outputs[i].Name], want[o.Name]); !(e <= tol) {
			t.Errorf("output %s: relative error %.3g > %g", o.Name, e, tol)
		}
	}
}

// runPasses runs a pipeline with verification after each pass.
func runPasses(t *testing.T, f *ir.Func, ps ...Pass) {
	t.Helper()
	if _, err := Run(f, ps, Options{VerifyEach: true}); err != nil {
		t.Fatal(err)
	}
}

func countOps(f *ir.Func, op ir.Op) int {
	n := 0
	for _, x := range f.Body {
		if x.Op == op {
			n++
		}
	}
	return n
}

func TestMatchAttentionModels(t *testing.T) {
	for _, tc := range []struct {
		model  string
		layers int
		form   string
	}{
		{"gpt_mini.onnx", 2, "decomposed"},
		{"llama_mini.onnx", 2, "decomposed"},
		{"llama_mini_op23.onnx", 2, "attention"},
		{"attn_mha.onnx", 1, "decomposed"},
	} {
		t.Run(tc.model, func(t *testing.T) {
			f := importModel(t, tc.model, map[string]int64{"batch": 2, "seq": 16})
			before := f.Clone()
			var res AttentionMatches
			runPasses(t, f, MatchAttention(MatchConfig{RequireAttention: true, Result: &res}))
			if len(res.Found) != tc.layers || len(res.Unmatched) != 0 {
				t.Fatalf("found %d (want %d), unmatched %v", len(res.Found), tc.layers, res.Unmatched)
			}
			for _, a := range res.Found {
				if a.Form != tc.form || !a.Causal || a.Mask != "" || a.QHeads != 4 || a.KVHeads != 4 {
					t.Errorf("found %+v", a)
				}
				want := 0.25 // 1/√16
				if tc.model == "attn_mha.onnx" {
					want = 1 / math.Sqrt(8)
				}
				if math.Abs(a.Scale-want) > 1e-6 {
					t.Errorf("%s: scale %g, want %g", a.Node, a.Scale, want)
				}
			}
			if n := countOps(f, ir.OpSoftmax); n != 0 {
				t.Errorf("%d softmax ops left:\n%s", n, ir.Print(f))
			}
			checkSame(t, before, f, randomInputs(f, 512, 1), 1e-6)
		})
	}
}

// A model's mask too large to evaluate (512² > the limit given) is built from
// Trilu and is classified by the symbolic proof alone.
func TestMatchAttentionProvedMask(t *testing.T) {
	for _, model := range []string{"gpt_mini.onnx", "llama_mini.onnx", "attn_mha.onnx"} {
		t.Run(model, func(t *testing.T) {
			f := importModel(t, model, map[string]int64{"batch": 1, "seq": 512})
			if countOps(f, ir.OpTrilu) == 0 {
				t.Fatal("the mask was folded; the test needs it computed")
			}
			res, err := FindAttention(f, MatchConfig{RequireAttention: true, MaskEvalLimit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range res.Found {
				if !a.Causal || a.Mask != "" {
					t.Errorf("found %+v", a)
				}
			}
		})
	}
}

func TestRequireAttention(t *testing.T) {
	// A softmax over q·kᵀ whose output feeds something other than a matmul by v.
	f, err := ir.Parse(`func @f(
    %0: f32[1,2,4,8] input "q",
    %1: f32[1,2,4,8] input "k",
) {
  %2 = matmul(%0, %1) {transpose_b} : f32[1,2,4,4] loc("qk")
  %3 = softmax(%2) {axis=-1} : f32[1,2,4,4] loc("probs")
  %4 = exp(%3) : f32[1,2,4,4] loc("odd")
  return %4 "y"
}
`)
	if err != nil {
		t.Fatal(err)
	}
	res, err := FindAttention(f, MatchConfig{RequireAttention: true})
	if err == nil || !strings.Contains(err.Error(), `"probs"`) {
		t.Fatalf("err = %v, want one naming the softmax", err)
	}
	if len(res.Unmatched) != 1 || strings.Join(res.Unmatched[0].Nodes, ",") != "qk,probs" {
		t.Errorf("unmatched %+v", res.Unmatched)
	}
	if _, err := FindAttention(f, MatchConfig{}); err != nil {
		t.Errorf("without RequireAttention: %v", err)
	}
}
