package driver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadVerifiesFolder: every loader of DIR/graph.lcc (lcc train, check, run
// and compile go through Load) refuses a compiled folder that is not as the
// compile wrote it, naming the file, and the manifest records the program hash.
func TestLoadVerifiesFolder(t *testing.T) {
	model := filepath.Join("..", "testdata", "onnx", "gpt_mini.onnx")
	f, err := Load(model, Bindings{SeqLen: 16})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Compile(f, CompileOptions{Target: mustTarget(t, "h200x1"), Model: model})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "out")
	if err := WriteFolder(dir, res, OutputOptions{Emit: []string{"dot"}}); err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil || !strings.Contains(string(manifest), `"program": "`+res.Hash+`"`) {
		t.Fatalf("manifest.json lacks the program hash %s: %s %v", res.Hash, manifest, err)
	}
	graph := filepath.Join(dir, "graph.lcc")
	if _, err := Load(graph, Bindings{}); err != nil {
		t.Fatal(err)
	}
	weights := filepath.Join(dir, "weights.safetensors")
	data, _ := os.ReadFile(weights)
	data[len(data)-1] ^= 1
	os.WriteFile(weights, data, 0o644)
	_, err = Load(graph, Bindings{})
	if err == nil || !strings.Contains(err.Error(), weights+": edited since compile (sha256 mismatch with manifest.json)") {
		t.Errorf("Load after editing the weights: %v", err)
	}
	if VerifyFolder(dir) == nil {
		t.Error("VerifyFolder passed an edited folder")
	}
	// A text IR file outside a compiled folder loads unverified.
	plain := filepath.Join(t.TempDir(), "graph.lcc")
	src, _ := os.ReadFile(graph)
	os.WriteFile(plain, src, 0o644)
	if _, err := Load(plain, Bindings{}); err != nil {
		t.Errorf("a plain .lcc file: %v", err)
	}
}
