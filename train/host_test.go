package train

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/internal/hostmem"
	"github.com/lcc-dev/lcc/internal/llamagen"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/report"
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

// TestCheckHost: a GPU run's plan is checked against the measured limits
// before anything is allocated: what it still has to allocate (the host peak
// less what is loaded) against the memory available, naming its source and
// the --host-memory-budget that plans within it, and its pinned bytes against
// RLIMIT_MEMLOCK, which RLIM_INFINITY (Unlimited) never refuses.
func TestCheckHost(t *testing.T) {
	const gib = 1 << 30
	m := report.Memory{HostPeakBytes: 100 * gib, HostModelBytes: 36 * gib, PinnedBytes: 64 * gib, HostBytes: 64 * gib}
	loaded := int64(9 * gib)
	fits := hostmem.Limits{Available: 91 * gib, Source: "MemAvailable in /proc/meminfo", MemLock: hostmem.Unlimited}
	if err := checkHost(m, loaded, fits); err != nil {
		t.Errorf("fits: %v", err)
	}
	if err := checkHost(report.Memory{}, loaded, hostmem.Limits{}); err != nil {
		t.Errorf("a plan without a host side: %v", err)
	}
	short := fits
	short.Available, short.Source = 80*gib, "the cgroup limit in /sys/fs/cgroup/memory.max less its usage"
	err := checkHost(m, loaded, short)
	for _, want := range []string{"91.00 GiB more host memory", "9.00 GiB already loaded", "host peak 100.00 GiB",
		"80.00 GiB available (the cgroup limit in /sys/fs/cgroup/memory.max", "--host-memory-budget=91136MiB"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("short host: want %q in %v", want, err)
		}
	}
	locked := fits
	locked.MemLock = 8 << 20
	err = checkHost(m, loaded, locked)
	for _, want := range []string{"pins 64.00 GiB", "8.00 MiB this process may lock (RLIMIT_MEMLOCK"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("memlock: want %q in %v", want, err)
		}
	}
}

// TestTraceHost: with LCC_TRACE_HOST set, a CPU run prints a host line at
// each set-up phase it passes and after its first steps; without it, none.
func TestTraceHost(t *testing.T) {
	c := small(t, 4)
	var log bytes.Buffer
	c.Log = &log
	if _, err := Train(c); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log.String(), "lcc: host ") {
		t.Errorf("traced without %s:\n%s", traceHostEnv, log.String())
	}
	t.Setenv(traceHostEnv, "1")
	log.Reset()
	if _, err := Train(c); err != nil {
		t.Fatal(err)
	}
	for _, phase := range []string{"loaded", "compiled", "optimizer built", "step 1", "step 3"} {
		if !strings.Contains(log.String(), "lcc: host "+phase+" ") || !strings.Contains(log.String(), " hwm ") {
			t.Errorf("no %q line:\n%s", phase, log.String())
		}
	}
	if strings.Contains(log.String(), "lcc: host step 4") {
		t.Errorf("traced past the first three steps:\n%s", log.String())
	}
}
