package report_test

import (
	"bytes"
	"encoding/json"
	"github.com/lcc-dev/lcc/cost"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/targets"
)

// compile runs a real compile of llama_mini (T=16, batch 2) for a training step
// with dilated attention on one H200, as `lcc compile` does.
func compile(t *testing.T) *report.Report {
	t.Helper()
	f, err := driver.Load(filepath.Join("..", "testdata", "onnx", "llama_mini.onnx"),
		driver.Bindings{SeqLen: 16, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	tg, err := targets.Lookup("h200x1")
	if err != nil {
		t.Fatal(err)
	}
	opts := driver.CompileOptions{Target: tg, Model: "llama_mini.onnx"}
	opts.Loss = "cross-entropy"
	opts.Attention.Mode = "dilated"
	opts.Attention.Segments = []int64{4, 8}
	opts.Attention.Dilations = []int64{1, 2}
	res, err := driver.Compile(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res.Report
}

func render(t *testing.T, r *report.Report) (js, text string) {
	t.Helper()
	b, err := driver.ReportJSON(r)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	r.WriteText(&sb)
	return string(b), sb.String()
}

// Two compiles of the same model and flags give byte-identical JSON and text,
// the JSON decodes back to the same report, and the numbers agree with each
// other and with the text.
func TestReportOfCompile(t *testing.T) {
	r1, r2 := compile(t), compile(t)
	js1, text1 := render(t, r1)
	js2, text2 := render(t, r2)
	if js1 != js2 {
		t.Errorf("JSON differs between two compiles:\n%s\n%s", js1, js2)
	}
	if text1 != text2 {
		t.Errorf("text differs between two compiles:\n%s\n%s", text1, text2)
	}
	var back report.Report
	if err := json.Unmarshal([]byte(js1), &back); err != nil {
		t.Fatal(err)
	}
	if js, _ := render(t, &back); js != js1 {
		t.Errorf("JSON does not survive a decode and re-encode:\n%s\n%s", js, js1)
	}

	r := r1
	if r.Mode != "training" || r.Model != "llama_mini.onnx" || r.Target.Name != "h200x1" {
		t.Errorf("mode %q model %q target %q", r.Mode, r.Model, r.Target.Name)
	}
	if r.Shapes.Dims["seq"] != 16 || r.Shapes.Dims["batch"] != 2 {
		t.Errorf("dims %v", r.Shapes.Dims)
	}
	if r.Attention.Found != 2 || r.Attention.Rewritten["dilated"] != 2 || r.Attention.Dilated == nil ||
		!reflect.DeepEqual(r.Attention.Dilated.Segments, []int64{4, 8}) {
		t.Errorf("attention %+v dilated %+v", r.Attention, r.Attention.Dilated)
	}
	if r.FusedCE != 1 {
		t.Errorf("fused cross-entropy %d, want 1", r.FusedCE)
	}
	if r.Params.Trainable <= 0 || r.Params.Trainable > r.Params.Count {
		t.Errorf("params %+v", r.Params)
	}
	grads := 0
	for name := range r.Outputs {
		if strings.HasPrefix(name, "grad.") {
			grads++
		}
	}
	if grads != r.Params.Tensors {
		t.Errorf("%d gradient outputs for %d weight tensors", grads, r.Params.Tensors)
	}
	if f := r.FLOPs; f.Scope != report.FLOPsScope || f.Forward <= 0 || f.Backward <= f.Forward ||
		f.PerStep != f.Forward+f.Backward {
		t.Errorf("flops %+v", f)
	}
	m := r.Memory
	// One memory model: the arena (weights, gradients, the rest) plus the
	// optimizer state (fp32 masters and moments) plus the fixed costs.
	if m.Model != "arena" || m.OptimizerBytes != cost.OptimizerStateBytes(r.Params.Trainable) ||
		m.ContextBytes != cost.CUDAContextBytes ||
		m.FixedBytes != cost.FixedBytes || m.PerGPUPeakBytes != m.ArenaBytes+m.OptimizerBytes+m.FixedBytes ||
		m.ArenaBytes != m.WeightsBytes+m.GradientsBytes+m.ActivationsBytes || !m.FitsTarget {
		t.Errorf("memory %+v (trainable %d)", m, r.Params.Trainable)
	}
	if len(r.Kernels) == 0 || r.KernelError != "" || r.ProgramHash == "" {
		t.Errorf("kernels %d, error %q, hash %q", len(r.Kernels), r.KernelError, r.ProgramHash)
	}
	for _, want := range []string{
		"model      llama_mini.onnx (training)\n",
		"dims       batch=2 seq=16\n",
		"attention  2 found, rewritten dilated=2, unmatched 0\n",
		"dilated    segments 4,8, dilations 1,2, paper offsets (from --segments and --dilations)\n",
		"fused CE   1\n",
		"memory     peak " + report.Bytes(m.PerGPUPeakBytes) + " per GPU",
		"flops      per GPU: forward " + report.FLOPString(r.FLOPs.Forward),
		"program    " + r.ProgramHash + "\n",
		"pass       match-attention (changed)\n",
	} {
		if !strings.Contains(text1, want) {
			t.Errorf("text lacks %q:\n%s", want, text1)
		}
	}
}

// Build on a hand-written function: exact counts, FLOPs and the whole text.
func TestBuildInference(t *testing.T) {
	f, err := ir.Parse(`func @mlp(
    %0: f32[batch=2,seq=4,8] input "x",
    %1: f32[8,16] weight "w1",
    %2: f32[16] weight "b1",
) {
  %3 = matmul(%0, %1) : f32[2,4,16] loc("mm")
  %4 = add(%3, %2) : f32[2,4,16] loc("bias")
  %5 = tanh(%4) : f32[2,4,16] loc("act")
  %6 = reshape(%5) {shape=[8,16]} : f32[8,16] loc("flat")
  return %6 "y"
}
`)
	if err != nil {
		t.Fatal(err)
	}
	tg, _ := targets.Lookup("h200x1")
	r := report.Build(f, report.Input{Model: "mlp.lcc", Target: tg,
		Passes: []passes.Stat{{Name: "dce"}, {Name: "cse", Changed: true, Micros: 1500}}})
	if r.Mode != "inference" || r.Params.Count != 8*16+16 || r.Params.Tensors != 2 ||
		r.Params.Trainable != r.Params.Count {
		t.Errorf("mode %q params %+v", r.Mode, r.Params)
	}
	// matmul 2·(8·16)·8 = 2048, add and tanh one each per element: 128 + 128.
	if r.FLOPs.Forward != 2048+128+128 || r.FLOPs.Backward != 0 || r.FLOPs.PerStep != r.FLOPs.Forward {
		t.Errorf("flops %+v", r.FLOPs)
	}
	if r.Memory.GradientsBytes != 0 || r.Memory.OptimizerBytes != 0 || r.Memory.WeightsBytes != 144*4 {
		t.Errorf("memory %+v", r.Memory)
	}
	var names []string
	for _, k := range r.Kernels {
		names = append(names, k.Name)
	}
	if got := strings.Join(names, " "); got != "add gemm_cublaslt tanh" {
		t.Errorf("kernels %q (reshape is a view, matmul is cuBLASLt)", got)
	}
	var sb strings.Builder
	r.WriteText(&sb)
	want := `model      mlp.lcc (inference)
target     h200x1: 1× GPU sm_90a, ` + report.Bytes(tg.MemoryBytes) + ` each
dims       batch=2 seq=4
input      x f32[2 4 8]
output     y f32[8 16]
params     144 in 2 tensors (144 trainable)
attention  0 found, rewritten -, unmatched 0
fused CE   0
checkpoint none: 0 ops recomputed, 0 B saved
memory     peak ` + report.Bytes(r.Memory.PerGPUPeakBytes) + ` per GPU (weights 576 B, gradients 0 B, optimizer 0 B, activations ` +
		report.Bytes(r.Memory.ActivationsBytes) + `)
flops      per GPU: forward 2.3 KFLOP, backward 0 FLOP, per step 2.3 KFLOP
kernels    3: add gemm_cublaslt tanh
ops        add×1 matmul×1 reshape×1 tanh×1
pass       dce
pass       cse 1.500 ms (changed)
`
	if got := sb.String(); got != want {
		t.Errorf("text:\n%s\nwant:\n%s", got, want)
	}
}

// The optional parts of the text: warnings, notes, unmatched attention, sharding,
// data parallelism, communication, a plan that does not fit, a kernel error.
func TestWriteTextOptionalParts(t *testing.T) {
	r := &report.Report{Model: "m", Mode: "training",
		Warnings: []string{"input ids is never read"}, Notes: []string{"untied lm_head"},
		Attention: report.Attention{Found: 1, Unmatched: []string{"softmax_3"},
			Dilated: &report.Dilated{Segments: []int64{2048}, Dilations: []int64{1}, Offsets: "block",
				Defaulted: true}},
		Sharding:      &report.Sharding{Ranks: 4, Mode: "ring", Layout: "zigzag", SeqLen: 1 << 20, LocalSeqLen: 1 << 18},
		DataParallel:  &report.DataParallel{GPUs: 8, Reason: "batch 8 covers the GPUs"},
		Communication: &report.Communication{BytesPerStepPerGPU: 3 << 30, ByOp: map[string]int64{"ring_attention": 2 << 30, "all_reduce": 1 << 30}},
		Memory:        report.Memory{PerGPUPeakBytes: 200 << 30, FitsTarget: false},
		KernelError:   "node 3: no GPU lowering for op ring_attention",
		Outputs:       map[string]report.Value{"loss": {DType: "f32"}, "grad.w": {DType: "f32"}, "grad.b": {DType: "f32"}},
	}
	var buf bytes.Buffer
	r.WriteText(&buf)
	text := buf.String()
	for _, want := range []string{
		"warning    input ids is never read\n",
		"note       untied lm_head\n",
		"           unmatched: softmax_3\n",
		"dilated    segments 2048, dilations 1, block offsets (LongNet's defaults: --segments and --dilations not given)\n",
		"sharding   4 ranks, ring (zigzag layout), 262144 of 1048576 tokens per GPU\n",
		"rank       0 of 4: ops, kernels and program below are this rank's (lcc train --ranks=4 runs it there",
		"parallel   data-parallel: the step is replicated on each of 8 GPUs (batch 8 covers the GPUs)\n",
		"comm       3.00 GiB per step per GPU (all_reduce 1.00 GiB, ring_attention 2.00 GiB)\n",
		"memory     peak 200.00 GiB per GPU",
		"DOES NOT FIT\n",
		"output     loss f32[]\n",
		"output     grad.* for 2 parameters\n",
		"kernels    incomplete: node 3: no GPU lowering for op ring_attention\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
}

func TestUnits(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.00 KiB", 1536: "1.50 KiB",
		5 << 20: "5.00 MiB", 3 << 40: "3.00 TiB"} {
		if got := report.Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int64]string{0: "0 FLOP", 999: "999 FLOP", 1000: "1 KFLOP", 2304: "2.3 KFLOP",
		1_500_000_000_000: "1.5 TFLOP"} {
		if got := report.FLOPString(n); got != want {
			t.Errorf("FLOPString(%d) = %q, want %q", n, got, want)
		}
	}
}

// The text report groups the attention nodes by op, kernel and reason.
func TestAttentionKernelLines(t *testing.T) {
	r := &report.Report{AttentionKernels: []report.AttentionKernel{
		{Node: 3, Op: "attention", Kernel: "flash", Tier: 1},
		{Node: 9, Op: "attention", Kernel: "flash", Tier: 1},
		{Node: 12, Op: "attention_grad", Kernel: "scalar", Why: "an explicit mask"},
		{Node: 20, Op: "attention_grad", Kernel: "flash", Tier: 1},
	}}
	var b strings.Builder
	r.WriteText(&b)
	want := "attn kern  attention ×2: flash tier 1 (tensor cores, mma.sync)\n" +
		"attn kern  attention_grad ×1: scalar (CUDA cores): an explicit mask\n" +
		"attn kern  attention_grad ×1: flash tier 1 (tensor cores, mma.sync)\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("text report:\n%s\nwant the lines\n%s", b.String(), want)
	}
}
