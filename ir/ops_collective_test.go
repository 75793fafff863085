package ir_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/passes/autodiff/gradcheck"
	"github.com/lcc-dev/lcc/runtime/comm"
	"github.com/lcc-dev/lcc/tensor"
)

// runRanks runs f on every rank with per-rank inputs and returns each rank's outputs.
func runRanks(t *testing.T, f *ir.Func, in []map[string]*tensor.Tensor) []map[string]*tensor.Tensor {
	t.Helper()
	outs := make([]map[string]*tensor.Tensor, len(in))
	err := comm.NewWorld(len(in), 0).Run(func(e *comm.Endpoint) error {
		o, err := interp.Run(f, in[e.Rank()], interp.Options{Precision: tensor.F64, Comm: e})
		outs[e.Rank()] = o
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return outs
}

// TestCollectiveGradsFiniteDifference checks each collective's VJP over 3 ranks
// against central differences of the global objective Σ_ranks ⟨y_r, dy_r⟩, the
// convention of sharded programs (ops_collective.go).
func TestCollectiveGradsFiniteDifference(t *testing.T) {
	const n = 3
	for _, c := range []struct {
		op    ir.Op
		attrs ir.Attrs
		shape []int64
	}{
		{ir.OpAllGather, ir.A("axis", 1, "ranks", n), []int64{2, 2, 3}},
		{ir.OpReduceScatter, ir.A("axis", 0, "ranks", n), []int64{6, 2}},
		{ir.OpAllReduce, ir.A("op", "sum", "ranks", n), []int64{2, 3}},
		{ir.OpAllToAll, ir.A("split_axis", 2, "concat_axis", 1, "ranks", n), []int64{1, 2, 6, 2}},
		{ir.OpRingShift, ir.A("shift", 1, "ranks", n), []int64{4}},
	} {
		t.Run(c.op.String(), func(t *testing.T) {
			b := ir.NewBuilder("coll")
			x := b.Weight("x", tensor.New(tensor.F64, c.shape...))
			b.Output("y", b.Apply1(c.op, c.attrs, x))
			f, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			gf, err := autodiff.Grad(f, autodiff.Options{Seeds: map[string]string{"y": "dy"}, KeepOutputs: true})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, uint64(c.op)))
			in := make([]map[string]*tensor.Tensor, n)
			yShape := f.Outputs[0].Value.Type.Shape
			for r := range in {
				xs, dy := tensor.New(tensor.F64, c.shape...), tensor.New(tensor.F64, yShape...)
				for i := range xs.F {
					xs.F[i] = rng.NormFloat64()
				}
				for i := range dy.F {
					dy.F[i] = rng.NormFloat64()
				}
				in[r] = map[string]*tensor.Tensor{"x": xs, "dy": dy}
			}
			objective := func() float64 {
				var s float64
				for r, o := range runRanks(t, gf, in) {
					for i, v := range o["y"].F {
						s += v * in[r]["dy"].F[i]
					}
				}
				return s
			}
			grads := runRanks(t, gf, in)
			const h = 1e-6
			for r := range n {
				for i := range in[r]["x"].F {
					x := in[r]["x"].F
					old := x[i]
					x[i] = old + h
					up := objective()
					x[i] = old - h
					down := objective()
					x[i] = old
					fd := (up - down) / (2 * h)
					if got := grads[r]["grad.x"].F[i]; math.Abs(got-fd) > 1e-6*(1+math.Abs(fd)) {
						t.Errorf("rank %d, element %d: grad %v, finite difference %v", r, i, got, fd)
					}
				}
			}
		})
	}
}

