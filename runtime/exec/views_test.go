package exec

import (
	"fmt"
	"math"
	"sort"
	"testing"

	"github.com/lcc-dev/lcc/driver/drivertest"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/tensor"
)

// TestGPUFlagshipViews runs small training steps of the flagship's architecture
// (drivertest.FlagshipSteps: RoPE reading q and k inside the qkv projection and
// writing into the concat, SwiGLU reading the w13 halves in place, the backward
// writing the qkv and w13 gradients in place, 16-byte and scalar paths) on the
// GPU against the CPU interpreter, outputs poisoned first, in f32 (the bar of
// whole training steps) and bf16, where a whole step's rounding allows 10%: a
// lane or view that reads the wrong elements is off by the values themselves.
func TestGPUFlagshipViews(t *testing.T) {
	dev := devicetest.Open(t)
	var names []string
	for n := range drivertest.FlagshipSteps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		f := drivertest.FlagshipStep(t, drivertest.FlagshipSteps[name])
		in := initInputs(f, 5)
		t.Run(name+"/f32", func(t *testing.T) { compare(t, dev, f, in, Options{}, 1e-4) })
		t.Run(name+"/bf16", func(t *testing.T) { compare(t, dev, f, in, Options{Storage: tensor.BF16}, 1e-1) })
	}
}

// initInputs is randomInputs with weights scaled as an initialisation scales
// them (matrices by 1/√fan-in, norm scales near 1). With N(0, 1) weights the
// attention logits reach ±10² and a whole step's gradients are so ill-conditioned
// that rounding the inputs alone to bf16 moves them by up to 180% on the CPU.
func initInputs(f *ir.Func, seed uint64) map[string]*tensor.Tensor {
	in := randomInputs(f, seed)
	for _, p := range f.Params {
		x := in[p.Name]
		if p.Role != ir.RoleWeight || x == nil {
			continue
		}
		for i := range x.F {
			if len(x.Shape) == 1 {
				x.F[i] = 1 + 0.1*x.F[i]
			} else {
				x.F[i] /= math.Sqrt(float64(x.Shape[len(x.Shape)-1]))
			}
		}
	}
	return in
}

// TestGPUElementwiseTails runs flat elementwise runs whose length the lanes do not
// divide (a scalar tail after the 16-byte steps), a broadcast along rows, and a
// transposed and a sliced input read in place.
func TestGPUElementwiseTails(t *testing.T) {
	dev := devicetest.Open(t)
	b := ir.NewBuilder("tails")
	x := b.Input("x", ir.T(tensor.F32, 3, 5, 7))
	y := b.Input("y", ir.T(tensor.F32, 3, 5, 7))
	s := b.Input("s", ir.T(tensor.F32, 3, 5, 1))
	w := b.Input("w", ir.T(tensor.F32, 16, 24))
	b.Output("flat", b.Mul(b.Add(x, y), b.Unary(ir.OpExp, x)))
	b.Output("bcast", b.Sub(x, s))
	wt := b.Transpose(w, 1, 0)
	half := b.Apply1(ir.OpSlice, ir.A("axes", []int64{1}, "starts", []int64{8}, "ends", []int64{16},
		"steps", []int64{1}), wt)
	b.Output("views", b.Add(half, b.Unary(ir.OpSigmoid, half)))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	in := randomInputs(f, 6)
	t.Run("f32", func(t *testing.T) { compare(t, dev, f, in, Options{}, 1e-5) })
	t.Run("bf16", func(t *testing.T) { compare(t, dev, f, in, Options{Storage: tensor.BF16}, 2e-2) })
}

// TestGPUResidualNorms runs residual adds fused into the norms beside them:
// norm(a + b) writing the sum and the norm, and r + norm_grad(...).dx, for
// RMSNorm and LayerNorm, at widths with and without 16-byte rows (5000 rows of
// 36: the backward's blocks take ragged stretches of rows).
func TestGPUResidualNorms(t *testing.T) {
	dev := devicetest.Open(t)
	for _, m := range []int64{1000, 100, 36} {
		rows := int64(7)
		if m == 36 {
			rows = 5000
		}
		for _, op := range []ir.Op{ir.OpRMSNorm, ir.OpLayerNorm} {
			b := ir.NewBuilder("resid")
			x := b.Input("x", ir.T(tensor.F32, rows, m))
			y := b.Input("y", ir.T(tensor.F32, rows, m))
			r := b.Input("r", ir.T(tensor.F32, rows, m))
			dy := b.Input("dy", ir.T(tensor.F32, rows, m))
			scale := b.Input("scale", ir.T(tensor.F32, m))
			args := []*ir.Value{b.Add(x, y), scale}
			gop := ir.OpRMSNormGrad
			if op == ir.OpLayerNorm {
				args = append(args, b.Input("bias", ir.T(tensor.F32, m)))
				gop = ir.OpLayerNormGrad
			}
			b.Output("h", args[0])
			b.Output("norm", b.Apply1(op, ir.A("axis", -1, "eps", 1e-6), args...))
			gs := b.Apply(gop, ir.A("axis", -1, "eps", 1e-6), append(args, dy)...)
			b.Output("dx", b.Add(r, gs[0]))
			b.Output("dscale", gs[1])
			f, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			in := randomInputs(f, uint64(m))
			name := fmt.Sprintf("%s/%d", op, m)
			t.Run(name+"/f32", func(t *testing.T) { compare(t, dev, f, in, Options{}, 1e-5) })
			t.Run(name+"/bf16", func(t *testing.T) { compare(t, dev, f, in, Options{Storage: tensor.BF16}, 2e-2) })
		}
	}
}
