package train

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/internal/hostmem"
	"github.com/lcc-dev/lcc/internal/llamagen"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/targets"
)

// TestPlanUnderMeasuredHost (issue #26): a GPU run whose plan (lcc compile's,
// no --host-memory-budget) does not fit the host's measured limits plans again
// under what the host has, says so, and gets a program that fits; with
// --host-memory-budget given, or a host too small for any plan, it is refused
// with the figures. The step is a 1.1B Llama-like model (TinyLlama's widths,
// no GQA) at 1M tokens with dilated attention on one H200: unbounded, its plan
// offloads 124 GiB of sub-layer checkpoints; a 70 GiB host makes it recompute
// whole layers and offload less.
func TestPlanUnderMeasuredHost(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a 1M-token step several times")
	}
	tg, err := targets.Lookup("h200x1")
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	cfg := DefaultConfig()
	cfg.Device, cfg.Target, cfg.Precision, cfg.Loss = "cuda", tg, "bf16", "cross-entropy"
	cfg.Attention, cfg.SeqLen, cfg.Progress = driver.AttentionOptions{Mode: "dilated"}, 1<<20, &progress
	compiled := func(c Config) (*driver.Result, *ir.Func) {
		model, err := llamagen.Build(llamagen.Config{Dim: 2048, Layers: 22, Heads: 16, FFN: 5632, Vocab: 32000,
			Batch: 1, SeqLen: 1 << 20, Fused: true})
		if err != nil {
			t.Fatal(err)
		}
		orig := model.Clone()
		step, err := compileStep(c, model, c.compileOptions())
		if err != nil {
			t.Fatal(err)
		}
		return step, orig
	}
	step, orig := compiled(cfg)
	m := step.Report.Memory
	t.Logf("plan: host peak %d, model %d, offload %d, pinned %d, runtime %d", m.HostPeakBytes, m.HostModelBytes, m.HostBytes, m.PinnedBytes, m.HostRuntimeBytes)
	if m.HostBytes == 0 {
		t.Fatalf("the plan offloads nothing (host peak %d)", m.HostPeakBytes)
	}
	lim := hostmem.Limits{Available: 70 << 30, Source: "the test", MemLock: hostmem.Unlimited}
	again, err := fitMeasuredHost(cfg, step, orig, lim)
	if err != nil {
		t.Fatalf("planning again under %d bytes: %v", lim.Available, err)
	}
	g := again.Report.Memory
	t.Logf("planned again: %s, host peak %d, offload %d", again.Report.Checkpoints.Policy, g.HostPeakBytes, g.HostBytes)
	if g.HostPeakBytes > lim.Available+g.HostRuntimeBytes || g.HostBytes >= m.HostBytes || again.Hash == step.Hash {
		t.Errorf("planned again: host peak %d (offload %d, hash %s), available %d; before: %d (offload %d, hash %s)",
			g.HostPeakBytes, g.HostBytes, again.Hash, lim.Available, m.HostPeakBytes, m.HostBytes, step.Hash)
	}
	if !strings.Contains(progress.String(), "planning again under --host-memory-budget=") {
		t.Errorf("the run does not say it planned again: %q", progress.String())
	}

	// The same limits with --host-memory-budget given: lcc train keeps the
	// flag's plan and refuses it, with the budget that would fit.
	flagged := cfg
	flagged.HostMemoryBudget = m.HostPeakBytes
	step, orig = compiled(flagged)
	if _, err := fitMeasuredHost(flagged, step, orig, lim); err == nil ||
		!strings.Contains(err.Error(), "--host-memory-budget=") {
		t.Errorf("with --host-memory-budget: %v", err)
	}

	// A host with room for no plan: refused, with what would fit.
	step, orig = compiled(cfg)
	lim.Available = m.HostModelBytes / 2 // not even the weights
	if _, err := fitMeasuredHost(cfg, step, orig, lim); err == nil || !strings.Contains(err.Error(), "fit") {
		t.Errorf("a host too small for any plan: %v", err)
	}
}
