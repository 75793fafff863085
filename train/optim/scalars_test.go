package optim

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/tensor"
)

// TestScalarsMatchUpdate replays the fused device update (codegen/cuda's
// optimizer kernels: every operation rounded to fp32, no FMA) in Go with
// Scalars, and wants the update function's masters and moments on the CPU
// interpreter bit for bit (the norm to 1e-6: it sums in f32 there, f64 here), with
// clipping and accumulation on, at step 7 (Apply is that replay, the host
// optimizer's CPU update). The GPU test of the kernels
// themselves is runtime/exec's TestGPUOptimizerMatchesCPU.
func TestScalarsMatchUpdate(t *testing.T) {
	g := gradFunc(t, 3)
	o := DefaultAdamW()
	o.MaxNorm, o.MicroSteps = 0.25, 2
	u, err := o.Build(g)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	const lr, done = 2e-3, 7
	in := map[string]*tensor.Tensor{LRInput: tensor.Scalar(tensor.F64, lr),
		StepState: tensor.Scalar(tensor.F64, done)}
	f32 := func(n int, pos bool) *tensor.Tensor {
		x := tensor.New(tensor.F32, int64(n))
		for i := range x.F {
			v := rng.NormFloat64()
			if pos {
				v *= v * 1e-2
			}
			x.F[i] = float64(float32(v))
		}
		return x
	}
	for _, w := range u.Weights {
		n := g.Param(w).Value.Type.Shape
		size := 1
		for _, d := range n {
			size *= int(d)
		}
		for _, name := range []string{"grad." + w, MasterPrefix + w, MomentPrefix + w, VariancePrefix + w} {
			x := f32(size, name == VariancePrefix+w)
			x.Shape = n
			in[name] = x
		}
	}
	want, err := interp.Run(u.Func, in, interp.Options{Precision: tensor.F32})
	if err != nil {
		t.Fatal(err)
	}
	// The kernels: sumsq of g/micro in f64, coef in f64 cast to f32, then AdamW.
	micro := float32(o.MicroSteps)
	var sq float64
	for _, w := range u.Weights {
		for _, x := range in["grad."+w].F {
			y := float32(x) / micro
			sq += float64(y * y)
		}
	}
	// The kernels sum squares in f64, the interpreter per tensor in f32: the
	// norms agree to f32 rounding; the coefficient is taken from the
	// interpreter's norm so that the rest compares bit for bit.
	norm, cpuNorm := math.Sqrt(sq), want[GradNormOutput].F[0]
	if math.Abs(norm-cpuNorm) > 1e-6*norm {
		t.Errorf("norm %v, update function %v", norm, cpuNorm)
	}
	coef := float32(math.Min(o.MaxNorm/(cpuNorm+1e-6), 1))
	h := o.Scalars(done, lr)
	for _, w := range u.Weights {
		f32s := func(name string) []float32 {
			out := make([]float32, len(in[name].F))
			for j, x := range in[name].F {
				out[j] = float32(x)
			}
			return out
		}
		gr := f32s("grad." + w)
		for j := range gr {
			gr[j] /= micro
		}
		p, mn, vn := f32s(MasterPrefix+w), f32s(MomentPrefix+w), f32s(VariancePrefix+w)
		h.Apply(gr, p, mn, vn, coef, true)
		for _, c := range []struct {
			name string
			got  []float32
		}{{MasterPrefix + w, p}, {MomentPrefix + w, mn}, {VariancePrefix + w, vn}} {
			for j, x := range c.got {
				if wv := want[c.name].F[j]; float64(x) != wv {
					t.Fatalf("%s[%d]: fused arithmetic %v, update function %v", c.name, j, x, wv)
				}
			}
		}
	}
}
