package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/internal/userfile/fifotest"
)

// TestNamedPipesRefused: a named pipe wherever lcc reads a file a user names
// (the model, its external data, an .lcc model's weights, --ref, --inputs,
// --target-file, tokens:, bytes:, a checkpoint's JSON, the model a checkpoint
// names) fails at once with status 1, naming the pipe; none hangs.
func TestNamedPipesRefused(t *testing.T) {
	dir := t.TempDir()
	pipe := func(name string) string { return fifotest.Make(t, dir, name) }
	gpt := filepath.Join(td, "onnx", "gpt_mini.onnx")

	ext := filepath.Join(dir, "ext", "llama_mini_extdata.onnx")
	os.MkdirAll(filepath.Dir(ext), 0o755)
	raw, err := os.ReadFile(filepath.Join(td, "onnx", "llama_mini_extdata.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(ext, raw, 0o644)
	extData := pipe("ext/llama_mini_extdata.onnx.data")

	lccModel := filepath.Join(dir, "lcc", "model.lcc")
	os.MkdirAll(filepath.Dir(lccModel), 0o755)
	block, err := os.ReadFile(filepath.Join("..", "..", "ir", "testdata", "block.lcc"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(lccModel, block, 0o644)
	lccWeights := pipe("lcc/model.safetensors")

	ck := filepath.Join(dir, "ck")
	ckJSON := pipe("ck/ckpt-00000001.json")
	// A checkpoint whose JSON names a pipe as the model (export --format=onnx).
	named := filepath.Join(dir, "named")
	if _, stderr, code := lcc(t, "train", gpt, "--data=synthetic:copy", "--seq-len=16", "--steps=1",
		"--checkpoint-dir="+named); code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	namedJSON := filepath.Join(named, "ckpt-00000001.json")
	var m map[string]any
	js, _ := os.ReadFile(namedJSON)
	json.Unmarshal(js, &m)
	m["model"] = pipe("model-of-checkpoint.onnx")
	js, _ = json.Marshal(m)
	os.WriteFile(namedJSON, js, 0o644)

	out := filepath.Join(dir, "out")
	train := []string{"train", gpt, "--seq-len=16", "--steps=1"}
	model, lccPipe, refPipe, inPipe := pipe("model.onnx"), pipe("pipe.lcc"), pipe("ref.safetensors"),
		pipe("in.safetensors")
	targetPipe, toks, text := pipe("t.json"), pipe("toks.bin"), pipe("text.txt")
	for _, c := range []struct {
		args  []string
		pipe  string
		extra string
	}{
		{[]string{"compile", model, "--seq-len=8"}, model, ""},
		{[]string{"compile", lccPipe}, lccPipe, ""},
		{[]string{"compile", ext, "--seq-len=8"}, extData, ""},
		{[]string{"compile", lccModel}, lccWeights, ""},
		{[]string{"check", gpt, "--ref", refPipe}, refPipe, ""},
		{[]string{"run", gpt, "--inputs", inPipe}, inPipe, ""},
		{[]string{"compile", gpt, "--seq-len=8", "--target-file", targetPipe}, targetPipe, ""},
		{append(train, "--data=tokens:"+toks), toks, ""},
		{append(train, "--data=bytes:"+text), text, ""},
		{[]string{"export", ck, "-o", out}, ckJSON, "no valid checkpoint"},
		{[]string{"export", named, "--format=onnx", "-o", out}, m["model"].(string), ""},
	} {
		var stdout, stderr string
		var code int
		fifotest.Within(t, 30*time.Second, []string{c.pipe}, func() {
			stdout, stderr, code = lcc(t, c.args...)
		})
		if code != 1 || !strings.Contains(stderr, "not a regular file (a named pipe)") ||
			!strings.Contains(stderr, filepath.Base(c.pipe)) || !strings.Contains(stderr, c.extra) {
			t.Errorf("lcc %s: exit %d, want 1 and an error naming the pipe %s:\n%s%s",
				strings.Join(c.args, " "), code, c.pipe, stdout, stderr)
		}
	}
}
