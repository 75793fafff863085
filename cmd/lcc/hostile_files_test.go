package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/internal/userfile/fifotest"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/tensor"
)

// TestNamedPipesRefused: a named pipe wherever lcc reads a file a user names
// (the model, its external data, an .lcc model's weights, --ref, --inputs,
// --target-file, tokens:, bytes:, a checkpoint's JSON, the model a checkpoint
// names, --measured, a compiled step's report.json) fails at once with status
// 1, naming the pipe; none hangs.
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

	// A compiled step whose report.json is a pipe.
	compiled := filepath.Join(dir, "compiled")
	if _, stderr, code := lcc(t, "compile", gpt, "--seq-len=16", "-o", compiled); code != 0 {
		t.Fatalf("compile: exit %d: %s", code, stderr)
	}
	os.Remove(filepath.Join(compiled, "report.json"))
	report := pipe("compiled/report.json")

	out := filepath.Join(dir, "out")
	train := []string{"train", gpt, "--seq-len=16", "--steps=1"}
	model, lccPipe, refPipe, inPipe := pipe("model.onnx"), pipe("pipe.lcc"), pipe("ref.safetensors"),
		pipe("in.safetensors")
	targetPipe, toks, text, measured := pipe("t.json"), pipe("toks.bin"), pipe("text.txt"),
		pipe("m.jsonl")
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
		{[]string{"compile", gpt, "--seq-len=8", "--emit=memory", "-o", filepath.Join(dir, "mem"),
			"--measured", measured}, measured, "--measured"},
		{[]string{"train", filepath.Join(compiled, "graph.lcc"), "--data=synthetic:copy", "--seq-len=16",
			"--steps=1"}, report, ""},
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

// TestExportRefusesInconsistent: lcc export, in both formats, passes over a
// newest checkpoint that --resume would refuse (a step of 99 or -5 in a file
// named step 2; an empty weight) and exports the one before, saying which it
// skipped; asked for that checkpoint by --step, it fails naming the problem.
func TestExportRefusesInconsistent(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	gpt := filepath.Join(td, "onnx", "gpt_mini.onnx")
	if _, stderr, code := lcc(t, "train", gpt, "--data=synthetic:copy", "--seq-len=16", "--steps=2",
		"--checkpoint-every=1", "--checkpoint-dir="+ck); code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	newest := filepath.Join(ck, "ckpt-00000002")
	js, _ := os.ReadFile(newest + ".json")
	st, err := safetensors.Read(newest + ".safetensors")
	if err != nil {
		t.Fatal(err)
	}
	// An empty weight, with its optimizer state and the digest to match.
	empty := map[string]*tensor.Tensor{}
	for name, x := range st.Tensors {
		empty[name] = x
		if strings.HasSuffix(name, "tok.weight") {
			empty[name] = tensor.New(x.DType, 0, x.Shape[1])
		}
	}
	emptied, err := safetensors.Encode(nil, empty, st.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(emptied)
	var m map[string]any
	json.Unmarshal(js, &m)
	old := m["tensors_sha256"].(string)

	out := filepath.Join(dir, "w.out")
	for _, c := range []struct {
		name       string
		json, data []byte
		why        string
	}{
		{"step 99", []byte(strings.Replace(string(js), `"step": 2,`, `"step": 99,`, 1)), nil,
			"records step 99, its name step 2"},
		{"step -5", []byte(strings.Replace(string(js), `"step": 2,`, `"step": -5,`, 1)), nil,
			"records step -5, its name step 2"},
		{"empty weight", []byte(strings.Replace(string(js), old, hex.EncodeToString(sum[:]), 1)), emptied,
			"f32[0,64], empty"},
	} {
		os.WriteFile(newest+".json", c.json, 0o644)
		if c.data != nil {
			os.WriteFile(newest+".safetensors", c.data, 0o644)
		}
		for _, format := range []string{"safetensors", "onnx"} {
			stdout, stderr, code := lcc(t, "export", ck, "--format="+format, "-o", out)
			if code != 0 || !strings.Contains(stderr, "lcc: warning: skipped "+newest+".json") ||
				!strings.Contains(stderr, c.why) || !strings.Contains(stdout, "(step 1)") {
				t.Errorf("%s, --format=%s: exit %d, want step 1 exported and step 2 skipped:\n%s%s",
					c.name, format, code, stdout, stderr)
			}
		}
		_, stderr, code := lcc(t, "export", ck, "--step=2", "-o", out)
		if code != 1 || !strings.Contains(stderr, c.why) {
			t.Errorf("%s, --step=2: exit %d, want 1 and why:\n%s", c.name, code, stderr)
		}
	}
}
