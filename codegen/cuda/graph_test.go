package cuda

import (
	"strings"
	"testing"
)

// TestPlanGraph: a plan of kernels and GEMMs is captured, counting both; the
// first step that leaves order to the host or another stream is the reason it
// is not, named by its index and op; off says so whatever the steps.
func TestPlanGraph(t *testing.T) {
	k := Step{Kind: "kernel", Op: "elementwise"}
	gm := Step{Kind: "gemm", Op: "matmul"}
	for _, tc := range []struct {
		name  string
		steps []Step
		off   bool
		want  string
	}{
		{"kernels and gemms", []Step{k, gm, k}, false, "captured 3 launches"},
		{"off", []Step{k, gm}, true, "not captured: " + GraphOff},
		{"offload", []Step{k, {Kind: "d2h", Op: "offload"}, k, {Kind: "wait", Op: "offload"}}, false,
			"not captured: step 1 (offload) copies an offloaded activation through pinned host memory"},
		{"collective", []Step{gm, {Kind: "collective", Op: "all_reduce"}, {Kind: "wait", Op: "all_reduce"}},
			false, "not captured: step 1 (all_reduce) runs a collective"},
		{"empty", nil, false, "not captured: the plan launches nothing"},
	} {
		g := PlanGraph(&LaunchPlan{Steps: tc.steps}, tc.off)
		if s := g.String(); !strings.HasPrefix(s, tc.want) {
			t.Errorf("%s: %q, want it to start with %q", tc.name, s, tc.want)
		}
		if g.Capture != strings.HasPrefix(tc.want, "captured") {
			t.Errorf("%s: Capture %v for %q", tc.name, g.Capture, g)
		}
	}
}
