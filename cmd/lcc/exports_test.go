package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/frontends/onnx"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/tensor"
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

// refVariant writes a copy of a reference with input_ids changed by edit.
func refVariant(t *testing.T, ref string, edit func(ts map[string]*tensor.Tensor)) string {
	t.Helper()
	f, err := safetensors.Read(ref)
	if err != nil {
		t.Fatal(err)
	}
	edit(f.Tensors)
	var names []string
	for n := range f.Tensors {
		names = append(names, n)
	}
	out := filepath.Join(t.TempDir(), "variant.safetensors")
	if err := safetensors.Write(out, names, f.Tensors, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestClearerMessages: each mistake a new user makes gets an error (exit 1) that
// says what is wrong, or a warning where lcc can go on.
func TestClearerMessages(t *testing.T) {
	model := filepath.Join(td, "hf", "hf_llama_gqa_eager.onnx")
	ref := filepath.Join(td, "hf", "hf_llama_gqa_eager.ref.safetensors")
	renamed := refVariant(t, ref, func(ts map[string]*tensor.Tensor) {
		ts["tokens"] = ts["input_ids"]
		delete(ts, "input_ids")
	})
	asFloat := func(frac float64) func(ts map[string]*tensor.Tensor) {
		return func(ts map[string]*tensor.Tensor) {
			ids := ts["input_ids"]
			f := tensor.New(tensor.F32, ids.Shape...)
			for i, x := range ids.I {
				f.F[i] = float64(x)
			}
			f.F[3] += frac
			ts["input_ids"] = f
		}
	}
	fractional := refVariant(t, ref, asFloat(0.5))
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"ref without the input", []string{"check", model, "--ref", renamed},
			`no tensor named like model input(s) input_ids (the file has: `},
		{"onnx as ref", []string{"check", model, "--ref", model},
			"is an ONNX model, not a safetensors file"},
		{"ids as fractions", []string{"check", model, "--ref", fractional},
			`input "input_ids" is i64 in the model, but the file stores it as f32 with element 3`},
		{"seq-len 0", []string{"compile", model, "--seq-len=0"}, "--seq-len 0: want a positive integer"},
		{"batch 0", []string{"compile", model, "--seq-len=8", "--batch=0"}, "--batch 0: want a positive integer"},
		{"train seq-len 0", []string{"train", model, "--seq-len=0"}, "--seq-len 0: want a positive integer"},
		{"bad budget", []string{"compile", model, "--seq-len=8", "--memory-budget=lots"},
			`"lots" is not a size`},
		{"bert past its positions", []string{"compile", filepath.Join(td, "hf", "hf_bert.onnx"), "--seq-len=4096"},
			`"m.embeddings.position_ids" [1 64], whose axis 1 holds 64: a sequence longer than the model's position table?`},
		{"gpt2 past its positions", []string{"compile", filepath.Join(td, "hf", "hf_gpt2.onnx"), "--seq-len=4096"},
			`"m.transformer.wpe.weight" [64 64] has 64 entries on axis 0: a sequence longer than that position table?`},
		{"misspelt flag", []string{"compile", model, "--seq-lenn=8"}, "unknown flag: --seq-lenn; did you mean --seq-len?"},
		{"misspelt target flag", []string{"compile", model, "--targt=a100x8"}, "did you mean --target?"},
		{"misspelt check flag", []string{"check", model, "--reff", ref}, "did you mean --ref?"},
	}
	for _, c := range cases {
		_, stderr, code := lcc(t, c.args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, want 1 and %q in:\n%s", c.name, code, c.want, stderr)
		}
	}

	// Whole numbers stored as floats are converted, with a warning.
	whole := refVariant(t, ref, asFloat(0))
	out, stderr, code := lcc(t, "check", model, "--ref", whole)
	if code != 0 || !strings.Contains(stderr, `integer input "input_ids" is stored as f32; converted to i64`) {
		t.Errorf("whole-number float ids: exit %d\n%s%s", code, out, stderr)
	}

	// --memory-budget takes units; the budget reaches the plan (it bounds the
	// whole per-GPU peak, fixed costs included).
	for _, b := range []string{"80GB", "70GiB", "85899345920B", "1GiB"} {
		if _, stderr, code := lcc(t, "compile", model, "--seq-len=8", "--memory-budget="+b); code != 0 {
			t.Errorf("--memory-budget=%s: exit %d\n%s", b, code, stderr)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"80GB": 80e9, "70GiB": 70 << 30, "70gib": 70 << 30,
		"1.5GiB": 3 << 29, "123B": 123, "0": 0, "512 MiB": 512 << 20, "2TB": 2e12, "64k": 64e3, "7B": 7} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GB", "-1GB", "lots", "1e400", "NaN", "80", "85899345920"} {
		if _, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) accepted", in)
		}
	}
	// A number without a unit is refused with the unit it likely lacks.
	_, stderr, code := lcc(t, "compile", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--memory-budget=80")
	if code != 1 || !strings.Contains(stderr, `"80" has no unit: 80GiB? (or 80GB; 80B for bytes)`) {
		t.Errorf("--memory-budget=80: exit %d: %s", code, stderr)
	}
}

