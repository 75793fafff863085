package exec

import (
	"strings"
	"testing"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
)

// TestCaptureReason: the plan's own refusal comes first; a capturable plan
// still runs uncaptured under profiling (each launch has its events) and
// SyncEach (a synchronisation per launch), saying which; otherwise "".
func TestCaptureReason(t *testing.T) {
	ok := &codegen.LaunchPlan{Steps: []codegen.Step{{Kind: "kernel"}, {Kind: "gemm"}}}
	ok.Graph = codegen.PlanGraph(ok, false)
	off := &codegen.LaunchPlan{Steps: ok.Steps}
	off.Graph = codegen.PlanGraph(off, true)
	for _, tc := range []struct {
		plan *codegen.LaunchPlan
		opts Options
		want string
	}{
		{ok, Options{}, ""},
		{ok, Options{Profile: true}, "not captured: --profile"},
		{ok, Options{SyncEach: true}, "not captured: Options.SyncEach"},
		{off, Options{Profile: true}, "not captured: " + codegen.GraphOff},
	} {
		got := captureReason(tc.plan, tc.opts)
		if (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%+v with %+v: %q, want %q…", tc.plan.Graph, tc.opts, got, tc.want)
		}
	}
}

// TestOptimizerSpans: the optimizer's passes per trained element, as the
// roofline counts them: with bf16 gradients and weights, the norm reads 2
// bytes and AdamW moves 28 (the floor: gradient and weight once, fp32 master,
// m and v read and written); fp32 sums read by both with accumulation, whose
// pass reads the arena's gradient and writes (then also reads) the sum.
func TestOptimizerSpans(t *testing.T) {
	o := &Optimizer{total: 1000, gsz: 2, asz: 2, wsz: 2}
	sp := o.stepSpans()
	if sp[0].fam != "optim.norm" || sp[0].launches != 2 || sp[0].work.Bytes != 2000 ||
		sp[1].fam != "optim.adamw" || sp[1].launches != 1 || sp[1].work.Bytes != 28000 {
		t.Errorf("bf16 step spans %+v", sp)
	}
	acc := &Optimizer{total: 1000, gsz: 4, asz: 2, wsz: 2}
	if sp := acc.stepSpans(); sp[0].work.Bytes != 4000 || sp[1].work.Bytes != 30000 {
		t.Errorf("accumulating step spans %+v", sp)
	}
	if a, b := acc.accumSpan(true), acc.accumSpan(false); a.work.Bytes != 6000 || b.work.Bytes != 10000 {
		t.Errorf("accumulation spans %+v, %+v", a, b)
	}
}

// TestPlanSpans: one span per step, named by the step's op (its kind when it
// has none), with the step's work.
func TestPlanSpans(t *testing.T) {
	plan := &codegen.LaunchPlan{Buffers: []codegen.Buffer{{ID: 0, Bytes: 64, Kind: "value"}},
		Steps: []codegen.Step{{Kind: "kernel", Op: "elementwise", Args: []int{0, 0}},
			{Kind: "gemm", Args: []int{0, 0, 0}, Gemm: &codegen.Gemm{M: 1, N: 2, K: 3, DType: "f32"}}}}
	sp := planSpans(plan)
	if len(sp) != 2 || sp[0].fam != "elementwise" || sp[0].work.Bytes != 128 ||
		sp[1].fam != "gemm" || sp[1].kind != "gemm" || sp[1].work.FLOPs != 12 {
		t.Errorf("spans %+v", sp)
	}
}
