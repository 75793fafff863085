package interp_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/tensor"
)

// flceGraphs builds loss(h, w, labels) twice, unfused (matmul then
// softmax_cross_entropy) and fused, differentiated with respect to h and w.
func flceGraphs(t *testing.T, n, d, v int64, attrs ir.Attrs) (unfused, fused *ir.Func) {
	t.Helper()
	tw := attrs.Bool("transpose_w")
	ws := []int64{d, v}
	if tw {
		ws = []int64{v, d}
	}
	build := func(fuse bool) *ir.Func {
		b := ir.NewBuilder("ce")
		h := b.Weight("h", tensor.New(tensor.F32, n, d))
		w := b.Weight("w", tensor.New(tensor.F32, ws...))
		y := b.Label("y", ir.T(tensor.I64, n))
		var loss *ir.Value
		if fuse {
			loss = b.Apply1(ir.OpFusedLinearCrossEntropy, attrs, h, w, y)
		} else {
			la := ir.A("ignore_index", attrs.Int("ignore_index", -100),
				"reduction", attrs.String("reduction", "mean"))
			loss = b.Apply1(ir.OpSoftmaxCrossEntropy, la, b.MatMul(h, w, false, tw), y)
		}
		if loss.Type.Rank() > 0 {
			loss = b.ReduceSum(b.Mul(loss, loss), false) // a nonlinear use of per-row losses
		}
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
	return build(false), build(true)
}

// TestFLCEMatchesUnfused compares the fused op and its gradient with matmul +
// softmax_cross_entropy in f32 on random data with ignored labels.
func TestFLCEMatchesUnfused(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		n, d, v int64
		attrs   ir.Attrs
	}{
		{70, 16, 300, ir.A("ignore_index", -100, "reduction", "mean", "chunk_rows", 64)},
		{70, 16, 300, ir.A("ignore_index", -100, "reduction", "mean", "chunk_rows", 7, "transpose_w", true)},
		{33, 8, 50, ir.A("ignore_index", 3, "reduction", "sum", "chunk_rows", 16)},
		{33, 8, 50, ir.A("ignore_index", -100, "reduction", "none", "transpose_w", true)},
	} {
		name := fmt.Sprintf("%dx%dx%d %v", c.n, c.d, c.v, c.attrs)
		t.Run(name, func(t *testing.T) {
			unfused, fused := flceGraphs(t, c.n, c.d, c.v, c.attrs)
			in := map[string]*tensor.Tensor{}
			for _, p := range fused.Params {
				x := tensor.New(p.Value.Type.DType, p.Value.Type.Shape...)
				for i := range x.F {
					x.F[i] = r.NormFloat64()
				}
				for i := range x.I {
					x.I[i] = r.Int64N(c.v)
					if i%5 == 1 {
						x.I[i] = c.attrs.Int("ignore_index", -100)
					}
				}
				in[p.Name] = x
			}
			want, err := interp.Run(unfused, in, interp.Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := interp.Run(fused, in, interp.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"loss", "grad.h", "grad.w"} {
				if e := relErr(got[name].F, want[name].F); e > 1e-5 || math.IsNaN(e) {
					t.Errorf("%s: relative error %.3g", name, e)
				}
			}
			// No [N, V] value anywhere in the fused graph.
			for _, nd := range fused.Body {
				for _, res := range nd.Results {
					if res.Type.Numel() >= c.n*c.v {
						t.Errorf("fused graph holds %v from %s", res.Type, nd.Where())
					}
				}
			}
		})
	}
}

// relErr is ‖a − b‖ / ‖b‖ (‖a − b‖ when b is zero).
func relErr(a, b []float64) float64 {
	var num, den float64
	for i := range a {
		num += (a[i] - b[i]) * (a[i] - b[i])
		den += b[i] * b[i]
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}
