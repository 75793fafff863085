package passes_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/plan"
	"github.com/lcc-dev/lcc/runtime/cpu"
)

// trainGraph is llama_mini's training graph as a compile would build it: the loss
// fused with the head, autodiff, then CSE and dead code. At 64 tokens the
// activations outweigh the weights and their gradients, as in real training, so
// that checkpointing has a peak to lower.
func trainGraph(t *testing.T) *ir.Func {
	t.Helper()
	f := lossModelSeq(t, "llama_mini", 64)
	if _, err := passes.Run(f, []passes.Pass{passes.FuseCrossEntropy}, passes.Options{}); err != nil {
		t.Fatal(err)
	}
	g, err := autodiff.Grad(f, autodiff.Options{Loss: "loss"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := passes.Run(g, passes.Cleanup, passes.Options{VerifyEach: true}); err != nil {
		t.Fatal(err)
	}
	return g
}

// TestInsertCheckpointsBitwise checks every policy leaves the loss and gradients
// bitwise unchanged on the CPU, recomputes something and lowers the peak.
func TestInsertCheckpointsBitwise(t *testing.T) {
	base := trainGraph(t)
	in := randomInputs(base, 512)
	want, err := cpu.Run(base, in, cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	peak0 := plan.Simulate(base).PeakBytes
	for _, policy := range []string{"selective", "layers"} {
		t.Run(policy, func(t *testing.T) {
			g := base.Clone()
			p, st := passes.InsertCheckpointsWithStats(passes.CheckpointConfig{Policy: policy})
			if _, err := passes.Run(g, []passes.Pass{p, passes.EliminateDeadCode},
				passes.Options{VerifyEach: true}); err != nil {
				t.Fatal(err)
			}
			if st.Policy != policy || st.RecomputedOps == 0 {
				t.Errorf("stats %+v", *st)
			}
			peak := plan.Simulate(g).PeakBytes
			if peak >= peak0 || st.PeakAfter != peak || st.SavedBytes != peak0-peak {
				t.Errorf("peak %d (stats %+v), without checkpoints %d", peak, *st, peak0)
			}
			if plan.Activations(g) >= plan.Activations(base) {
				t.Errorf("saved activations %d, without checkpoints %d",
					plan.Activations(g), plan.Activations(base))
			}
			got, err := cpu.Run(g, in, cpu.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for name, w := range want {
				if !slices.Equal(got[name].F, w.F) {
					t.Errorf("%s differs", name)
				}
			}
			t.Logf("%s: %d recomputed, peak %d -> %d, activations %d -> %d", policy,
				st.RecomputedOps, peak0, peak, plan.Activations(base), plan.Activations(g))
		})
	}
}

// TestInsertCheckpointsAuto checks auto's choice against the budget and its error.
func TestInsertCheckpointsAuto(t *testing.T) {
	base := trainGraph(t)
	peak0 := plan.Simulate(base).PeakBytes
	sel := base.Clone()
	selStats, err := passes.Checkpoint(sel, passes.CheckpointConfig{Policy: "selective"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		budget int64
		want   string
	}{{0, "none"}, {peak0, "none"}, {selStats.PeakAfter, "selective"}} {
		g := base.Clone()
		st, err := passes.Checkpoint(g, passes.CheckpointConfig{Policy: "auto", BudgetBytes: c.budget})
		if err != nil || st.Policy != c.want {
			t.Errorf("budget %d: policy %q, %v; want %s", c.budget, st.Policy, err, c.want)
		}
	}
	g := base.Clone()
	st, err := passes.Checkpoint(g, passes.CheckpointConfig{Policy: "auto", BudgetBytes: 1000})
	if err == nil || !strings.Contains(err.Error(), "--checkpoint=layers") ||
		!strings.Contains(err.Error(), "--memory-budget") {
		t.Fatalf("tiny budget: %v", err)
	}
	if st.PeakAfter >= peak0 {
		t.Errorf("smallest peak %d not below %d", st.PeakAfter, peak0)
	}
	// A budget between layers' peak and the greedy's search still fits.
	lay := base.Clone()
	layStats, _ := passes.Checkpoint(lay, passes.CheckpointConfig{Policy: "layers"})
	t.Logf("peaks: none %d, selective %d, layers %d, smallest %d (%s)", peak0,
		selStats.PeakAfter, layStats.PeakAfter, st.PeakAfter, st.Policy)
	if err := ir.Verify(g); err != nil {
		t.Fatal(err)
	}
}
