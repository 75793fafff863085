package onnx

import (
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/tensor"
)

// TestExportRoundTrip exports a rewritten model (dilated attention is an ai.lcc
// op) and decodes it again with lcc's own validating decoder.
func TestExportRoundTrip(t *testing.T) {
	m, err := Load("../../testdata/onnx/llama_mini.onnx", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Import(m, ImportOptions{Dims: map[string]int64{"batch": 1, "seq": 32}})
	if err != nil {
		t.Fatal(err)
	}
	pl := []passes.Pass{passes.MatchAttention(passes.MatchConfig{}),
		passes.DilateAttention(passes.DilateConfig{Segments: []int64{8, 16}, Dilations: []int64{1, 2}})}
	if _, err := passes.Run(f, append(pl, passes.Cleanup...), passes.Options{VerifyEach: true}); err != nil {
		t.Fatal(err)
	}
	data, err := Export(f)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Export(f)
	if err != nil || string(again) != string(data) {
		t.Fatal("export is not deterministic")
	}
	back, err := Decode(data, "", LoadOptions{Source: "export"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(back.Graph.Nodes), len(f.Body)+len(f.Outputs); got != want {
		t.Errorf("%d nodes, want %d", got, want)
	}
	dilated, std := 0, 0
	for _, n := range back.Graph.Nodes {
		switch {
		case n.Domain == LCCDomain && n.OpType == "dilated_attention":
			dilated++
			if a := n.Attrs["segments"]; len(a.Ints) != 2 {
				t.Errorf("segments attribute lost: %+v", a)
			}
		case n.Domain == "":
			std++
		}
	}
	// The projections are matmul(x, W) {transpose_b} (PyTorch's Linear layout),
	// an ai.lcc op; RMSNorm's Mul, Add and the like stay standard ops.
	if dilated != 2 || std == 0 {
		t.Errorf("dilated_attention ×%d (want 2), standard ops ×%d", dilated, std)
	}
	for _, p := range f.Params {
		if p.Data == nil {
			continue
		}
		if got := back.Graph.Initializers[p.Name]; got == nil || !tensor.Equal(got, p.Data) {
			t.Errorf("initializer %s differs", p.Name)
		}
	}
	if ds := sortedDomains(back); len(ds) != 2 || ds[1] != LCCDomain {
		t.Errorf("domains %v", ds)
	}
	if dot := ir.DOT(f); len(dot) == 0 || dot[:7] != "digraph" {
		t.Errorf("DOT output %q", dot[:20])
	}
}
