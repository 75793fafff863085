package optim

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/tensor"
)

// TestHostStepMatchesUpdate runs the host optimizer's CPU update
// (exec.HostStep with Apply, chunked over goroutines) on random state and
// wants the update function's masters, moments and rounded working weights on
// the CPU interpreter bit for bit, for fp32 and bf16 storage, with clipping,
// over tensors that span several chunks and one shorter than a chunk.
func TestHostStepMatchesUpdate(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		t.Run(dt.String(), func(t *testing.T) { hostStepMatches(t, dt) })
	}
}

func hostStepMatches(t *testing.T, dt tensor.DType) {
	rng := rand.New(rand.NewPCG(4, uint64(dt)))
	rnd := func(d tensor.DType, scale float64, pos bool, shape ...int64) *tensor.Tensor {
		x := tensor.New(d, shape...)
		for i := range x.F {
			v := rng.NormFloat64() * scale
			if pos {
				v *= v
			}
			x.F[i] = v
		}
		x.RoundTo(d)
		return x
	}
	shapes := map[string][]int64{"w": {300, 500}, "c": {7}}
	b := ir.NewBuilder("g")
	w := b.Weight("w", rnd(dt, 1, false, shapes["w"]...))
	c := b.Weight("c", rnd(dt, 1, false, shapes["c"]...))
	b.Output("grad.w", b.Mul(w, w))
	b.Output("grad.c", b.Mul(c, c))
	o := DefaultAdamW()
	o.MaxNorm = 0.5
	u := buildUpdate(t, b, o)
	const lr, done = 3e-3, 11
	in := map[string]*tensor.Tensor{LRInput: tensor.Scalar(tensor.F64, lr),
		StepState: tensor.Scalar(tensor.F64, done)}
	for _, name := range u.Weights {
		sh := shapes[name]
		in["grad."+name] = rnd(dt, 1e-2, false, sh...)
		in[MasterPrefix+name] = rnd(tensor.F32, 1, false, sh...)
		in[MomentPrefix+name] = rnd(tensor.F32, 1e-3, false, sh...)
		in[VariancePrefix+name] = rnd(tensor.F32, 1e-3, true, sh...)
	}
	want, err := interp.Run(u.Func, in, interp.Options{Precision: tensor.F32})
	if err != nil {
		t.Fatal(err)
	}
	// The coefficient comes from the GPU's norm in a HostOptimizer; here the
	// interpreter's, so that the rest compares bit for bit (TestScalarsMatchUpdate).
	coef := float32(math.Min(o.MaxNorm/(want[GradNormOutput].F[0]+1e-6), 1))
	var sizes []int64
	var grads []byte
	var master, m, v []float32
	flat := func(dst []float32, x *tensor.Tensor) []float32 {
		for _, f := range x.F {
			dst = append(dst, float32(f))
		}
		return dst
	}
	for _, name := range u.Weights {
		sizes = append(sizes, int64(in["grad."+name].Numel()))
		grads = append(grads, in["grad."+name].Encode()...)
		master = flat(master, in[MasterPrefix+name])
		m = flat(m, in[MomentPrefix+name])
		v = flat(v, in[VariancePrefix+name])
	}
	job := exec.HostStep{Sizes: sizes, GradDType: dt.String(), WeightDType: dt.String(), Grads: grads,
		Weights: make([]byte, len(grads)), Master: master, M: m, V: v,
		Scalars: exec.AdamWStep(o.Scalars(done, lr)), Coef: coef, Clip: true, Threads: 3,
		Update: func(h exec.AdamWStep, g, master, m, v []float32, coef float32, clip bool) {
			StepScalars(h).Apply(g, master, m, v, coef, clip)
		}}
	// Done comes once per tensor, after its last chunk (the uploads' cue).
	var mu sync.Mutex
	dones := map[int]int{}
	job.Done = func(k int) {
		mu.Lock()
		dones[k]++
		mu.Unlock()
	}
	job.Run()
	if len(dones) != len(sizes) || dones[0] != 1 || dones[1] != 1 {
		t.Errorf("Done calls per tensor %v, want one each of %d", dones, len(sizes))
	}
	var off int
	var woff int
	for _, name := range u.Weights {
		n := in["grad."+name].Numel()
		wantW := want[name].Encode()
		for _, st := range []struct {
			name string
			got  []float32
		}{{MasterPrefix + name, master}, {MomentPrefix + name, m}, {VariancePrefix + name, v}} {
			for j := range n {
				if g, w := st.got[off+j], want[st.name].F[j]; float64(g) != w {
					t.Fatalf("%s[%d]: host %v, update function %v", st.name, j, g, w)
				}
			}
		}
		for j, x := range wantW {
			if job.Weights[woff+j] != x {
				t.Fatalf("%s: working weight byte %d: host %#x, update function %#x", name, j,
					job.Weights[woff+j], x)
			}
		}
		off += n
		woff += len(wantW)
	}
}
