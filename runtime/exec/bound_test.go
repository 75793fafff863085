package exec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/optim"
)

// optimGraph is a stand-in training step: weights w0 [37,5], w1 [7] (from an
// element offset that is no multiple of 4: the optimizer kernels go an element
// at a time), w2 [2·8192] (from one that is: four at a time), w3 [2·8192+3]
// (three chunks, a ragged last one) and w4 [1], gradients grad.wi = 2·gi of
// inputs gi (exact in any storage), plus an input-independent "loss".
// optimWeights and optimGrads are optimGraph's weights and their gradients.
var (
	optimWeights = []string{"w0", "w1", "w2", "w3", "w4"}
	optimGrads   = []string{"grad.w0", "grad.w1", "grad.w2", "grad.w3", "grad.w4"}
)

func optimGraph(t *testing.T, rng *rand.Rand) *ir.Func {
	b := ir.NewBuilder("step")
	f := b.Func()
	var loss *ir.Value
	for i, shape := range [][]int64{{37, 5}, {7}, {2 * 8192}, {2*8192 + 3}, {1}} {
		w := tensor.New(tensor.F32, shape...)
		for j := range w.F {
			w.F[j] = float64(float32(rng.NormFloat64()))
		}
		wv := f.AddParam(fmt.Sprintf("w%d", i), ir.RoleWeight, ir.T(tensor.F32, shape...), w)
		g := b.Input(fmt.Sprintf("g%d", i), ir.T(tensor.F32, shape...))
		b.Output(fmt.Sprintf("grad.w%d", i), b.Mul(g, b.Scalar(tensor.F32, 2)))
		s := b.ReduceSum(wv, false)
		if loss == nil {
			loss = s
		} else {
			loss = b.Add(loss, s)
		}
	}
	b.Output("loss", loss)
	fn, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return fn
}

// TestGPUOptimizerMatchesCPU runs the fused optimizer kernels (accumulation,
// norm, clipping, AdamW, the rounded working copy) on random weights, moments
// and gradients, with the working weights and the norm poisoned first, and
// wants train/optim's AdamW update on the CPU interpreter: fp32 storage to a
// few ulps, bf16 storage with the working copy the master rounded to bf16.
func TestGPUOptimizerMatchesCPU(t *testing.T) {
	dev := devicetest.Open(t)
	for _, st := range []tensor.DType{tensor.F32, tensor.BF16} {
		for _, micro := range []int{1, 3} {
			for _, clip := range []float64{0, 0.5} {
				t.Run(fmt.Sprintf("%v/micro%d/clip%v", st, micro, clip), func(t *testing.T) {
					optimCase(t, dev, st, micro, clip)
				})
			}
		}
	}
}

