package passes_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/cost"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/autodiff"
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
	want, err := interp.Run(base, in, interp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	peak0 := cost.Simulate(base).PeakBytes
	for _, policy := range []string{"selective", "sublayers", "layers", "sublayers+offload", "layers+offload"} {
		t.Run(policy, func(t *testing.T) {
			g := base.Clone()
			p, st := passes.InsertRecomputeWithStats(passes.RecomputeConfig{Policy: policy})
			if _, err := passes.Run(g, []passes.Pass{p, passes.EliminateDeadCode},
				passes.Options{VerifyEach: true}); err != nil {
				t.Fatal(err)
			}
			if st.Policy != policy || st.RecomputedOps == 0 {
				t.Errorf("stats %+v", *st)
			}
			// Offload: every kept value but the first needed waits in host memory.
			if strings.HasSuffix(policy, "+offload") &&
				(st.Offloaded == 0 || countOps(g, ir.OpOffload) != st.Offloaded ||
					countOps(g, ir.OpPrefetch) != st.Offloaded || cost.Simulate(g).HostBytes == 0) {
				t.Errorf("offloaded %d: %d offloads, %d prefetches, %d host bytes", st.Offloaded,
					countOps(g, ir.OpOffload), countOps(g, ir.OpPrefetch), cost.Simulate(g).HostBytes)
			}
			peak := cost.Simulate(g).PeakBytes
			if peak >= peak0 || st.PeakAfter != peak || st.SavedBytes != peak0-peak {
				t.Errorf("peak %d (stats %+v), without checkpoints %d", peak, *st, peak0)
			}
			if cost.Activations(g) >= cost.Activations(base) {
				t.Errorf("saved activations %d, without checkpoints %d",
					cost.Activations(g), cost.Activations(base))
			}
			got, err := interp.Run(g, in, interp.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for name, w := range want {
				if !slices.Equal(got[name].F, w.F) {
					t.Errorf("%s differs", name)
				}
			}
			t.Logf("%s: %d recomputed, peak %d -> %d, activations %d -> %d", policy,
				st.RecomputedOps, peak0, peak, cost.Activations(base), cost.Activations(g))
		})
	}
}

// TestInsertCheckpointsAuto checks auto's search as the budget shrinks: none
// while everything fits, then the fitting plan with the least recompute
// (selective, then a per-layer plan), then offload to host memory, then the
// knapsack, then a refusal that
// names the smallest peak, what was tried and the flags that would help.
func TestInsertCheckpointsAuto(t *testing.T) {
	base := trainGraph(t)
	peak0 := cost.Simulate(base).PeakBytes
	fixed := map[string]passes.RecomputeStats{}
	for _, policy := range []string{"selective", "sublayers", "layers"} {
		st, err := passes.Recompute(base.Clone(), passes.RecomputeConfig{Policy: policy})
		if err != nil {
			t.Fatal(err)
		}
		fixed[policy] = st
	}
	sel, sub, lay := fixed["selective"], fixed["sublayers"], fixed["layers"]
	t.Logf("peaks: none %d, selective %d (%d FLOPs), sublayers %d (%d), layers %d (%d)", peak0,
		sel.PeakAfter, sel.RecomputedFLOPs, sub.PeakAfter, sub.RecomputedFLOPs, lay.PeakAfter, lay.RecomputedFLOPs)
	if !(sel.RecomputedFLOPs < lay.RecomputedFLOPs && lay.PeakAfter < sel.PeakAfter && sel.PeakAfter < peak0) {
		t.Fatalf("the fixture no longer trades memory for recompute: %+v %+v", sel, lay)
	}
	perLayer := min(sub.PeakAfter, lay.PeakAfter)
	auto := func(budget int64) (passes.RecomputeStats, *ir.Func, error) {
		g := base.Clone()
		st, err := passes.Recompute(g, passes.RecomputeConfig{Policy: "auto", BudgetBytes: budget})
		return st, g, err
	}
	for _, c := range []struct {
		budget int64
		want   []string
	}{
		{0, []string{"none"}},
		{peak0, []string{"none"}},
		{sel.PeakAfter, []string{"selective"}},
		{perLayer, []string{"sublayers", "layers"}},
	} {
		st, _, err := auto(c.budget)
		if err != nil || !slices.Contains(c.want, st.Policy) || c.budget > 0 && st.PeakAfter > c.budget {
			t.Errorf("budget %d: policy %q (peak %d), %v; want %v", c.budget, st.Policy, st.PeakAfter, err, c.want)
		}
	}
	// Below every in-device plan: the layers' kept values offloaded to host
	// memory, then the sublayers'.
	offload := map[string]int64{}
	for _, policy := range []string{"layers+offload", "sublayers+offload"} {
		st, err := passes.Recompute(base.Clone(), passes.RecomputeConfig{Policy: policy})
		if err != nil || st.PeakAfter >= perLayer {
			t.Fatalf("%s: %+v, %v: no lower than the in-device plans (%d)", policy, st, err, perLayer)
		}
		offload[policy] = st.PeakAfter
	}
	st, g, err := auto(perLayer - 1)
	if err != nil || st.Policy != "layers+offload" || st.PeakAfter != offload["layers+offload"] {
		t.Errorf("budget %d: %+v, %v; want layers+offload", perLayer-1, st, err)
	}
	if lo := offload["sublayers+offload"]; lo < offload["layers+offload"] {
		if st, _, err := auto(lo); err != nil || st.Policy != "sublayers+offload" {
			t.Errorf("budget %d: %+v, %v; want sublayers+offload", lo, st, err)
		}
	}
	// Below every fixed plan: the knapsack drops kept values until it fits.
	low := min(offload["layers+offload"], offload["sublayers+offload"]) - 1
	st, g, err = auto(low)
	if err != nil || st.Policy != "knapsack" || st.PeakAfter > low || cost.Simulate(g).PeakBytes != st.PeakAfter {
		t.Errorf("budget %d: %+v, %v", low, st, err)
	}
	var ce *passes.RecomputeError
	// Nothing fits: the smallest plan is applied and the error says so.
	st, g, err = auto(1000)
	if !errors.As(err, &ce) || ce.Smallest.PeakAfter != st.PeakAfter || ce.NoneBytes != peak0 {
		t.Fatalf("tiny budget: %v (%+v)", err, st)
	}
	for _, want := range []string{"budget 1000 bytes per GPU", fmt.Sprintf("smallest planned peak %d bytes", st.PeakAfter),
		"tried selective=", "--memory-budget", "--precision=bf16"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if st.PeakAfter > perLayer || cost.Simulate(g).PeakBytes != st.PeakAfter {
		t.Errorf("smallest peak %d, per-layer %d, applied %d", st.PeakAfter, perLayer, cost.Simulate(g).PeakBytes)
	}
	if err := ir.Verify(g); err != nil {
		t.Fatal(err)
	}
}

// TestInsertCheckpointsPeakModel checks that auto measures plans with the
// configured memory model (the driver's arena), not its own simulation.
func TestInsertCheckpointsPeakModel(t *testing.T) {
	base := trainGraph(t)
	peak0 := cost.Simulate(base).PeakBytes
	calls := 0
	double := func(f *ir.Func) int64 { calls++; return 2 * cost.Simulate(f).PeakBytes }
	// Under the simulation 2·peak0−1 fits without checkpoints; under the
	// doubled model it does not, and selective (the least recompute) does.
	budget := 2*peak0 - 1
	st, err := passes.Recompute(base.Clone(), passes.RecomputeConfig{Policy: "auto", BudgetBytes: budget})
	if err != nil || st.Policy != "none" {
		t.Errorf("simulated: %+v, %v", st, err)
	}
	st, err = passes.Recompute(base.Clone(), passes.RecomputeConfig{Policy: "auto", BudgetBytes: budget, Peak: double})
	if err != nil || st.Policy != "selective" || st.PeakBefore != 2*peak0 || st.PeakAfter > budget || calls < 2 {
		t.Errorf("doubled: %+v, %v, %d calls", st, err, calls)
	}
	_, err = passes.Recompute(base.Clone(), passes.RecomputeConfig{Policy: "auto", BudgetBytes: 1000,
		Peak: double, Hints: []string{"--hint-flag"}})
	if err == nil || !strings.Contains(err.Error(), "try --hint-flag") {
		t.Errorf("hints: %v", err)
	}
}
