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
