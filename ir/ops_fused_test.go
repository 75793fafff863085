package ir_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes/autodiff/gradcheck"
	"github.com/lcc-dev/lcc/tensor"
)

// TestFLCEGradRule checks the VJP of fused_linear_cross_entropy (its grad op)
// against central finite differences in float64, for every reduction, both
// layouts of w, ignored rows and row chunks that do not divide the rows.
func TestFLCEGradRule(t *testing.T) {
	g := newGen()
	labels := ints(tensor.I64, sh(5), 2, -100, 0, 6, 2)
	for _, c := range []struct {
		name  string
		attrs ir.Attrs
		w     []int64
	}{
		{"mean", ir.A("ignore_index", -100, "reduction", "mean", "chunk_rows", 3), sh(4, 7)},
		{"sum transpose_w", ir.A("ignore_index", -100, "reduction", "sum", "transpose_w", true,
			"chunk_rows", 2), sh(7, 4)},
		{"none", ir.A("ignore_index", -100, "reduction", "none"), sh(4, 7)},
		{"mean default chunk transpose_w", ir.A("ignore_index", -100, "transpose_w", true), sh(7, 4)},
	} {
		t.Run(c.name, func(t *testing.T) {
			gc := gradCase{name: "flce " + c.name, op: ir.OpFusedLinearCrossEntropy, attrs: c.attrs,
				args: []gradArg{g.w(5, 4), g.w(c.w...), labels}}
			f, inputs, err := gc.build()
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(5, 6))
			seeds := map[string]*tensor.Tensor{}
			for _, o := range f.Outputs {
				s := tensor.New(tensor.F64, o.Value.Type.Shape...)
				for i := range s.F {
					s.F[i] = r.NormFloat64()
				}
				seeds[o.Name] = s
			}
			res, err := gradcheck.Check(f, inputs, gradcheck.Objective{Seeds: seeds}, 1e-6)
			if err != nil {
				t.Fatalf("%v\n%s", err, ir.Print(f))
			}
			if len(res) != 2 {
				t.Fatalf("checked %d weights, want 2", len(res))
			}
			for _, p := range res {
				if p.RelErr > 1e-6 || math.IsNaN(p.RelErr) {
					t.Errorf("d/d%s: relative error %.3g", p.Param, p.RelErr)
				}
			}
		})
	}
}

// TestFLCEInfer checks the types and the errors of both ops, and the text form.
func TestFLCEInfer(t *testing.T) {
	src := `func @f(
    %0: f32[6,4] input "h",
    %1: f32[9,4] weight "w",
    %2: i64[6] label "y",
    %3: f32[] input "dl",
) {
  %4 = fused_linear_cross_entropy(%0, %1, %2) {chunk_rows=4, ignore_index=-100, reduction="mean", transpose_w} : f32[]
  %5, %6 = fused_linear_cross_entropy_grad(%0, %1, %2, %3) {chunk_rows=4, ignore_index=-100, reduction="mean", transpose_w} : f32[6,4], f32[9,4]
  return %4 "loss", %5 "dh", %6 "dw"
}
`
	f, err := ir.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	if got := ir.Print(f); got != src {
		t.Errorf("Print(Parse(s)) differs:\n%s\nwant\n%s", got, src)
	}
	b := ir.NewBuilder("bad")
	h := b.Input("h", ir.T(tensor.F32, 6, 4))
	w := b.Input("w", ir.T(tensor.F32, 4, 9))
	y := b.Input("y", ir.T(tensor.I64, 6))
	b.Apply(ir.OpFusedLinearCrossEntropy, ir.A("transpose_w", true), h, w, y)
	if err := b.Err(); err == nil {
		t.Error("transposed w of the wrong layout was accepted")
	}
	b = ir.NewBuilder("none")
	h = b.Input("h", ir.T(tensor.F32, 6, 4))
	w = b.Input("w", ir.T(tensor.F32, 4, 9))
	y = b.Input("y", ir.T(tensor.I64, 6))
	l := b.Apply1(ir.OpFusedLinearCrossEntropy, ir.A("reduction", "none"), h, w, y)
	if err := b.Err(); err != nil || !l.Type.Equal(ir.T(tensor.F32, 6)) {
		t.Errorf("reduction none: %v, %v", l.Type, err)
	}
}
