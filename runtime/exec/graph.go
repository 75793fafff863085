package exec

import (
	"fmt"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda"
)

// A Bound step whose plan allows it (codegen.PlanGraph) runs as a CUDA graph:
// its first Step runs the launches one by one, which loads every kernel and
// plans every cuBLASLt GEMM; the second captures them from the stream into a
// graph and instantiates it; that and every later Step replays the graph with
// one launch. Only the token batch changes between steps, and it is uploaded
// into the same arena buffer every step before the replay reads it, so the
// graph runs the same kernels on the same addresses as the uncaptured step,
// with the same bits.
//
// The optimizer's three launches (norm, AdamW) stay outside the graph: their
// per-step scalars (learning rate, bias corrections) pass by value, and with
// accumulation they run once per several steps. They cost three launches a
// step beside the hundreds the graph replaces.

// graphState is a runner's CUDA graph: the decision, made once, and the graph.
type graphState struct {
	decided bool
	note    string // "captured N launches (M graph nodes)" or "not captured: why"
	graph   *cuda.Graph
	runs    int // Bound steps run
}

// captureReason says why plan runs uncaptured in a session with opts, or ""
// when it is captured: the plan's own decision first, then the session's.
func captureReason(plan *codegen.LaunchPlan, opts Options) string {
	switch {
	case !plan.Graph.Capture:
		return plan.Graph.String()
	case opts.Profile:
		return "not captured: --profile times every launch with its own events"
	case opts.SyncEach:
		return "not captured: Options.SyncEach synchronises after every launch"
	}
	return ""
}

// boundLaunch runs one Bound step's launches: uncaptured on the first step or
// when the plan or session rules capture out, else through the graph (captured
// on the second step). A capture that fails runs the step uncaptured, and the
// note says why.
func (r *runner) boundLaunch(f *ir.Func) error {
	g := &r.graphs
	g.runs++
	if !g.decided && g.runs > 1 {
		g.decided = true
		if why := captureReason(r.plan, r.opts); why != "" {
			g.note = why
		} else if graph, err := r.stream.Capture(func() error { return r.queue(f) }); err != nil {
			g.note = fmt.Sprintf("not captured: capturing the step failed: %v", err)
		} else {
			g.graph = graph
			g.note = fmt.Sprintf("captured %d launches (%d graph nodes)", r.plan.Graph.Launches, graph.Nodes())
		}
	}
	if g.graph == nil {
		return r.launch(f)
	}
	if err := g.graph.Launch(r.stream); err != nil {
		return fmt.Errorf("exec: func @%s: %w", f.Name, err)
	}
	if err := r.stream.Synchronize(); err != nil {
		return fmt.Errorf("exec: running the captured step of func @%s (turn capture off with "+
			"--cuda-graph=off to find the launch): %w", f.Name, err)
	}
	return nil
}

// CUDAGraph says how the bound step runs: "captured N launches (M graph
// nodes)", "not captured: why", or "" before its second Step decides.
func (b *Bound) CUDAGraph() string {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return b.r.graphs.note
}
