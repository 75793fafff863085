package driver

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
)

// TestWindowReport: a model with a sliding-window layer reports it by its
// window, and --attention=dilated keeps that layer dense, saying why, while it
// dilates the others.
func TestWindowReport(t *testing.T) {
	f, err := Load(filepath.Join(td, "onnx", "llama_mini.onnx"), Bindings{SeqLen: 64, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(f, AttentionOptions{}, passes.Options{VerifyEach: true}); err != nil {
		t.Fatal(err)
	}
	var layers int
	for _, n := range f.Body {
		if n.Op == ir.OpAttention {
			if layers == 0 {
				n.Attrs = n.Attrs.With("window", int64(16))
			}
			layers++
		}
	}
	if layers < 2 {
		t.Fatalf("llama_mini has %d attention layers, want at least 2", layers)
	}
	p, err := Prepare(f, AttentionOptions{Mode: "dilated", Segments: []int64{16, 64}, Dilations: []int64{1, 2}},
		passes.Options{VerifyEach: true})
	if err != nil {
		t.Fatal(err)
	}
	a := p.Attention
	if a.Windows["16"] != 1 || len(a.Windows) != 1 {
		t.Errorf("windows %v, want one layer of 16", a.Windows)
	}
	if a.Rewritten["dilated"] != layers-1 || a.Rewritten["dense"] != 1 {
		t.Errorf("rewritten %v, want %d dilated and the windowed one dense", a.Rewritten, layers-1)
	}
	if a.Dilated == nil || len(a.Dilated.Skipped) != 1 || !strings.Contains(a.Dilated.Skipped[0], "window") {
		t.Errorf("dilated %+v: want the windowed layer named as kept dense", a.Dilated)
	}
	var windowed int
	for _, n := range f.Body {
		if n.Op == ir.OpAttention && ir.Window(n) == 16 {
			windowed++
		}
	}
	if windowed != 1 {
		t.Errorf("%d windowed attention ops after dilate-attention, want 1", windowed)
	}
}
