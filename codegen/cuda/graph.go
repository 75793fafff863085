package cuda

import "fmt"

// Graph says whether the executor captures a plan's steps as one CUDA graph
// and replays it every run (the plan's "cuda_graph"). Capture is decided here,
// from the plan alone, so that the program hash covers it and lcc compile
// reports what lcc train will do; the executor may still run uncaptured for a
// reason of its own (profiling, a driver without graphs), and says so.
type Graph struct {
	// Capture is true when the steps are captured; Reason says why not.
	Capture bool   `json:"capture"`
	Reason  string `json:"reason,omitempty"`
	// Launches is the number of kernel and GEMM steps one replay issues.
	Launches int `json:"launches"`
}

// GraphOff is the reason of a plan built with Options.NoCUDAGraph.
const GraphOff = "turned off (--cuda-graph=off)"

// PlanGraph decides how plan runs: captured, unless a step must leave the
// stream's order to the host. The first such step is the reason.
func PlanGraph(plan *LaunchPlan, off bool) Graph {
	g := Graph{}
	for _, s := range plan.Steps {
		if s.Kind == "kernel" || s.Kind == "gemm" {
			g.Launches++
		}
	}
	if off {
		g.Reason = GraphOff
		return g
	}
	for i, s := range plan.Steps {
		var why string
		switch s.Kind {
		case "kernel", "gemm":
			continue
		case "collective":
			// A TCP communicator moves the bytes on the host; NCCL could be
			// captured, but the plan does not know which one runs it.
			why = "runs a collective, which may move its bytes on the host"
		case "d2h", "h2d":
			why = "copies an offloaded activation through pinned host memory on a copy stream"
		case "wait":
			why = "waits for a copy or a collective queued on another stream"
		default:
			why = fmt.Sprintf("is a %q step", s.Kind)
		}
		g.Reason = fmt.Sprintf("step %d (%s) %s", i, s.Op, why)
		return g
	}
	if g.Launches == 0 {
		g.Reason = "the plan launches nothing"
		return g
	}
	g.Capture = true
	return g
}

// String is the line lcc prints: "captured N launches" or "not captured: why".
func (g Graph) String() string {
	if g.Capture {
		return fmt.Sprintf("captured %d launches", g.Launches)
	}
	if g.Reason == "" {
		return "not captured: the plan records no decision"
	}
	return "not captured: " + g.Reason
}
