package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/safetensors"
)

// lccBin is the lcc binary built once for the command-line tests, so they see
// exit statuses and stderr exactly as users do.
var lccBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lcc-cli")
	if err != nil {
		panic(err)
	}
	lccBin = filepath.Join(dir, "lcc")
	build := exec.Command("go", "build", "-o", lccBin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func lcc(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(lccBin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stderr.String(), "goroutine ") || strings.Contains(stderr.String(), "panic:") {
		t.Fatalf("lcc %v panicked:\n%s", args, stderr.String())
	}
	return stdout.String(), stderr.String(), code
}

const td = "../../testdata"

// TestCheckSharedModels runs `lcc check` on every shipped model and reference.
func TestCheckSharedModels(t *testing.T) {
	cases := []struct{ model, ref string }{
		{"gpt_mini.onnx", "gpt_mini.ref.safetensors"},
		{"llama_mini.onnx", "llama_mini.ref.safetensors"},
		{"llama_mini_op23.onnx", "llama_mini.ref.safetensors"},
		{"llama_mini_extdata.onnx", "llama_mini.ref.safetensors"},
		{"attn_mha.onnx", "attn_mha_dense.ref.safetensors"},
		{"gpt_mini_loss.onnx", "gpt_mini_loss.ref.safetensors"},
	}
	for _, c := range cases {
		out, stderr, code := lcc(t, "check", filepath.Join(td, "onnx", c.model), "--ref", filepath.Join(td, "ref", c.ref))
		if code != 0 || !strings.Contains(out, "max_rel_err=") || !strings.Contains(out, "compared=1") {
			t.Errorf("lcc check %s: exit %d\n%s%s", c.model, code, out, stderr)
		}
		// With --grads: the loss and every parameter's gradient as well.
		out, stderr, code = lcc(t, "check", filepath.Join(td, "onnx", c.model), "--ref", filepath.Join(td, "ref", c.ref), "--grads")
		want := "compared=23"
		switch c.model {
		case "gpt_mini.onnx", "gpt_mini_loss.onnx":
			// The output, the loss and 29 parameters: the 5 LayerNorm weights and
			// biases the exporter merged are compared one by one.
			want = "compared=31"
		case "attn_mha.onnx":
			want = "compared=5"
		}
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("lcc check --grads %s: exit %d, want %s\n%s%s", c.model, code, want, out, stderr)
		}
	}
}

// TestCheckGPTMiniLoss: the re-exported gpt_mini_loss.onnx (distinct example
// tensors for input_ids and labels, so the embedding reads input_ids) matches its
// reference, gradients included, with each merged LayerNorm parameter compared
// with its own gradient.
func TestCheckGPTMiniLoss(t *testing.T) {
	out, stderr, code := lcc(t, "check", filepath.Join(td, "onnx", "gpt_mini_loss.onnx"), "--ref",
		filepath.Join(td, "ref", "gpt_mini_loss.ref.safetensors"), "--grads")
	if code != 0 || strings.Contains(stderr, "never read") || !strings.Contains(out, "cross_entropy_loss") {
		t.Errorf("exit %d\n%s%s", code, out, stderr)
	}
	for _, name := range []string{"grad.blocks.1.ln2.weight", "grad.lnf.bias"} {
		if !strings.Contains(out, name+" (as m."+strings.TrimPrefix(name, "grad.")+")") {
			t.Errorf("%s is not compared on its own:\n%s", name, out)
		}
	}
}

func TestCompileDeterministic(t *testing.T) {
	for _, m := range []string{"gpt_mini.onnx", "llama_mini.onnx", "llama_mini_op23.onnx", "llama_mini_extdata.onnx", "attn_mha.onnx", "gpt_mini_loss.onnx"} {
		var prev map[string][]byte
		for i := 0; i < 2; i++ {
			dir := t.TempDir()
			_, stderr, code := lcc(t, "compile", filepath.Join(td, "onnx", m), "--target=a100x8", "--seq-len=64", "-o", dir)
			if code != 0 {
				t.Fatalf("compile %s: %s", m, stderr)
			}
			files := map[string][]byte{}
			kernels, _ := filepath.Glob(filepath.Join(dir, "kernels", "*.cu"))
			if rep, _ := os.ReadFile(filepath.Join(dir, "report.json")); len(kernels) == 0 &&
				!bytes.Contains(rep, []byte(`"kernel_error"`)) {
				t.Fatalf("%s: no kernels written and no kernel_error in the report", m)
			}
			names := []string{"graph.lcc", "report.json", "weights.safetensors"}
			if len(kernels) > 0 {
				names = append(names, "launch_plan.json")
			}
			for _, k := range kernels {
				names = append(names, filepath.Join("kernels", filepath.Base(k)))
			}
			for _, f := range names {
				b, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				files[f] = b
			}
			if prev != nil {
				if len(prev) != len(files) {
					t.Errorf("%s: %d files, then %d", m, len(prev), len(files))
				}
				for f, b := range files {
					if !bytes.Equal(b, prev[f]) {
						t.Errorf("%s: %s differs between two compiles", m, f)
					}
				}
			}
			prev = files
		}
	}
}

