package driver

import (
	"strings"
	"testing"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/cost"
	"github.com/lcc-dev/lcc/internal/llamagen"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
)

func h200(t *testing.T) targets.Target {
	t.Helper()
	tg, err := targets.Lookup("h200x1")
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// checkOneModel checks the report's per-GPU peak is the arena the executor
// allocates (codegen's layout of the compiled program) plus the optimizer state
// the trainer keeps plus the fixed costs, component by component.
func checkOneModel(t *testing.T, res *Result, storage tensor.DType) {
	t.Helper()
	if res.Program == nil {
		t.Fatalf("no program: %s", res.Report.KernelError)
	}
	_, arena := cudagen.PlanArena(res.Program.Plan)
	m := res.Report.Memory
	opt := cost.OptimizerStateBytes(res.Report.Params.Trainable)
	if m.Model != "arena" || m.ArenaBytes != arena || m.OptimizerBytes != opt || m.FixedBytes != cost.FixedBytes ||
		m.PerGPUPeakBytes != arena+opt+cost.FixedBytes {
		t.Errorf("memory %+v; want arena %d + optimizer %d + fixed %d", m, arena, opt, cost.FixedBytes)
	}
	// The weights' working copy is in the storage dtype.
	if m.WeightsBytes != res.Report.Params.Count*int64(storage.Size()) {
		t.Errorf("weights %d bytes for %d parameters in %v", m.WeightsBytes, res.Report.Params.Count, storage)
	}
	if m.WeightsBytes+m.GradientsBytes+m.ActivationsBytes != arena {
		t.Errorf("arena %d split into %d+%d+%d", arena, m.WeightsBytes, m.GradientsBytes, m.ActivationsBytes)
	}
	if c := res.Report.Checkpoints; c.Policy != "none" && c.PeakAfter != m.PerGPUPeakBytes {
		t.Errorf("checkpointing planned %d, the report %d", c.PeakAfter, m.PerGPUPeakBytes)
	}
}

// TestReportPeakIsArena: one memory model for several models and flags.
func TestReportPeakIsArena(t *testing.T) {
	for _, c := range []struct {
		model      string
		seq        int64
		opts       Options
		storage    tensor.DType
		wantPolicy string
	}{
		{"llama_mini", 64, Options{Loss: "cross-entropy"}, tensor.F32, "none"},
		{"llama_mini", 64, Options{Loss: "cross-entropy", Precision: "bf16"}, tensor.BF16, "none"},
		{"llama_mini", 64, Options{Loss: "cross-entropy", Precision: "bf16", Checkpoint: "layers",
			Attention: AttentionOptions{Mode: "dilated", Segments: []int64{16, 32}, Dilations: []int64{1, 2}}}, tensor.BF16, "layers"},
		{"gpt_mini", 32, Options{Loss: "cross-entropy", Checkpoint: "selective"}, tensor.F32, "selective"},
		{"gpt_mini", 32, Options{Loss: "cross-entropy", Precision: "bf16", MemoryBudget: 1}, tensor.BF16, ""},
	} {
		f, err := Load("../testdata/onnx/"+c.model+".onnx", Bindings{SeqLen: c.seq, Batch: 1})
		if err != nil {
			t.Fatal(err)
		}
		res, err := Compile(f, CompileOptions{Target: h200(t), Options: c.opts})
		if c.wantPolicy == "" {
			// A budget nothing fits: refused, naming the smallest peak of the same model.
			if err == nil || !strings.Contains(err.Error(), "smallest planned peak") {
				t.Errorf("%s %+v: %v", c.model, c.opts, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s %+v: %v", c.model, c.opts, err)
		}
		if res.Report.Checkpoints.Policy != c.wantPolicy {
			t.Errorf("%s %+v: policy %s", c.model, c.opts, res.Report.Checkpoints.Policy)
		}
		checkOneModel(t, res, c.storage)
	}
}

// TestBudgetIsCheckedAgainstTheArena: a --memory-budget between the plans'
// peaks makes auto checkpoint, and the report's peak (the arena model) fits it.
func TestBudgetIsCheckedAgainstTheArena(t *testing.T) {
	load := func() *ir.Func {
		f, err := llamagen.Build(llamagen.Config{Dim: 64, Layers: 2, Heads: 4, FFN: 192, Vocab: 512, Batch: 1, SeqLen: 1024})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	opts := Options{Loss: "cross-entropy", Precision: "bf16"}
	none, err := Compile(load(), CompileOptions{Target: h200(t), Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	opts.MemoryBudget = none.Report.Memory.PerGPUPeakBytes - 1
	res, err := Compile(load(), CompileOptions{Target: h200(t), Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	checkOneModel(t, res, tensor.BF16)
	if p := res.Report.Memory.PerGPUPeakBytes; res.Report.Checkpoints.Policy == "none" || p > opts.MemoryBudget {
		t.Errorf("budget %d: policy %s, peak %d", opts.MemoryBudget, res.Report.Checkpoints.Policy, p)
	}
}

// TestSnapshotsInThePlan: a step trained with checkpoints holds their pinned
// host buffer and, when it fits the budget, their device staging copy in its
// planned peak (the trainer adds nothing of its own); without room the staging
// copy is dropped and the peak is the plain step's.
func TestSnapshotsInThePlan(t *testing.T) {
	compile := func(snap bool, budget int64) report.Memory {
		t.Helper()
		f, err := Load("../testdata/onnx/gpt_mini.onnx", Bindings{SeqLen: 32, Batch: 1})
		if err != nil {
			t.Fatal(err)
		}
		res, err := Compile(f, CompileOptions{Target: h200(t), Snapshots: snap,
			Options: Options{Loss: "cross-entropy", Checkpoint: "none", MemoryBudget: budget}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Report.Memory
	}
	plain, staged := compile(false, 0), compile(true, 0)
	if plain.SnapshotHostBytes != 0 || plain.SnapshotStagingBytes != 0 {
		t.Errorf("without checkpoints: %+v", plain)
	}
	if staged.SnapshotHostBytes != plain.OptimizerBytes || staged.SnapshotStagingBytes != plain.OptimizerBytes ||
		staged.PerGPUPeakBytes != plain.PerGPUPeakBytes+plain.OptimizerBytes {
		t.Errorf("with checkpoints: host %d, staging %d, peak %d; want %d, %d, %d", staged.SnapshotHostBytes,
			staged.SnapshotStagingBytes, staged.PerGPUPeakBytes, plain.OptimizerBytes, plain.OptimizerBytes,
			plain.PerGPUPeakBytes+plain.OptimizerBytes)
	}
	tight := compile(true, plain.PerGPUPeakBytes) // the step fits, its staging copy does not
	if tight.SnapshotStagingBytes != 0 || tight.SnapshotHostBytes != plain.OptimizerBytes ||
		tight.PerGPUPeakBytes != plain.PerGPUPeakBytes {
		t.Errorf("tight budget: %+v", tight)
	}
}

// TestFlagshipMillionTokens is the plan at 1M tokens: the flagship's
// architecture (built in IR: no weights' data) with LongNet attention, fused
// cross-entropy and bf16 storage fits one H200 with the default checkpoint
// policy, under PyTorch's 96.6 GiB with per-layer checkpointing.
func TestFlagshipMillionTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a 1M-token step (2 s)")
	}
	cfg := llamagen.Flagship(1 << 20)
	f, err := llamagen.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Compile(f, CompileOptions{Target: h200(t), Options: Options{Loss: "cross-entropy",
		Precision: "bf16", Attention: AttentionOptions{Mode: "dilated"}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Report.Params.Count != 221275136 {
		t.Errorf("params %d, want the flagship's 221,275,136", res.Report.Params.Count)
	}
	checkOneModel(t, res, tensor.BF16)
	m, c := res.Report.Memory, res.Report.Checkpoints
	const pytorch = 96.6 * (1 << 30)
	t.Logf("policy %s, planned %.2f GiB (arena %.2f, optimizer %.2f, fixed %.2f); tried %v", c.Policy,
		gibf(m.PerGPUPeakBytes), gibf(m.ArenaBytes), gibf(m.OptimizerBytes), gibf(m.FixedBytes), c.Tried)
	if c.Policy == "none" || float64(m.PerGPUPeakBytes) > pytorch {
		t.Errorf("policy %s plans %.2f GiB, PyTorch's per-layer checkpointing 96.6 GiB", c.Policy, gibf(m.PerGPUPeakBytes))
	}
}

func gibf(b int64) float64 { return float64(b) / (1 << 30) }
