package passes_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/cost"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
)

// offloadFixture is trainGraph with the peaks auto chooses between: the
// smallest in-device fixed plan (per-layer checkpoints) and the layers' kept
// values all offloaded.
func offloadFixture(t *testing.T) (base *ir.Func, perLayer, allOff passes.RecomputeStats) {
	t.Helper()
	base = trainGraph(t)
	plan := func(policy string) passes.RecomputeStats {
		st, err := passes.Recompute(base.Clone(), passes.RecomputeConfig{Policy: policy})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	perLayer = plan("layers")
	if sub := plan("sublayers"); sub.PeakAfter < perLayer.PeakAfter {
		perLayer = sub
	}
	allOff = plan("layers+offload")
	if allOff.Offloaded < 3 || allOff.PeakAfter >= perLayer.PeakAfter {
		t.Fatalf("the fixture offloads too little: %+v vs %+v", allOff, perLayer)
	}
	return base, perLayer, allOff
}

// TestPartialOffload: under a GPU budget between the in-device plan and full
// offload, auto offloads only some of the kept values (the rest stay on the
// GPU), never more as the budget grows; the step's numbers are bitwise those
// without checkpoints, and the pinned bytes are the offloaded values'.
func TestPartialOffload(t *testing.T) {
	base, perLayer, allOff := offloadFixture(t)
	in := randomInputs(base, 512)
	want, err := interp.Run(base, in, interp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var counts []int
	for _, budget := range []int64{allOff.PeakAfter, (allOff.PeakAfter + perLayer.PeakAfter) / 2,
		perLayer.PeakAfter - 1} {
		g := base.Clone()
		st, err := passes.Recompute(g, passes.RecomputeConfig{Policy: "auto", BudgetBytes: budget})
		if err != nil || st.Policy != "layers+offload" || st.PeakAfter > budget {
			t.Fatalf("budget %d: %+v, %v", budget, st, err)
		}
		host := cost.Simulate(g).HostBytes
		if st.Offloaded != countOps(g, ir.OpOffload) || st.OffloadedBytes != host || st.Offloadable != allOff.Offloaded {
			t.Errorf("budget %d: stats %+v; %d offloads, %d host bytes", budget, st, countOps(g, ir.OpOffload), host)
		}
		got, err := interp.Run(g, in, interp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for name, w := range want {
			if !slices.Equal(got[name].F, w.F) {
				t.Errorf("budget %d: %s differs", budget, name)
			}
		}
		counts = append(counts, st.Offloaded)
		t.Logf("budget %d: offloaded %d of %d (%d bytes), peak %d; tried %v", budget, st.Offloaded,
			st.Offloadable, st.OffloadedBytes, st.PeakAfter, st.Tried)
	}
	// On this small graph one value (the first layer's input, needed last)
	// already reaches full offload's peak: the other kept values stay on the GPU.
	if counts[0] < 1 || counts[0] >= allOff.Offloaded || !slices.IsSortedFunc(counts,
		func(a, b int) int { return b - a }) {
		t.Errorf("offloaded %v as the budget grows (all: %d): want fewer than all, never more as it grows",
			counts, allOff.Offloaded)
	}
}

// TestOffloadUnderHostBudget: when the host budget cannot hold the values the
// GPU needs offloaded, auto recomputes instead (the knapsack), and when copies
// would not hide behind compute it does too; with room on the host and a fast
// link it offloads.
func TestOffloadUnderHostBudget(t *testing.T) {
	base, perLayer, _ := offloadFixture(t)
	budget := perLayer.PeakAfter - 1
	for _, c := range []struct {
		name       string
		host       int64
		flops, bw  float64
		wantPolicy string
	}{
		{"host room, fast link", 1 << 40, 1e12, 1e15, "layers+offload"},
		{"host too small", 1, 0, 0, "knapsack"},
		{"copies do not hide", 1 << 40, 1e15, 1, "knapsack"},
	} {
		g := base.Clone()
		st, err := passes.Recompute(g, passes.RecomputeConfig{Policy: "auto", BudgetBytes: budget,
			HostBudgetBytes: c.host, FLOPsPerSec: c.flops, LinkBytesPerSec: c.bw})
		if err != nil || st.Policy != c.wantPolicy || st.PeakAfter > budget {
			t.Errorf("%s: %+v, %v; want %s within %d", c.name, st, err, c.wantPolicy, budget)
			continue
		}
		if off := countOps(g, ir.OpOffload); (c.wantPolicy == "knapsack") != (off == 0) {
			t.Errorf("%s: %d offloads under policy %s", c.name, off, st.Policy)
		}
		if c.bw > 0 && st.Offloaded > 0 && (st.Copies == nil || !st.Copies.Hidden()) {
			t.Errorf("%s: copies %+v", c.name, st.Copies)
		}
	}
}

// TestOffloadRefusal: a memory model under which only offload can fit the
// GPU (any plan without offload costs a large constant more), with a host
// budget too small for it, is refused naming the offload plan that would fit
// the GPU, its pinned bytes and the host budget.
func TestOffloadRefusal(t *testing.T) {
	base, _, allOff := offloadFixture(t)
	const extra = 1 << 40
	model := func(g *ir.Func) (int64, int64) {
		m := cost.Simulate(g)
		if m.HostBytes == 0 {
			return m.PeakBytes + extra, 0
		}
		return m.PeakBytes, m.HostBytes
	}
	g := base.Clone()
	_, err := passes.Recompute(g, passes.RecomputeConfig{Policy: "auto", BudgetBytes: allOff.PeakAfter,
		Memory: model, HostBudgetBytes: 1000})
	var re *passes.RecomputeError
	if !errors.As(err, &re) || re.Offload == nil || re.Offload.OffloadedBytes <= 1000 {
		t.Fatalf("want a refusal naming the offload plan: %v", err)
	}
	for _, want := range []string{"would fit the GPU", "pinned", "the host budget leaves 1000 bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q: %v", want, err)
		}
	}
	// With the host room it needs, the same plan is taken.
	st, err := passes.Recompute(base.Clone(), passes.RecomputeConfig{Policy: "auto",
		BudgetBytes: allOff.PeakAfter, Memory: model, HostBudgetBytes: re.Offload.OffloadedBytes})
	if err != nil || st.OffloadedBytes != re.Offload.OffloadedBytes {
		t.Errorf("with %d host bytes: %+v, %v", re.Offload.OffloadedBytes, st, err)
	}
}
