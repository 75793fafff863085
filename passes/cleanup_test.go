package passes

import (
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes/autodiff"
)

// TestCleanupPreservesResults runs every test model's forward and training graph
// before and after CSE and dead-code elimination: the results must not change (CSE
// only merges equal computations), and the passes must remove what they claim.
func TestCleanupPreservesResults(t *testing.T) {
	for _, model := range []string{"gpt_mini", "gpt_mini_loss", "llama_mini", "llama_mini_op23", "attn_mha"} {
		f := importModel(t, model+".onnx", map[string]int64{"batch": 2, "seq": 16})
		graphs := []*ir.Func{f}
		if loss := scalarOutput(f); loss != "" {
			g, err := autodiff.Grad(f, autodiff.Options{Loss: loss, KeepOutputs: true})
			if err != nil {
				t.Fatal(err)
			}
			graphs = append(graphs, g)
		}
		for _, g := range graphs {
			before := g.Clone()
			after := g.Clone()
			merged := CSE(after)
			removed := DeadCode(after)
			if err := ir.Verify(after); err != nil {
				t.Fatalf("%s: %v", model, err)
			}
			if len(after.Body) != len(before.Body)-merged-removed {
				t.Errorf("%s: %d nodes -> %d, but CSE merged %d and DCE removed %d", model,
					len(before.Body), len(after.Body), merged, removed)
			}
			checkSame(t, before, after, randomInputs(before, 512, 7), 0)
		}
	}
}

func scalarOutput(f *ir.Func) string {
	for _, o := range f.Outputs {
		if o.Value.Type.Numel() == 1 && o.Value.Type.DType.IsFloat() {
			return o.Name
		}
	}
	return ""
}
