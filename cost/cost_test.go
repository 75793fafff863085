package cost_test

import (
	"testing"

	"github.com/lcc-dev/lcc/cost"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/tensor"
)

// mlp is a two-layer training graph: forward, then autodiff's backward.
func mlp(t *testing.T) *ir.Func {
	t.Helper()
	b := ir.NewBuilder("mlp")
	x := b.Input("x", ir.T(tensor.F32, 8, 4))
	w1 := b.Weight("w1", tensor.New(tensor.F32, 4, 16))
	w2 := b.Weight("w2", tensor.New(tensor.F32, 16, 3))
	y := b.Label("y", ir.T(tensor.I64, 8))
	h := b.Unary(ir.OpTanh, b.MatMul(x, w1, false, false))
	loss := b.Apply1(ir.OpFusedLinearCrossEntropy, ir.A("ignore_index", -100), h, w2, y)
	b.Output("loss", loss)
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	g, err := autodiff.Grad(f, autodiff.Options{Loss: "loss"})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestReportPeakIsSimulate pins that the report prints cost.Simulate's peak.
func TestReportPeakIsSimulate(t *testing.T) {
	g := mlp(t)
	rep := report.Build(g, report.Input{})
	if got, want := rep.Memory.SimulatedPeakBytes, cost.Simulate(g).PeakBytes; got != want {
		t.Errorf("report peak %d, cost.Simulate %d", got, want)
	}
}

// TestActivations checks the forward/backward split and the saved activations.
func TestActivations(t *testing.T) {
	g := mlp(t)
	start := cost.BackwardStart(g)
	if start == 0 || start == len(g.Body) || g.Body[start-1].Op != ir.OpFusedLinearCrossEntropy {
		t.Fatalf("backward starts at %d:\n%s", start, ir.Print(g))
	}
	// The backward reads the matmul (for tanh's derivative through y = tanh) and h.
	var saved []string
	for _, v := range cost.Saved(g) {
		saved = append(saved, v.Def.Op.String())
	}
	if len(saved) == 0 || cost.Activations(g) <= 0 {
		t.Errorf("saved %v, %d bytes", saved, cost.Activations(g))
	}
	fwd, bwd := cost.FLOPs(g)
	// Forward: 2·8·4·16 (matmul) + 128 (tanh) + 2·8·16·3 + 4·8·3 (fused loss).
	if want := int64(2*8*4*16 + 8*16 + 2*8*16*3 + 4*8*3); fwd != want || bwd <= fwd {
		t.Errorf("FLOPs forward %d (want %d), backward %d", fwd, want, bwd)
	}
}

// TestHostPeak: the host peak is the larger phase, the setup's (the whole
// model on the host beside the offload block) or the run's (what the host
// keeps, the offload block and the checkpoints' buffer); pinned bytes are the
// two pinned buffers; the runtime's host memory is beside either.
func TestHostPeak(t *testing.T) {
	m := cost.StepMemory{HostModelBytes: cost.HostModelBytes(300), HostKeptBytes: 40 * 8,
		HostBytes: 1000, SnapshotHostBytes: 60 * 12}
	if m.HostModelBytes != 300*8 || m.PinnedBytes() != 1000+720 {
		t.Fatalf("model %d, pinned %d", m.HostModelBytes, m.PinnedBytes())
	}
	if got := m.HostPeakBytes(); got != 2400+1000 {
		t.Errorf("setup phase: host peak %d", got)
	}
	m.SnapshotHostBytes = 3000
	if got := m.HostPeakBytes(); got != 320+1000+3000 {
		t.Errorf("run phase: host peak %d", got)
	}
	// The runtime's share is in either phase.
	m.HostRuntimeBytes = cost.HostRuntimeBytes
	if got := m.HostPeakBytes(); got != 320+1000+3000+cost.HostRuntimeBytes {
		t.Errorf("run phase with the runtime: host peak %d", got)
	}
	m.SnapshotHostBytes = 0
	if got := m.HostPeakBytes(); got != 2400+1000+cost.HostRuntimeBytes {
		t.Errorf("setup phase with the runtime: host peak %d", got)
	}
}

// TestOffloadCopies: the copy stream runs d2h and h2d in order after the
// compute before them, and a reader of a prefetched value waits for its copy.
func TestOffloadCopies(t *testing.T) {
	f, err := ir.Parse(`func @f(
    %0: f32[1024] input "x",
) {
  %1 = exp(%0) : f32[1024] loc("a")
  %2 = offload(%1) : f32[1024] loc("off")
  %3 = exp(%1) : f32[1024] loc("b")
  %4 = prefetch(%2) : f32[1024] loc("pre")
  %5 = add(%4, %3) : f32[1024] loc("c")
  return %5 "y"
}
`)
	if err != nil {
		t.Fatal(err)
	}
	// 1024 FLOPs a node at 1024 FLOP/s: 1 s each; 4096 bytes a copy. The
	// prefetch queued right before c makes c wait for it (1/256 s): hidden.
	fast := cost.OffloadCopies(f, 1024, 1<<20)
	if fast.Bytes != 4096 || fast.ComputeSeconds != 3 || fast.StallSeconds != 1.0/256 || !fast.Hidden() {
		t.Errorf("fast link: %+v", fast)
	}
	// At 4096 B/s each copy takes 1 s: the d2h runs from 1 s to 2 s during b,
	// the h2d from 2 s to 3 s, so c waits 1 s.
	slow := cost.OffloadCopies(f, 1024, 4096)
	if slow.CopySeconds != 2 || slow.StallSeconds != 1 || slow.Hidden() {
		t.Errorf("slow link: %+v", slow)
	}
}
