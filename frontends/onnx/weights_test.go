package onnx

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/tensor"
)

// TestWithWeightsSplitsCSE: GPT-NeoX's file has one LayerNorm node per layer for
// its two norms; trained weights written back give the second norm its node
// again, with initializers of its own, so the file imports to the trained
// weights, the two norms apart.
func TestWithWeightsSplitsCSE(t *testing.T) {
	const model = "trajectory/gpt_neox.onnx"
	f := importFile(t, model, nil)
	weights := map[string]*tensor.Tensor{}
	for _, p := range f.Params {
		if p.Data != nil && !p.Frozen {
			w := p.Data.Clone()
			if strings.Contains(p.Name, "post_attention_layernorm") {
				for i := range w.F {
					w.F[i] = 2 + float64(i)/64 // as if trained apart from the input norm (f32-exact)
				}
			}
			weights[p.Name] = w
		}
	}
	raw, _, err := WithWeights(filepath.Join("..", "..", "testdata", model), weights)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(raw, "", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	back, err := Import(m, ImportOptions{Dims: map[string]int64{"batch": 2, "seq": 16}})
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range weights {
		p := back.Param(name)
		if p == nil || p.Data == nil || !slices.Equal(p.Data.F, w.F) {
			t.Errorf("%s: imported back as %v, want the trained value", name, p)
		}
	}
	if r := strings.Join(back.Remarks, " "); strings.Contains(r, "post_attention_layernorm") {
		t.Errorf("the written file still merges the norms: %s", r)
	}
}
