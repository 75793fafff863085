package driver

import (
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// TestWarningsUnreadInput: an input nothing reads is reported (PyTorch's exporter
// aliases two equal example inputs and reads one of them twice), after the
// importer's own findings.
func TestWarningsUnreadInput(t *testing.T) {
	b := ir.NewBuilder("f")
	ids := b.Input("input_ids", ir.T(tensor.I64, 2, 3))
	b.Label("labels", ir.T(tensor.I64, 2, 3))
	b.Output("y", b.Cast(ids, tensor.F32))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	f.Notes = []string{"folded"}
	w := Warnings(f)
	if len(w) != 2 || w[0] != "folded" || !strings.Contains(w[1], `input "labels" is never read`) {
		t.Errorf("warnings %q", w)
	}
}

// TestStaticBatch: a model exported with one sequence has a static batch, which is
// the model's batch: --batch may only repeat it, and is refused naming the input.
func TestStaticBatch(t *testing.T) {
	const long = "../testdata/hf/hf_llama_gqa_eager_long.onnx"
	for _, batch := range []int64{0, 1} {
		f, err := Load(long, Bindings{SeqLen: 8, Batch: batch})
		if err != nil {
			t.Fatalf("--batch %d: %v", batch, err)
		}
		if got := f.Params[0].Value.Type.Shape; got[0] != 1 || got[1] != 8 {
			t.Errorf("--batch %d: input %q is %v, want [1 8]", batch, f.Params[0].Name, got)
		}
	}
	_, err := Load(long, Bindings{SeqLen: 8, Batch: 2})
	if err == nil || !strings.Contains(err.Error(), `--batch 2: the model's batch is static: dim 0 of input "input_ids" is 1`) {
		t.Errorf("--batch 2: %v", err)
	}
	// A named batch dim is still bound by --batch.
	f, err := Load("../testdata/hf/hf_llama_gqa_eager.onnx", Bindings{SeqLen: 8, Batch: 3})
	if err != nil || f.Params[0].Value.Type.Shape[0] != 3 {
		t.Errorf("named batch: %v", err)
	}
}

// TestCheckTrainableRefusesFoldedParameters: Gemma's norms scale by 1 + w, which
// the exporter folds into one constant for all five norms; lcc train refuses the
// file, naming the parameters and the export that keeps them apart.
func TestCheckTrainableRefusesFoldedParameters(t *testing.T) {
	f, err := Load("../testdata/trajectory/gemma.onnx", Bindings{SeqLen: 8})
	if err != nil {
		t.Fatal(err)
	}
	err = CheckTrainable(f)
	if err == nil || !strings.Contains(err.Error(), "m.model.norm.weight") ||
		!strings.Contains(err.Error(), "optimize=False") {
		t.Errorf("gemma: %v", err)
	}
	if f, err = Load("../testdata/trajectory/gpt_neox.onnx", Bindings{SeqLen: 8}); err != nil {
		t.Fatal(err)
	}
	if err := CheckTrainable(f); err != nil {
		t.Errorf("gpt_neox (its merged norms are split back): %v", err)
	}
}