func optimCase(t *testing.T, dev *cuda.Device, st tensor.DType, micro int, clip float64) {
	rng := rand.New(rand.NewPCG(uint64(micro), 5))
	f := optimGraph(t, rng)
	s := NewSession(dev, Options{Storage: st, Poison: true, CacheDir: t.TempDir(), Profile: true})
	defer s.Close()
	b, err := s.Bind(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	ws := optimWeights
	o := optim.DefaultAdamW()
	o.MaxNorm, o.MicroSteps = clip, micro
	upd, err := o.Build(f)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := b.NewOptimizer(OptimizerSpec{Weights: ws, Grads: optimGrads,
		Micro: micro, MaxNorm: clip})
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Close()
	rnd := func(shape []int64, pos bool) *tensor.Tensor { return randF32(rng, shape, pos) }
	cin := map[string]*tensor.Tensor{optim.LRInput: tensor.Scalar(tensor.F64, 3e-3),
		optim.StepState: tensor.Scalar(tensor.F64, 4)}
	master, m, v := randState(rng, f, ws)
	for i, w := range ws {
		cin[optim.MasterPrefix+w], cin[optim.MomentPrefix+w], cin[optim.VariancePrefix+w] = master[i], m[i], v[i]
	}
	if err := opt.Load(master, m, v); err != nil {
		t.Fatal(err)
	}
	// Micro-steps: the device sums 2·g in f32 from its storage; the CPU sums
	// the same stored values.
	for i := range micro {
		feeds := map[string]*tensor.Tensor{}
		for k, w := range ws {
			g := rnd(f.Param(w).Value.Type.Shape, false)
			feeds[fmt.Sprintf("g%d", k)] = g
			stored := tensor.New(tensor.F32, g.Shape...)
			for j, x := range g.F {
				stored.F[j] = float64(float32(2 * x))
				if st == tensor.BF16 {
					stored.F[j] = roundBF16(stored.F[j])
				}
			}
			if prev := cin["grad."+w]; prev != nil && i > 0 {
				for j := range stored.F {
					stored.F[j] = float64(float32(prev.F[j]) + float32(stored.F[j]))
				}
			}
			cin["grad."+w] = stored
		}
		if _, err := b.Step(feeds, "loss"); err != nil {
			t.Fatal(err)
		}
		if micro > 1 {
			if err := opt.Accumulate(i == 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	norm, err := opt.Step(AdamWStep(o.Scalars(4, 3e-3)))
	if err != nil {
		t.Fatal(err)
	}
	// The profile has the step's families and the optimizer's, then starts over.
	prof := s.Profile()
	if prof["optim.adamw"] <= 0 || prof["optim.norm"] <= 0 || len(prof) < 3 ||
		(micro > 1) != (prof["optim.accum"] > 0) {
		t.Errorf("profile %v: want the step's families, optim.norm, optim.adamw (and optim.accum "+
			"when accumulating)", prof)
	}
	if again := s.Profile(); len(again) != 0 {
		t.Errorf("a second Profile gave %v, want nothing", again)
	}
	want, err := interp.Run(upd.Func, cin, interp.Options{Precision: tensor.F32})
	if err != nil {
		t.Fatal(err)
	}
	if wn := want[optim.GradNormOutput].F[0]; math.Abs(norm-wn) > 1e-5*wn {
		t.Errorf("grad norm %v, CPU %v", norm, wn)
	}
	gm, gmo, gv, err := opt.Save()
	if err != nil {
		t.Fatal(err)
	}
	for k, w := range ws {
		for _, c := range []struct {
			name string
			got  *tensor.Tensor
		}{{optim.MasterPrefix + w, gm[k]}, {optim.MomentPrefix + w, gmo[k]}, {optim.VariancePrefix + w, gv[k]}} {
			if e := relErr(c.got, want[c.name]); !(e <= 1e-5) {
				t.Errorf("%s: relative error %.3g", c.name, e)
			}
		}
		// The working copy: the master rounded to the storage, every element written.
		p, buf, err := b.Buffer(w)
		if err != nil {
			t.Fatal(err)
		}
		raw := make([]byte, buf.Bytes)
		if err := cuda.CopyDtoH(dev, raw, p); err != nil {
			t.Fatal(err)
		}
		got, err := tensor.Decode(st, buf.Shape, raw)
		if err != nil {
			t.Fatal(err)
		}
		for j, x := range got.F {
			wantX := float64(float32(gm[k].F[j]))
			if st == tensor.BF16 {
				wantX = roundBF16(wantX)
			}
			if x != wantX {
				t.Fatalf("working %s[%d] = %v, want the master %v rounded to %v (%v)", w, j, x, gm[k].F[j], st, wantX)
			}
		}
	}
	snapshotCase(t, dev, opt, o, [][]*tensor.Tensor{gm, gmo, gv})
}

// snapshotCase copies the optimizer's state to pinned memory in the
// background, staged on the device and not, and wants the bits of a
// synchronous download (want: masters, moments, variances). Without staging,
// a Step runs right after the copy is queued; its update must wait for it.
func snapshotCase(t *testing.T, dev *cuda.Device, opt *Optimizer, o optim.AdamW, want [][]*tensor.Tensor) {
	host, err := dev.AllocHost(opt.SnapshotBytes())
	if err != nil {
		t.Fatal(err)
	}
	defer host.Free()
	for _, stage := range []bool{true, false} {
		snap, err := opt.Snapshot(host, stage)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Staged() != stage {
			t.Errorf("stage %v: staged %v", stage, snap.Staged())
		}
		if _, err := opt.Snapshot(host, stage); err == nil {
			t.Error("a second outstanding snapshot was accepted")
		}
		if !stage {
			if _, err := opt.Step(AdamWStep(o.Scalars(5, 3e-3))); err != nil {
				t.Fatal(err)
			}
		}
		if err := snap.Wait(); err != nil {
			t.Fatal(err)
		}
		sameSnapshot(t, snap, want, fmt.Sprintf("stage %v", stage))
		if err := snap.Release(); err != nil {
			t.Fatal(err)
		}
	}
}

// roundBF16 rounds x to bf16 as the device storage does.
func roundBF16(x float64) float64 {
	return float64(tensor.BF16ToFloat32(tensor.Float32ToBF16(float32(x))))
}

// randF32 is a tensor of shape with normal values rounded to fp32, or, with pos,
// small positive ones (a second moment's).
func randF32(rng *rand.Rand, shape []int64, pos bool) *tensor.Tensor {
	x := tensor.New(tensor.F32, shape...)
	for j := range x.F {
		v := rng.NormFloat64()
		if pos {
			v = v * v * 1e-3
		}
		x.F[j] = float64(float32(v))
	}
	return x
}

// randState is a random AdamW state of f's weights ws: a master, a first and a
// second moment per weight, drawn in that order.
func randState(rng *rand.Rand, f *ir.Func, ws []string) (master, m, v []*tensor.Tensor) {
	for _, w := range ws {
		sh := f.Param(w).Value.Type.Shape
		master = append(master, randF32(rng, sh, false))
		m = append(m, randF32(rng, sh, false))
		v = append(v, randF32(rng, sh, true))
	}
	return master, m, v
}

// sameSnapshot fails t unless snap's masters and moments are want's (Save's
// order: masters, first moments, second moments) byte for byte.
func sameSnapshot(t *testing.T, snap *Snapshot, want [][]*tensor.Tensor, what string) {
	t.Helper()
	gm, gmo, gv := snap.Raw()
	for i, got := range [][][]byte{gm, gmo, gv} {
		for k := range got {
			if !slices.Equal(got[k], want[i][k].Encode()) {
				t.Errorf("%s: state %d of weight %d differs from Save's", what, i, k)
			}
		}
	}
}
