package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEmitMemory: compile --emit=memory writes a valid PNG, byte-identical
// across compiles, with the measured peak of a --metrics file; bad uses are
// refused with the flag named.
func TestEmitMemory(t *testing.T) {
	model := filepath.Join(td, "onnx", "llama_mini.onnx")
	metrics := filepath.Join(t.TempDir(), "metrics.jsonl")
	if err := os.WriteFile(metrics, []byte(`{"step":1,"loss":6.2,"measured_peak_bytes":700000000}`+"\n"+
		`{"step":2,"loss":6.1,"measured_peak_bytes":710000000}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var prev []byte
	for i := range 2 {
		dir := t.TempDir()
		_, stderr, code := lcc(t, "compile", model, "--target=h200x1", "--seq-len=64", "--precision=bf16",
			"--emit=memory", "--measured", metrics, "-o", dir)
		if code != 0 {
			t.Fatalf("compile: exit %d\n%s", code, stderr)
		}
		data, err := os.ReadFile(filepath.Join(dir, "memory.png"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(bytes.NewReader(data)); err != nil {
			t.Fatalf("memory.png: %v", err)
		}
		if i == 1 && !bytes.Equal(prev, data) {
			t.Error("memory.png differs between two compiles")
		}
		prev = data
	}
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	os.WriteFile(empty, []byte(`{"step":1,"loss":6.2}`+"\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--emit=memory", "--measured", empty}, "no line has measured_peak_bytes"},
		{[]string{"--measured", metrics}, "--measured needs --emit=memory"},
		{[]string{"--emit=memory", "--target=cpu"}, "--emit=memory: no arena to draw"},
		{[]string{"--emit=pictures"}, "want onnx, dot or memory"},
	} {
		args := append([]string{"compile", model, "--seq-len=64", "-o", t.TempDir()}, c.args...)
		if _, stderr, code := lcc(t, args...); code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want 1 and %q:\n%s", c.args, code, c.want, stderr)
		}
	}
}
