package passes

import (
	"path/filepath"
	"testing"

	"github.com/lcc-dev/lcc/frontends/onnx"
	"github.com/lcc-dev/lcc/ir"
)

// TestMatchNormsModels runs match-norms on the exported Llama models (every
// RMSNorm is the exporter's decomposition) and on GPT-style models (LayerNorm
// arrives as one op already), and compares each function's outputs before and
// after on the CPU.
func TestMatchNormsModels(t *testing.T) {
	for _, c := range []struct {
		dir, model string
		rms, ln    int // norms expected after the pass
	}{
		{"onnx", "llama_mini.onnx", 5, 0},
		{"hf", "hf_llama_gqa_eager.onnx", 5, 0},
		{"hf", "hf_llama_gqa_sdpa.onnx", 5, 0},
		{"onnx", "gpt_mini.onnx", 0, 5},
	} {
		t.Run(c.model, func(t *testing.T) {
			m, err := onnx.Load(filepath.Join("..", "testdata", c.dir, c.model), onnx.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			f, err := onnx.Import(m, onnx.ImportOptions{Dims: map[string]int64{"batch": 2, "seq": 16,
				"batch_size": 2, "sequence_length": 16}})
			if err != nil {
				t.Fatal(err)
			}
			before := f.Clone()
			runPasses(t, f, MatchNorms, EliminateDeadCode)
			if got := countOps(f, ir.OpRMSNorm); got != c.rms {
				t.Errorf("%d rms_norm ops, want %d", got, c.rms)
			}
			if got := countOps(f, ir.OpLayerNorm); got != c.ln {
				t.Errorf("%d layer_norm ops, want %d", got, c.ln)
			}
			for _, n := range f.Body {
				if n.Op == ir.OpSqrt || n.Op == ir.OpRsqrt {
					t.Errorf("%s left after match-norms", n.Where())
				}
			}
			checkSame(t, before, f, randomInputs(f, 64, 5), 1e-6)
		})
	}
}
