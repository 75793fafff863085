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