func TestCollectiveInferErrors(t *testing.T) {
	for _, c := range []struct {
		op    ir.Op
		attrs ir.Attrs
		shape []int64
	}{
		{ir.OpReduceScatter, ir.A("axis", 0, "ranks", 4), []int64{6}},
		{ir.OpAllToAll, ir.A("split_axis", 0, "concat_axis", 0, "ranks", 4), []int64{6}},
		{ir.OpAllReduce, ir.A("op", "mean", "ranks", 2), []int64{6}},
		{ir.OpAllGather, ir.A("axis", 0), []int64{6}},
		{ir.OpShardPositions, ir.A("total", 10, "ranks", 4, "layout", "zigzag"), nil},
	} {
		b := ir.NewBuilder("bad")
		var args []*ir.Value
		if c.shape != nil {
			args = append(args, b.Input("x", ir.T(tensor.F32, c.shape...)))
		}
		b.Apply1(c.op, c.attrs, args...)
		if b.Err() == nil {
			t.Errorf("%v %v: no error", c.op, c.attrs)
		} else {
			t.Log(fmt.Sprint(b.Err()))
		}
	}
}

// collectiveGradCases are the one-rank finite-difference cases of the collective
// and sequence-parallel ops, for gradCases (grad_test.go).
func collectiveGradCases(g *gen) []gradCase {
	var cs []gradCase
	add := func(name string, op ir.Op, attrs ir.Attrs, args ...gradArg) {
		cs = append(cs, gradCase{name: name, op: op, attrs: attrs, args: args})
	}
	// Collectives on one rank (the multi-rank FD checks are in ops_collective_test.go).
	add("all_gather", ir.OpAllGather, ir.A("axis", 1, "ranks", 1), g.w(2, 3))
	add("reduce_scatter", ir.OpReduceScatter, ir.A("axis", 0, "ranks", 1), g.w(2, 3))
	add("all_reduce", ir.OpAllReduce, ir.A("op", "sum", "ranks", 1), g.w(2, 3))
	add("all_to_all", ir.OpAllToAll, ir.A("split_axis", 1, "concat_axis", 0, "ranks", 1), g.w(2, 3))
	add("ring_shift", ir.OpRingShift, ir.A("shift", 1, "ranks", 1), g.w(2, 3))
	ring := ir.A("causal", true, "scale", 0.5, "ranks", 1, "layout", "zigzag")
	add("ring_attention", ir.OpRingAttention, ring, g.w(1, 4, 2, 2), g.w(1, 4, 1, 2), g.w(1, 4, 1, 2))
	cs = append(cs, gradCase{name: "ring_attention lse only", op: ir.OpRingAttention, attrs: ring,
		args: []gradArg{g.w(1, 4, 2, 2), g.w(1, 4, 2, 2), g.w(1, 4, 2, 2)}, outs: []int{1}})
	sdil := ir.A("segments", []int{4, 8}, "dilations", []int{1, 2}, "causal", true, "scale", 0.5, "ranks", 1)
	add("sharded_dilated_attention", ir.OpShardedDilatedAttention, sdil, g.w(1, 8, 2, 2), g.w(1, 8, 2, 2),
		g.w(1, 8, 2, 2))
	return cs
}

// TestCollectiveGradCasesOneRank runs collectiveGradCases as TestGradRules does.
// TestGradTable counts them once gradCases appends collectiveGradCases(g).
func TestCollectiveGradCasesOneRank(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range collectiveGradCases(newGen()) {
		t.Run(c.name, func(t *testing.T) {
			f, inputs, err := c.build()
			if err != nil {
				t.Fatal(err)
			}
			seeds := map[string]*tensor.Tensor{}
			for _, o := range f.Outputs {
				s := tensor.New(tensor.F64, o.Value.Type.Shape...)
				for i := range s.F {
					s.F[i] = r.NormFloat64()
				}
				s.DType = o.Value.Type.DType
				seeds[o.Name] = s
			}
			res, err := gradcheck.Check(f, inputs, gradcheck.Objective{Seeds: seeds}, 1e-6)
			if err != nil {
				t.Fatalf("%v\n%s", err, ir.Print(f))
			}
			for _, p := range res {
				if p.RelErr > 1e-6 || math.IsNaN(p.RelErr) {
					t.Errorf("d/d%s: relative error %.3g", p.Param, p.RelErr)
				}
			}
		})
	}
}
