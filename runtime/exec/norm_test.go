package exec

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/tensor"
)

// TestGPURMSNormGrad compares the fused RMSNorm and LayerNorm backward (rows in blocks of
// stretches, ragged, and the two-stage dscale) with the CPU, in f32 and bf16,
// with and without a scale, at widths that are and are not a multiple of the
// block.
func TestGPURMSNormGrad(t *testing.T) {
	dev := devicetest.Open(t)
	for _, c := range []struct {
		rows, m int64
		scale   bool
		ln      bool
	}{{1100, 1000, true, false}, {600, 1024, true, false}, {777, 96, false, false},
		{1100, 1000, true, true}, {600, 1024, true, true}} {
		b := ir.NewBuilder("rms_grad")
		x := b.Input("x", ir.T(tensor.F32, c.rows, c.m))
		dy := b.Input("dy", ir.T(tensor.F32, c.rows, c.m))
		args := []*ir.Value{x}
		if c.scale {
			args = append(args, b.Input("scale", ir.T(tensor.F32, c.m)))
		}
		op := ir.OpRMSNormGrad
		if c.ln {
			op = ir.OpLayerNormGrad
			if c.m == 1024 {
				args = append(args, b.Input("bias", ir.T(tensor.F32, c.m)))
			}
		}
		rs := b.Apply(op, ir.A("axis", -1, "eps", 1e-6), append(args, dy)...)
		for i, r := range rs {
			b.Output([]string{"dx", "dscale", "dbias"}[i], r)
		}
		f, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(c.rows), 9))
		in := map[string]*tensor.Tensor{}
		for _, p := range f.Params {
			v := tensor.New(tensor.F32, p.Value.Type.Shape...)
			for i := range v.F {
				v.F[i] = rng.NormFloat64()
			}
			in[p.Name] = v
		}
		name := fmt.Sprintf("%s %dx%d scale=%v", op, c.rows, c.m, c.scale)
		t.Run(name+"/f32", func(t *testing.T) { compare(t, dev, f, in, Options{}, 1e-5) })
		t.Run(name+"/bf16", func(t *testing.T) { compare(t, dev, f, in, Options{Storage: tensor.BF16}, 2e-2) })
	}
}
