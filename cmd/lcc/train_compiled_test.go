package main

import (
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var programLine = regexp.MustCompile(`(?m)^program +(sha256:[0-9a-f]{64})$`)

// TestTrainCompiledGraph: lcc compile -o DIR then lcc train DIR/graph.lcc is the
// run lcc train MODEL.onnx makes with the same flags: the same program hash (the
// one the compile report prints) and bit-identical per-step losses. The flags
// exercise LongNet attention, per-layer checkpoints and fused cross-entropy;
// graph.lcc takes them from DIR/report.json, so none is repeated.
func TestTrainCompiledGraph(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(td, "onnx", "llama_mini.onnx")
	flags := []string{"--attention=dilated", "--segments=8,16", "--dilations=1,2", "--checkpoint=layers",
		"--seq-len=32", "--batch=1", "--loss=cross-entropy"}
	runFlags := []string{"--data=synthetic:copy", "--steps=3", "--lr=3e-3", "--device=cpu"}
	trainFlags := append(runFlags, flags...)

	rep, stderr, code := lcc(t, append([]string{"compile", model, "-o", dir}, flags...)...)
	if code != 0 {
		t.Fatalf("compile: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"rewritten dilated=", "checkpoint layers:", "fused CE   1"} {
		if !strings.Contains(rep, want) {
			t.Errorf("the compile report lacks %q:\n%s", want, rep)
		}
	}
	m1, m2 := filepath.Join(dir, "onnx.jsonl"), filepath.Join(dir, "graph.jsonl")
	out1, stderr, code := lcc(t, append([]string{"train", model, "--metrics=" + m1}, trainFlags...)...)
	if code != 0 {
		t.Fatalf("train model.onnx: exit %d: %s", code, stderr)
	}
	out2, stderr, code := lcc(t, append([]string{"train", filepath.Join(dir, "graph.lcc"), "--metrics=" + m2},
		runFlags...)...)
	if code != 0 {
		t.Fatalf("train graph.lcc: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out2, "checkpoint policy layers") {
		t.Errorf("graph.lcc's run does not name the policy it was compiled with:\n%s", out2)
	}
	h0, h1, h2 := programLine.FindStringSubmatch(rep), programLine.FindStringSubmatch(out1),
		programLine.FindStringSubmatch(out2)
	if h0 == nil || h1 == nil || h2 == nil || h0[1] != h1[1] || h1[1] != h2[1] {
		t.Errorf("program hashes differ or are missing: compile %v, train onnx %v, train graph.lcc %v", h0, h1, h2)
	}
	a, b := metricLosses(t, m1), metricLosses(t, m2)
	if len(a) != 3 || len(b) != 3 {
		t.Fatalf("%d and %d losses, want 3", len(a), len(b))
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			t.Errorf("step %d: loss %v from graph.lcc, %v from the model", i+1, b[i], a[i])
		}
	}
	t.Logf("program %s, losses %v", h1[1], a)

	// A flag that contradicts the record is refused, naming both values; one
	// that repeats it is fine.
	for _, c := range []struct{ flag, want string }{
		{"--checkpoint=none", "--checkpoint=none: " + filepath.Join(dir, "graph.lcc") + " is a compiled step, and " +
			filepath.Join(dir, "report.json") + " records --checkpoint=layers"},
		{"--seq-len=16", "records --seq-len=32"},
		{"--segments=8,32", "--segments=8,32: "},
		{"--precision=bf16", "records --precision=fp32"},
		{"--cuda-graph=off", "records --cuda-graph=on"},
		{"--ranks=2", "--ranks=2: " + filepath.Join(dir, "graph.lcc") + " is a compiled one-GPU step"},
		// A recompile for the GPU found needs one.
		{"--recompile-for-device",
			"--recompile-for-device compiles the step for the GPU found: it needs --device=cuda"},
	} {
		_, stderr, code = lcc(t, "train", filepath.Join(dir, "graph.lcc"), "--data=synthetic:copy", "--steps=1",
			c.flag)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("graph.lcc %s: exit %d: %s, want %q", c.flag, code, stderr, c.want)
		}
	}
	out3, stderr, code := lcc(t, "compile", filepath.Join(dir, "graph.lcc"), "--attention=dilated",
		"--checkpoint=layers")
	if h3 := programLine.FindStringSubmatch(out3); code != 0 || h3 == nil || h3[1] != h0[1] {
		t.Errorf("compile graph.lcc with some of its flags: exit %d, hash %v, want %s: %s", code, h3, h0[1], stderr)
	}
}

// TestTrainFlagsAsCompile: lcc train refuses bad pipeline flags with compile's
// messages.
func TestTrainFlagsAsCompile(t *testing.T) {
	model := filepath.Join(td, "onnx", "gpt_mini.onnx")
	for _, tc := range []struct {
		flag, want string
	}{
		{"--loss=mse", `--loss "mse": want auto, cross-entropy, model, none`},
		{"--loss=none", "nothing to train"},
		{"--checkpoint=some", `--checkpoint "some"`},
		{"--target=tpu", "--target"},
		{"--precision=fp8", `--precision "fp8"`},
		{"--cuda-graph=maybe", `--cuda-graph "maybe": want on or off`},
		{"--segments=8", "--segments and --dilations need --attention=dilated"},
	} {
		for _, cmd := range []string{"compile", "train"} {
			_, stderr, code := lcc(t, cmd, model, "--seq-len=16", "--data=synthetic:copy", "--steps=1", tc.flag)
			if cmd == "compile" {
				if tc.flag == "--loss=none" {
					continue // inference: fine for compile
				}
				_, stderr, code = lcc(t, cmd, model, "--seq-len=16", tc.flag)
			}
			if code != 1 || !strings.Contains(stderr, tc.want) {
				t.Errorf("lcc %s %s: exit %d: %s, want %q", cmd, tc.flag, code, stderr, tc.want)
			}
		}
	}
}
