package passes

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/frontends/onnx"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/tensor"
)

// TestCancelTransposesModels runs cancel-transposes after the forward rewrites of
// every test model (what the driver's pipeline does before autodiff) and checks on
// the CPU interpreter, in f64 and in f32, that the outputs and, after autodiff
// seeded on every float output, all gradients are unchanged. The models whose
// attention is rotated by RoPE in the [B,H,T,D] layout lose every transpose.
func TestCancelTransposesModels(t *testing.T) {
	var paths []string
	for _, dir := range []string{"hf", "onnx"} {
		ps, err := filepath.Glob(filepath.Join("..", "testdata", dir, "*.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, ps...)
	}
	// transposes left after the pass (before it: the count in the comment).
	want := map[string]int{
		"hf_llama_gqa_d128_sdpa":  0, // 8
		"hf_llama_gqa_eager":      0, // 8
		"hf_llama_gqa_sdpa":       0, // 8
		"hf_llama_gqa_eager_long": 0, // 8
		"hf_llama_gqa_sdpa_long":  0, // 8
		"llama_mini":              0, // 8
		"llama_mini_extdata":      0, // 8
		"llama_mini_op23":         0, // 16
	}
	rewritten := 0
	for _, path := range paths {
		for _, fold := range []int64{0, 64} {
			name := strings.TrimSuffix(filepath.Base(path), ".onnx")
			sub := name
			if fold != 0 {
				// RoPE's tables computed at run time, as for a sequence too long
				// to fold them: they follow the region by a reshape.
				sub += "/unfolded"
			}
			t.Run(sub, func(t *testing.T) {
				f := forwardModel(t, path, fold)
				g := f.Clone()
				runPasses(t, g, CancelTransposes, EliminateDeadCode)
				before, after := countOps(f, ir.OpTranspose), countOps(g, ir.OpTranspose)
				t.Logf("transposes: %d before, %d after", before, after)
				left := after
				if fold != 0 {
					// Unfolded, HF's frequency table keeps its own small transpose
					// ([1,D/2,T] to [1,T,D/2]); no head-layout (rank-4) one may stay.
					left = countRank4Transposes(g)
				}
				if w, ok := want[name]; ok && left != w {
					t.Errorf("%d transposes left (of %d), want %d", left, before, w)
				}
				if after > before {
					t.Fatalf("the pass added transposes")
				}
				if after == before {
					return // nothing to compare: the pass left the function alone
				}
				if fold == 0 {
					rewritten++
				}
				seeds := map[string]string{}
				for _, o := range f.Outputs {
					if o.Value.Type.DType.IsFloat() {
						seeds[o.Name] = "d." + o.Name
					}
				}
				gf, err := autodiff.Grad(f, autodiff.Options{Seeds: seeds, KeepOutputs: true})
				if err != nil {
					t.Fatal(err)
				}
				gg, err := autodiff.Grad(g, autodiff.Options{Seeds: seeds, KeepOutputs: true})
				if err != nil {
					t.Fatal(err)
				}
				if n := countOps(gg, ir.OpTranspose); n > 2*after {
					t.Errorf("the backward holds %d transposes", n)
				}
				in := formInputs(gf, 32)
				for _, prec := range []tensor.DType{tensor.F64, tensor.F32} {
					sameOutputs(t, gf, gg, in, prec, 1e-6)
				}
			})
		}
	}
	if rewritten < len(want) {
		t.Errorf("%d models rewritten, want at least %d", rewritten, len(want))
	}
}

// forwardModel imports a test model at batch 2 and 16 tokens, folding constants
// of up to foldLimit elements (0: the importer's default), and runs the forward
// rewrites that precede cancel-transposes in the driver's pipeline.
func forwardModel(t *testing.T, path string, foldLimit int64) *ir.Func {
	t.Helper()
	m, err := onnx.Load(path, onnx.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := onnx.Import(m, onnx.ImportOptions{Dims: map[string]int64{"batch": 2, "seq": 16,
		"batch_size": 2, "sequence_length": 16}, FoldLimit: foldLimit})
	if err != nil {
		t.Fatal(err)
	}
	runPasses(t, f, append([]Pass{MatchAttention(MatchConfig{}), MatchNorms}, Cleanup...)...)
	return f
}

// sameOutputs runs both functions at precision prec and compares every output by
// relative L2 error.
func sameOutputs(t *testing.T, before, after *ir.Func, in map[string]*tensor.Tensor,
	prec tensor.DType, tol float64) {
	t.Helper()
	want, err := interp.Run(before, in, interp.Options{Precision: prec})
	if err != nil {
		t.Fatalf("before: %v", err)
	}
	got, err := interp.Run(after, in, interp.Options{Precision: prec})
	if err != nil {
		t.Fatalf("after: %v", err)
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if e := relErr(got[name], want[name]); !(e <= tol) {
			t.Errorf("%s output %s: relative error %.3g > %g", prec, name, e, tol)
		}
	}
	if len(names) == 0 {
		t.Fatal("no outputs")
	}
}

// countRank4Transposes counts the transposes of f that move rank-4 values: the
// head-layout ones around attention.
func countRank4Transposes(f *ir.Func) int {
	n := 0
	for _, x := range f.Body {
		if x.Op == ir.OpTranspose && x.Result().Type.Rank() == 4 {
			n++
		}
	}
	return n
}
