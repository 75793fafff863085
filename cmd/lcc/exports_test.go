package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/frontends/onnx"
	"github.com/lcc-dev/lcc/ir"
)

// compileJSON runs lcc compile --report=json and decodes the report.
func compileJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	out, stderr, code := lcc(t, append([]string{"compile", "--report=json"}, args...)...)
	if code != 0 {
		t.Fatalf("lcc compile %v: exit %d\n%s", args, code, stderr)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("lcc compile %v: %v", args, err)
	}
	return rep
}

// The Hugging Face Llama exports build their causal mask in the graph (Range,
// comparisons, the packed-sequence check, Where of finfo.min). At a million tokens
// the mask cannot be evaluated; match-attention proves it causal, so both layers
// become causal attention that dilated attention and ring sharding take.
func TestHuggingFaceMasksAtOneMillionTokens(t *testing.T) {
	for _, m := range []string{"hf_llama_gqa_eager", "hf_llama_gqa_sdpa"} {
		model := filepath.Join(td, "hf", m+".onnx")
		for _, tc := range []struct {
			flags     []string
			rewritten string // the attention.rewritten key that must count both layers
			sharding  string // the sharding mode, "" for none
		}{
			{[]string{"--target=a100x8", "--attention=dilated"}, "dilated", "dilated"},
			{[]string{"--target=a100x8", "--attention=ring"}, "dense", "ring"},
			{[]string{"--target=h200x1"}, "dense", ""},
		} {
			rep := compileJSON(t, append([]string{model, "--seq-len=1048576"}, tc.flags...)...)
			att := rep["attention"].(map[string]any)
			rw := att["rewritten"].(map[string]any)
			if att["found"] != 2.0 || rw[tc.rewritten] != 2.0 || len(att["unmatched"].([]any)) != 0 {
				t.Errorf("%s %v: attention %v, want 2 found and 2 %s", m, tc.flags, att, tc.rewritten)
			}
			sh, _ := rep["sharding"].(map[string]any)
			switch {
			case tc.sharding == "" && sh != nil:
				t.Errorf("%s %v: sharded %v", m, tc.flags, sh)
			case tc.sharding != "" && (sh == nil || sh["mode"] != tc.sharding || sh["ranks"] != 8.0):
				t.Errorf("%s %v: sharding %v, want %s over 8 ranks", m, tc.flags, sh, tc.sharding)
			}
		}
		// The attention ops carry the causal flag and no mask argument.
		_, stderr, code := lcc(t, "compile", model, "--seq-len=1048576", "--print-ir-after=match-attention")
		if n := strings.Count(stderr, "= attention("); code != 0 || n != 2 ||
			strings.Count(stderr, "{causal, scale=") != 2 {
			t.Errorf("%s: exit %d, %d attention ops, want 2 causal ones", m, code, n)
		}
	}
}

// twoOpModel writes a model with no attention (matmul, tanh on a [3, 4] input),
// as ONNX and as lcc text, and returns both paths.
func twoOpModel(t *testing.T) []string {
	t.Helper()
	const text = `func @two(
    %0: f32[3,4] input "x",
    %1: f32[4,5] weight "w",
) {
  %2 = matmul(%0, %1) : f32[3,5] loc("mm")
  %3 = tanh(%2) : f32[3,5] loc("act")
  return %3 "y"
}
`
	f, err := ir.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	f.Params[1].Data = nil
	dir := t.TempDir()
	lccPath := filepath.Join(dir, "two.lcc")
	if err := os.WriteFile(lccPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	paths := []string{lccPath}
	if data, err := onnx.Export(f); err == nil {
		p := filepath.Join(dir, "two.onnx")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	} else {
		t.Fatalf("export: %v", err)
	}
	return paths
}

// A model with nothing to shard compiles for every built-in target; on a
// multi-GPU target it is replicated (data-parallel) and the report says so.
func TestNothingToShardEveryTarget(t *testing.T) {
	out, _, code := lcc(t, "targets")
	if code != 0 {
		t.Fatal("lcc targets failed")
	}
	models := twoOpModel(t)
	lines := strings.Split(strings.TrimSpace(out), "\n")[1:]
	if len(lines) < 7 {
		t.Fatalf("only %d targets:\n%s", len(lines), out)
	}
	for _, line := range lines {
		fields := strings.Fields(line)
		name, gpus := fields[0], fields[1]
		for _, model := range models {
			rep := compileJSON(t, model, "--target="+name)
			dp, _ := rep["data_parallel"].(map[string]any)
			if gpus == "1" {
				if dp != nil {
					t.Errorf("%s %s: data_parallel %v on one GPU", name, model, dp)
				}
				continue
			}
			if dp == nil || dp["gpus"] != atof(gpus) ||
				!strings.Contains(dp["reason"].(string), "no attention") {
				t.Errorf("%s %s: data_parallel %v, want %s GPUs for a model without attention",
					name, filepath.Base(model), dp, gpus)
			}
			if rep["sharding"] != nil {
				t.Errorf("%s: sharded %v", name, rep["sharding"])
			}
		}
	}
	out, _, _ = lcc(t, "compile", models[0], "--target=a100x8")
	if !strings.Contains(out, "data-parallel: the step is replicated on each of 8 GPUs") {
		t.Errorf("the text report does not say the step is replicated:\n%s", out)
	}
}

func atof(s string) float64 {
	var x float64
	for _, c := range s {
		x = 10*x + float64(c-'0')
	}
	return x
}