// TestCompiledGraphRuns reloads the written graph.lcc (with its weights) and checks
// it against the reference, so the text form carries the whole model.
func TestCompiledGraphRuns(t *testing.T) {
	dir := t.TempDir()
	if _, stderr, code := lcc(t, "compile", filepath.Join(td, "onnx", "llama_mini.onnx"), "--seq-len=16", "--batch=2", "-o", dir); code != 0 {
		t.Fatal(stderr)
	}
	out, stderr, code := lcc(t, "check", filepath.Join(dir, "graph.lcc"), "--ref", filepath.Join(td, "ref", "llama_mini.ref.safetensors"))
	if code != 0 {
		t.Fatalf("check of graph.lcc: %d\n%s%s", code, out, stderr)
	}
}

func TestBadInputs(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	junk := make([]byte, 4096)
	rand.Read(junk)
	good, _ := os.ReadFile(filepath.Join(td, "onnx", "gpt_mini.onnx"))
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"empty", []string{"compile", write("empty.onnx", nil), "--seq-len=8"}, "empty.onnx"},
		{"random", []string{"compile", write("random.onnx", junk), "--seq-len=8"}, "random.onnx"},
		{"truncated", []string{"compile", write("trunc.onnx", good[:len(good)/2]), "--seq-len=8"}, "trunc.onnx"},
		{"unbound seq", []string{"compile", filepath.Join(td, "onnx", "gpt_mini.onnx")}, "seq"},
		{"bad target", []string{"compile", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--target=tpu", "--seq-len=8"}, "--target"},
		{"bad shape flag", []string{"compile", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--shape=seq"}, "--shape"},
		{"unknown dim", []string{"compile", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--shape=foo=3"}, "foo"},
		{"bad report", []string{"compile", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--seq-len=8", "--report=xml"}, "--report"},
		{"bad pass", []string{"compile", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--seq-len=8", "--print-ir-after=nope"}, "nope"},
		{"missing file", []string{"compile", filepath.Join(dir, "nope.onnx"), "--seq-len=8"}, "nope.onnx"},
		{"bad extension", []string{"compile", write("model.txt", []byte("x"))}, "model.txt"},
		{"bad lcc", []string{"compile", write("bad.lcc", []byte("func @f(\n"))}, "bad.lcc"},
		{"missing ref input", []string{"check", filepath.Join(td, "onnx", "attn_mha.onnx"), "--ref", filepath.Join(td, "ref", "gpt_mini.ref.safetensors")}, "x"},
		{"bad ref", []string{"check", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--ref", write("bad.safetensors", junk)}, "bad.safetensors"},
		{"bad tolerance", []string{"check", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--ref", filepath.Join(td, "ref", "gpt_mini.ref.safetensors"), "--tolerance=-1"}, "--tolerance"},
		{"bad attention kernels", []string{"check", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--ref", filepath.Join(td, "ref", "gpt_mini.ref.safetensors"), "--device=cuda", "--attention-kernels=fast"}, "--attention-kernels"},
		{"scalar attention on the cpu", []string{"check", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--ref", filepath.Join(td, "ref", "gpt_mini.ref.safetensors"), "--attention-kernels=scalar"}, "--device=cuda"},
		{"bad device", []string{"run", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--inputs", filepath.Join(td, "ref", "gpt_mini.ref.safetensors"), "--device=tpu"}, "--device"},
	}
	for _, c := range cases {
		out, stderr, code := lcc(t, c.args...)
		if code != 1 {
			t.Errorf("%s: exit %d, want 1\n%s%s", c.name, code, out, stderr)
			continue
		}
		if !strings.Contains(stderr, c.want) {
			t.Errorf("%s: error does not name %q:\n%s", c.name, c.want, stderr)
		}
	}
}

// TestNoPartialOutput checks that a failing compile leaves no output folder content.
func TestNoPartialOutput(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	if _, _, code := lcc(t, "compile", filepath.Join(td, "onnx", "gpt_mini.onnx"), "-o", dir); code != 1 {
		t.Fatal("compile without --seq-len should fail")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed compile left %d files in %s", len(entries), dir)
	}
}

func TestTargetsAndVersion(t *testing.T) {
	out, _, code := lcc(t, "targets")
	for _, name := range []string{"a100x1", "a100x8", "a100-40gx8", "h100x8", "h200x1", "h200x2", "h200x8"} {
		if code != 0 || !strings.Contains(out, name) {
			t.Errorf("lcc targets lacks %s:\n%s", name, out)
		}
	}
	if out, _, code := lcc(t, "version"); code != 0 || !strings.HasPrefix(out, "lcc ") {
		t.Errorf("lcc version: %q", out)
	}
	if out, _, code := lcc(t, "passes"); code != 0 || !strings.Contains(out, "cse") {
		t.Errorf("lcc passes: %q", out)
	}
}

func TestRunWritesOutputs(t *testing.T) {
	outFile := filepath.Join(t.TempDir(), "out.safetensors")
	out, stderr, code := lcc(t, "run", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--inputs",
		filepath.Join(td, "ref", "gpt_mini.ref.safetensors"), "--outputs", outFile)
	if code != 0 || !strings.Contains(out, "linear_8 f32[2,16,512]") {
		t.Fatalf("lcc run: %d\n%s%s", code, out, stderr)
	}
	if _, err := os.Stat(outFile); err != nil {
		t.Fatal(err)
	}
}

// TestDilatedCheck is issue #4's acceptance command: LongNet attention with exact
// gradients against PyTorch's float64 reference.
func TestDilatedCheck(t *testing.T) {
	out, stderr, code := lcc(t, "check", filepath.Join(td, "onnx", "attn_mha.onnx"), "--ref",
		filepath.Join(td, "ref", "attn_mha_dilated_paper.ref.safetensors"), "--grads", "--attention=dilated",
		"--segments=8,16,32", "--dilations=1,2,4")
	if code != 0 || !strings.Contains(out, "compared=5") {
		t.Fatalf("exit %d\n%s%s", code, out, stderr)
	}
	// Dense attention cannot match the dilated reference: the check must fail.
	if _, _, code := lcc(t, "check", filepath.Join(td, "onnx", "attn_mha.onnx"), "--ref",
		filepath.Join(td, "ref", "attn_mha_dilated_paper.ref.safetensors"), "--grads"); code != 1 {
		t.Errorf("dense attention passed against the dilated reference")
	}
	if _, stderr, code := lcc(t, "check", filepath.Join(td, "onnx", "attn_mha.onnx"), "--ref",
		filepath.Join(td, "ref", "attn_mha_dilated_paper.ref.safetensors"), "--attention=dilated",
		"--segments=8,16", "--dilations=1"); code != 1 || !strings.Contains(stderr, "--segments") {
		t.Errorf("mismatched --segments/--dilations: exit %d: %s", code, stderr)
	}
}

// TestCompileLongContextPlan is the million-token training plan of issue #4.
func TestCompileLongContextPlan(t *testing.T) {
	out, stderr, code := lcc(t, "compile", filepath.Join(td, "onnx", "llama_mini.onnx"), "--target=a100x8",
		"--seq-len=1048576", "--loss=cross-entropy", "--attention=dilated", "--report=json")
	if code != 0 {
		t.Fatal(stderr)
	}
	t.Logf("%d bytes of report", len(out))
	for _, want := range []string{`"dilated": 2`, `"fused_cross_entropy": 1`, `"per_gpu_peak_bytes"`,
		`"backward"`, `"fused_linear_cross_entropy"`, `"mode": "training"`,
		// 8 ranks: the ops are rank 0's program's, LongNet's all-gather across ranks.
		`"sharded_dilated_attention_grad"`, `"all_reduce"`} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %s", want)
		}
	}
}

func TestEmitONNXAndDOT(t *testing.T) {
	dir := t.TempDir()
	_, stderr, code := lcc(t, "compile", filepath.Join(td, "onnx", "attn_mha.onnx"), "--seq-len=64",
		"--attention=dilated", "--segments=8,16,32", "--dilations=1,2,4", "--emit=onnx,dot", "-o", dir)
	if code != 0 {
		t.Fatal(stderr)
	}
	// The exported file is valid ONNX to lcc's own strict decoder.
	if _, stderr, code := lcc(t, "compile", filepath.Join(dir, "graph.onnx"), "--seq-len=64"); code != 1 ||
		!strings.Contains(stderr, "ai.lcc") {
		t.Errorf("compiling an export with ai.lcc ops should name the domain: %d %s", code, stderr)
	}
	dot, err := os.ReadFile(filepath.Join(dir, "graph.dot"))
	if err != nil || !strings.Contains(string(dot), "dilated_attention") {
		t.Errorf("graph.dot: %v", err)
	}
	if _, _, code := lcc(t, "compile", filepath.Join(td, "onnx", "attn_mha.onnx"), "--seq-len=64", "--emit=svg", "-o", dir); code != 1 {
		t.Error("--emit=svg accepted")
	}
}

// TestShardedCheck runs issue #5's checks: N simulated ranks reproduce PyTorch's
// outputs and gradients.
func TestShardedCheck(t *testing.T) {
	cases := [][]string{
		{"attn_mha.onnx", "attn_mha_dense", "--attention=ring", "--ranks=4"},
		{"attn_mha.onnx", "attn_mha_dense", "--attention=ulysses", "--ranks=2"},
		{"attn_mha.onnx", "attn_mha_dilated_paper", "--attention=dilated", "--ranks=8", "--segments=8,16,32", "--dilations=1,2,4"},
		{"llama_mini.onnx", "llama_mini", "--attention=ring", "--ranks=2"},
		{"gpt_mini.onnx", "gpt_mini", "--attention=ring", "--ranks=8"},
	}
	for _, c := range cases {
		args := append([]string{"check", filepath.Join(td, "onnx", c[0]), "--ref",
			filepath.Join(td, "ref", c[1]+".ref.safetensors"), "--grads"}, c[2:]...)
		out, stderr, code := lcc(t, args...)
		if code != 0 || !strings.Contains(out, "max_rel_err=") {
			t.Errorf("%v: exit %d\n%s%s", c, code, out, stderr)
		}
	}
	// Layouts that cannot split are errors that say why.
	_, stderr, code := lcc(t, "check", filepath.Join(td, "onnx", "attn_mha.onnx"), "--ref",
		filepath.Join(td, "ref", "attn_mha_dense.ref.safetensors"), "--attention=ulysses", "--ranks=8")
	if code != 1 || !strings.Contains(stderr, "head") {
		t.Errorf("ulysses with 4 heads on 8 ranks: exit %d: %s", code, stderr)
	}
	if _, _, code := lcc(t, "check", filepath.Join(td, "onnx", "attn_mha.onnx"), "--ref",
		filepath.Join(td, "ref", "attn_mha_dense.ref.safetensors"), "--attention=ring"); code != 1 {
		t.Error("--attention=ring without --ranks accepted")
	}
}

func TestShardedPlan(t *testing.T) {
	out, stderr, code := lcc(t, "compile", filepath.Join(td, "onnx", "llama_mini.onnx"), "--target=a100x8",
		"--seq-len=1048576", "--loss=cross-entropy", "--report=json")
	if code != 0 {
		t.Fatal(stderr)
	}
	for _, want := range []string{`"ranks": 8`, `"bytes_per_step_per_gpu"`, `"ring_attention"`, `"local_seq_len": 131072`} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %s", want)
		}
	}
}

// TestHuggingFaceExports checks Hugging Face exports lcc was not written against:
// forward, gradients, and attention found in each. The CPU matches PyTorch's f32
// numbers to about 1e-6 (BERT's gradients to 9e-6), so the tolerance is 2e-5.
func TestHuggingFaceExports(t *testing.T) {
	for _, m := range []string{"gpt2", "llama_gqa_eager", "llama_gqa_sdpa", "bert", "llama_gqa_d128_sdpa"} {
		model := filepath.Join(td, "hf", "hf_"+m+".onnx")
		ref := filepath.Join(td, "hf", "hf_"+m+".ref.safetensors")
		for _, extra := range [][]string{nil, {"--grads"}} {
			out, stderr, code := lcc(t, append([]string{"check", model, "--ref", ref, "--tolerance=2e-5"}, extra...)...)
			if code != 0 || !strings.Contains(out, "max_rel_err=") {
				t.Errorf("%s %v: exit %d\n%s%s", m, extra, code, out, stderr)
			}
		}
		out, stderr, code := lcc(t, "compile", model, "--seq-len=64", "--require-attention")
		if code != 0 || !strings.Contains(out, "attention  2 found") {
			t.Errorf("%s: attention not found: %d\n%s%s", m, code, out, stderr)
		}
	}
}

// TestExporterFoldingNotes: PyTorch's exporter merges equal initializers
// (gpt_mini's LayerNorm scales) and folds zero biases away (GPT-2). lcc gives each
// parameter back its own weight, as PyTorch trains them, and says so in a note.
func TestExporterFoldingNotes(t *testing.T) {
	// PyTorch's count: 29 tensors, 231,168 numbers (the five LayerNorms included).
	out, _, code := lcc(t, "compile", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--seq-len=16")
	if code != 0 || !strings.Contains(out, "untied 8 parameter(s)") || !strings.Contains(out, "lnf.weight") ||
		!strings.Contains(out, "params     231168 in 29 tensors (231168 trainable)") {
		t.Errorf("no note about gpt_mini's merged LayerNorm parameters, or a wrong count:\n%s", out)
	}
	out, _, _ = lcc(t, "compile", filepath.Join(td, "hf", "hf_gpt2.onnx"), "--seq-len=16")
	if !strings.Contains(out, "restored 8 zero bias(es)") || !strings.Contains(out, "m.transformer.h.0.attn.c_attn.bias") {
		t.Errorf("no note about GPT-2's folded biases:\n%s", out)
	}
	for _, m := range []string{"onnx/gpt_mini.onnx", "hf/hf_gpt2.onnx", "hf/hf_bert.onnx", "onnx/llama_mini.onnx"} {
		out, _, _ = lcc(t, "compile", filepath.Join(td, m), "--seq-len=16")
		if strings.Contains(out, "warning") {
			t.Errorf("%s: warning:\n%s", m, out)
		}
	}
}

func TestShapeConflictsAndBounds(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"compile", filepath.Join(td, "onnx", "llama_mini.onnx"), "--shape=seq=4", "--shape=seq=8"}, "seq twice"},
		{[]string{"run", filepath.Join(td, "onnx", "llama_mini.onnx"), "--inputs", filepath.Join(td, "ref", "llama_mini.ref.safetensors"), "--seq-len=32"}, "seq=16"},
		{[]string{"compile", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--seq-len=2048"}, "node_embedding_1"},
	}
	for _, c := range cases {
		_, stderr, code := lcc(t, c.args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want 1 naming %q: %s", c.args[1:], code, c.want, stderr)
		}
	}
}

// TestCheckOutputs: `lcc check --grads --outputs FILE` keeps what lcc computed (the
// logits, the loss and every gradient), so two runs can be compared bit for bit,
// as gpu_check.sh does on the GPU; on the CPU two runs write the same bytes.
func TestCheckOutputs(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(td, "hf", "hf_llama_gqa_sdpa.onnx")
	ref := filepath.Join(td, "hf", "hf_llama_gqa_sdpa.ref.safetensors")
	var files [2][]byte
	for i := range files {
		path := filepath.Join(dir, fmt.Sprintf("run%d.safetensors", i))
		out, stderr, code := lcc(t, "check", model, "--ref", ref, "--grads", "--outputs", path)
		if code != 0 {
			t.Fatalf("exit %d\n%s%s", code, out, stderr)
		}
		f, err := safetensors.Read(path)
		if err != nil {
			t.Fatal(err)
		}
		grads := 0
		for _, n := range f.Names {
			if strings.HasPrefix(n, "grad.") {
				grads++
			}
		}
		// linear_14 is the logits' output name in this export.
		if grads != 21 || f.Tensors["linear_14"] == nil || f.Tensors["loss"] == nil {
			t.Errorf("%s holds %v, want the logits, the loss and 21 gradients", path, f.Names)
		}
		if files[i], err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Error("two CPU runs wrote different bytes")
	}
	if _, stderr, code := lcc(t, "check", filepath.Join(td, "onnx", "attn_mha.onnx"), "--ref",
		filepath.Join(td, "ref", "attn_mha_dense.ref.safetensors"), "--attention=ring", "--ranks=2",
		"--outputs", filepath.Join(dir, "x.safetensors")); code != 1 || !strings.Contains(stderr, "--outputs") {
		t.Errorf("--outputs with --ranks: exit %d: %s", code, stderr)
	}
}

// TestAttentionKernelsD128: the head-dim-128 grouped-query Llama takes the
// tensor-core kernels in bf16, forward and backward of both layers, tier 2
// (wgmma) for an H200 and tier 1 for an A100, and the report says so; in fp32
// every node says why it does not.
func TestAttentionKernelsD128(t *testing.T) {
	model := filepath.Join(td, "hf", "hf_llama_gqa_d128_sdpa.onnx")
	for _, c := range []struct {
		prec, target string
		tier         float64
	}{{"bf16", "h200x1", 2}, {"bf16", "a100x1", 1}, {"fp32", "h200x1", 0}} {
		prec := c.prec
		rep := compileJSON(t, model, "--target="+c.target, "--seq-len=320", "--batch=2", "--precision="+prec)
		ks, _ := rep["attention_kernels"].([]any)
		ops := map[string]int{}
		for _, k := range ks {
			k := k.(map[string]any)
			ops[k["op"].(string)]++
			flash := k["kernel"] == "flash" && k["tier"] == c.tier && k["why"] == nil
			if want := prec == "bf16"; flash != want {
				t.Errorf("%s %s: %v, want flash tier %v: %v", prec, c.target, k, c.tier, want)
			}
		}
		if ops["attention"] != 2 || ops["attention_grad"] != 2 {
			t.Errorf("%s: attention kernels %v, want 2 forward and 2 backward", prec, ks)
		}
	}
	out, _, code := lcc(t, "compile", model, "--target=h200x1", "--seq-len=320", "--precision=bf16")
	if code != 0 || !strings.Contains(out, "attn kern  attention ×2: flash tier 2 (tensor cores, wgmma)") {
		t.Errorf("text report:\n%s", out)
	}
}

// TestCheckBF16OnCPU: `check --device=cpu --precision=bf16` runs the interpreter
// storing in bf16 what the GPU would, compares with itself (what a GPU run is
// held to) and prints each tensor's error against the reference beside it;
// sharded checks and CPU training stay f32 and say so.
func TestCheckBF16OnCPU(t *testing.T) {
	model, ref := filepath.Join(td, "hf", "hf_gpt2.onnx"), filepath.Join(td, "hf", "hf_gpt2.ref.safetensors")
	out, stderr, code := lcc(t, "check", model, "--ref", ref, "--grads", "--precision=bf16")
	if code != 0 || !strings.Contains(out, "ref_rel_err=") || !strings.Contains(out, "max_ref_rel_err=") ||
		!strings.Contains(out, "max_rel_err=0.000e+00") {
		t.Errorf("exit %d:\n%s\n%s", code, out, stderr)
	}
	_, stderr, code = lcc(t, "check", model, "--ref", ref, "--precision=bf16", "--ranks=2", "--attention=ring")
	if code != 1 || !strings.Contains(stderr, "--precision=fp32") {
		t.Errorf("sharded bf16 check: exit %d: %s", code, stderr)
	}
	_, stderr, code = lcc(t, "train", model, "--data=synthetic:copy", "--seq-len=16", "--steps=1", "--precision=bf16")
	if code != 1 || !strings.Contains(stderr, "training on the CPU runs f32") {
		t.Errorf("CPU bf16 training: exit %d: %s", code, stderr)
	}
}

// TestTrainStaticBatchAndShape: lcc train takes a static batch as the model's
// (without --batch, or with --batch equal to it), refuses another naming the input,
// and binds dims by --shape as compile does.
func TestTrainStaticBatchAndShape(t *testing.T) {
	long := filepath.Join(td, "hf", "hf_llama_gqa_eager_long.onnx")
	args := []string{"train", long, "--data=tokens:" + filepath.Join(td, "trajectory", "tokens.bin"),
		"--seq-len=16", "--steps=2", "--progress-every=1"}
	for _, extra := range [][]string{nil, {"--batch=1"}, {"--shape=seq=16"}} {
		stdout, stderr, code := lcc(t, append(args, extra...)...)
		if code != 0 || !strings.Contains(stdout, "step 2/2") {
			t.Errorf("train %v: exit %d: %s%s", extra, code, stdout, stderr)
		}
	}
	_, stderr, code := lcc(t, append(args, "--batch=2")...)
	if code != 1 || !strings.Contains(stderr, `dim 0 of input "input_ids" is 1`) {
		t.Errorf("--batch=2: exit %d, want 1 naming the static dim: %s", code, stderr)
	}
	_, stderr, code = lcc(t, append(args, "--shape=nosuch=3")...)
	if code != 1 || !strings.Contains(stderr, `no dim "nosuch"`) {
		t.Errorf("--shape=nosuch=3: exit %d: %s", code, stderr)
	}
}
