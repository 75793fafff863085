package onnx

import (
	"slices"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// TestConsumeReleasesFoldedWeights: with ImportOptions.Consume, each
// initializer that Import replaced by its transpose (an exporter's folded
// Linear weight) keeps its dtype and shape but no data, and the imported func
// is the one an import without it gives, weights included.
func TestConsumeReleasesFoldedWeights(t *testing.T) {
	for _, path := range []string{"../../testdata/trajectory/gemma.onnx", "../../testdata/trajectory/qwen2_d64.onnx",
		"../../testdata/trajectory/gpt_neox.onnx"} {
		t.Run(path, func(t *testing.T) {
			keep, err := Load(path, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want, err := Import(keep, ImportOptions{Dims: map[string]int64{"batch": 2, "seq": 16}})
			if err != nil {
				t.Fatal(err)
			}
			m, err := Load(path, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := Import(m, ImportOptions{Dims: map[string]int64{"batch": 2, "seq": 16},
				Consume: true})
			if err != nil {
				t.Fatal(err)
			}
			released := 0
			for name, x := range m.Graph.Initializers {
				if n, _ := tensor.Numel(x.Shape); x.F == nil && x.I == nil && n > 0 {
					released++
					if len(x.Shape) != 2 || !sameShape(x.Shape, keep.Graph.Initializers[name].Shape) {
						t.Errorf("%s: released initializer %q has shape %v", path, name, x.Shape)
					}
				}
			}
			if released == 0 {
				t.Errorf("%s: no initializer released", path)
			}
			if ir.Digest(got) != ir.Digest(want) {
				t.Errorf("%s: the consuming import differs:\n%s\nwant\n%s", path, ir.Print(got), ir.Print(want))
			}
			for i, p := range got.Params {
				if q := want.Params[i]; (p.Data == nil) != (q.Data == nil) || p.Data != nil && !slices.Equal(p.Data.F, q.Data.F) {
					t.Errorf("%s: weight %q differs", path, p.Name)
				}
			}
		})
	}
}