// The report says its FLOPs are per GPU, which dilated configuration the layers
// use (and whether it was defaulted), whose kernels it lists (rank 0's of a
// sharded step), and when the sharded step's kernels are incomplete.
func TestReportSaysWhatItCounts(t *testing.T) {
	model := filepath.Join(td, "hf", "hf_llama_gqa_sdpa.onnx")
	out, stderr, code := lcc(t, "compile", model, "--seq-len=1048576", "--target=a100x8", "--attention=dilated")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"flops      per GPU: forward ",
		"dilated    segments 2048,4096,8192,16384,32768, dilations 1,2,4,8,16, paper offsets " +
			"(LongNet's defaults: --segments and --dilations not given)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
	// The kernels listed are rank 0's sharded program's; a sharded step whose ops
	// lack a GPU lowering says so in the report.
	if !strings.Contains(out, "rank       0 of 8: ") ||
		!strings.Contains(out, "attn kern  sharded_dilated_attention ×2") {
		t.Errorf("text report does not list rank 0's kernels:\n%s", out)
	}
	if strings.Contains(out, "kernels    incomplete: ") && !strings.Contains(out, "kernels    incomplete: sharded step: ") {
		t.Errorf("text report does not say the sharded step's kernels are incomplete:\n%s", out)
	}
	rep := compileJSON(t, model, "--seq-len=65536", "--attention=dilated", "--segments=4096,8192",
		"--dilations=1,2", "--dilated-offsets=block")
	d, _ := rep["attention"].(map[string]any)["dilated"].(map[string]any)
	if d == nil || d["defaulted"] != false || d["offsets"] != "block" ||
		len(d["segments"].([]any)) != 2 || d["segments"].([]any)[1] != 8192.0 || d["dilations"].([]any)[1] != 2.0 {
		t.Errorf("attention.dilated = %v", d)
	}
	if f := rep["flops"].(map[string]any); f["scope"] != "per_gpu" {
		t.Errorf("flops = %v, want scope per_gpu", f)
	}
	rep = compileJSON(t, model, "--seq-len=1048576", "--target=a100x8", "--attention=ring")
	if ke, _ := rep["kernel_error"].(string); ke != "" && !strings.HasPrefix(ke, "sharded step: ") {
		t.Errorf("kernel_error = %q does not say it is the sharded step's", ke)
	}
}

