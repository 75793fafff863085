package driver

import (
	"path/filepath"
	"strings"
	"testing"
)

// A step compiled with --fuse=on and written as lcc compile -o does reads back
// (graph.lcc holds its fused_elementwise nodes) as the same program under
// --fuse=on; without it the recorded pipeline refuses it; compiled again for
// another arch (--recompile-for-device), its plan still records the fusion.
func TestCompiledFusedStep(t *testing.T) {
	h200 := mustTarget(t, "h200x1")
	model := filepath.Join("..", "testdata", "onnx", "llama_mini.onnx")
	opts := CompileOptions{Target: h200, Model: model, Options: Options{Fuse: "on"}}
	res, graph := compiledFolder(t, Bindings{SeqLen: 16}, opts)
	if res.Report.Fusion == nil || len(res.Report.Fusion.Groups) == 0 {
		t.Fatal("nothing fused")
	}
	again := recompile(t, graph, opts)
	if again.Hash != res.Hash {
		t.Errorf("graph.lcc compiles to %s, the model to %s", again.Hash, res.Hash)
	}
	opts.Model = graph
	g, _ := Load(graph, Bindings{})
	opts.Fuse = "off"
	if _, err := Compile(g, opts); err == nil || !strings.Contains(err.Error(), "fuse max-ops=32") {
		t.Errorf("--fuse=off on a fused step: %v", err)
	}
	hopper, err := h200.WithArch("sm_90")
	if err != nil {
		t.Fatal(err)
	}
	g, _ = Load(graph, Bindings{})
	opts.Fuse, opts.Target, opts.ForDevice = "on", hopper, true
	dev, err := Compile(g, opts)
	if err != nil {
		t.Fatal(err)
	}
	if dev.Program == nil || !dev.Program.Plan.Fused || dev.Hash == res.Hash {
		t.Errorf("recompiled for sm_90: program %v, hash %s (was %s)", dev.Program != nil, dev.Hash, res.Hash)
	}
}