// The README and docs/ stand alone (a clone has no ../shared), and the README
// lists every file that compile -o writes.
func TestDocsStandAlone(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	docs, _ := filepath.Glob("../../docs/*.md")
	if len(docs) == 0 {
		t.Fatal("no docs/*.md")
	}
	for _, p := range append(docs, "../../README.md") {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "../shared") {
			t.Errorf("%s refers to ../shared, which a clone does not have", p)
		}
	}
	if !strings.Contains(string(readme), "(docs/design.md)") {
		t.Error("README does not point to docs/design.md")
	}
	dir := t.TempDir()
	model := filepath.Join(td, "hf", "hf_llama_gqa_sdpa.onnx")
	if _, stderr, code := lcc(t, "compile", model, "--seq-len=64", "--target=a100x8", "--attention=ring",
		"--emit=onnx,dot", "-o", dir); code != 0 {
		t.Fatalf("compile -o: exit %d\n%s", code, stderr)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			name += "/"
		}
		if !strings.Contains(string(readme), "`"+name) {
			t.Errorf("compile -o wrote %s, which the README does not list", name)
		}
	}
	for _, name := range append(driver.OutputFiles, "manifest.json") {
		if !strings.Contains(string(readme), "`"+name) {
			t.Errorf("compile -o may write %s, which the README does not list", name)
		}
	}
	if len(entries) < 9 {
		t.Errorf("compile -o wrote only %d entries; the test expects every kind of file", len(entries))
	}
}

// make gpu-tests builds a test binary for every package with GPU tests, and
// scripts/gpu_check.sh runs what make gpu-tests lists rather than names of its own.
func TestMakefileListsGPUPackages(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(string(mk), "\n") {
		if rest, ok := strings.CutPrefix(line, "GPU_PKGS"); ok {
			_, pkgs, _ := strings.Cut(rest, "=")
			for _, p := range strings.Fields(pkgs) {
				listed[strings.TrimPrefix(p, "./")] = true
			}
		}
	}
	have := map[string]bool{}
	err = filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "../.." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "\nfunc TestGPU") {
			rel, _ := filepath.Rel("../..", filepath.Dir(path))
			have[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range have {
		if !listed[p] {
			t.Errorf("%s has GPU tests but is not in the Makefile's GPU_PKGS", p)
		}
	}
	for p := range listed {
		if !have[p] {
			t.Errorf("GPU_PKGS lists %s, which has no GPU tests (or does not exist)", p)
		}
	}
	script, err := os.ReadFile("../../scripts/gpu_check.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), ".gpu/tests.txt") || strings.Contains(string(script), "cuda.test") {
		t.Error("scripts/gpu_check.sh must run the binaries .gpu/tests.txt lists")
	}
}

// --ranks's help says what it does, and lcc train's help no longer says the CUDA
// executor is missing.
func TestHelpTexts(t *testing.T) {
	out, _, _ := lcc(t, "train", "--help")
	if strings.Contains(out, "not available") || !strings.Contains(out, "--device=cuda") {
		t.Errorf("lcc train --help:\n%s", out)
	}
	out, _, _ = lcc(t, "compile", "--help")
	if !strings.Contains(out, "with --attention=ring or ulysses, all the target's GPUs") {
		t.Errorf("lcc compile --help does not say what --ranks defaults to:\n%s", out)
	}
	// And it does it: ring without --ranks on a100x8 shards over 8 (the test above),
	// and on one GPU it is refused, naming the reason.
	_, stderr, code := lcc(t, "compile", filepath.Join(td, "hf", "hf_llama_gqa_sdpa.onnx"), "--seq-len=64",
		"--attention=ring")
	if code != 1 || !strings.Contains(stderr, "needs --ranks=N with N >= 2 (the target has one GPU)") {
		t.Errorf("ring on h200x1: exit %d: %s", code, stderr)
	}
}

// Code comments cite the design by docs/design.md's sections, which a clone has.
func TestDesignCitations(t *testing.T) {
	err := filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != "../.." {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "exports_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "DESIGN"+".md") {
			t.Errorf("%s cites DESIGN.md, which is not in the repository: cite docs/design.md", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
