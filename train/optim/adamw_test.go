package optim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// gradFunc is a stand-in gradient function over weights "w" [3,4] and "c" [4]:
// the optimizer only sees "grad.<w>" outputs, so any smooth function of the
// weights (here grad.w = w² − 0.3, grad.c = 3·sin(c)) makes a small, non-trivial
// problem that moves every step.
func gradFunc(t *testing.T, seed uint64) *ir.Func {
	r := rand.New(rand.NewPCG(seed, 1))
	rnd := func(shape ...int64) *tensor.Tensor {
		x := tensor.New(tensor.F32, shape...)
		for i := range x.F {
			x.F[i] = r.NormFloat64()
		}
		x.RoundTo(tensor.F32)
		return x
	}
	b := ir.NewBuilder("toy")
	w := b.Weight("w", rnd(3, 4))
	c := b.Weight("c", rnd(4))
	b.Output("grad.w", b.Sub(b.Mul(w, w), b.Scalar(tensor.F32, 0.3)))
	b.Output("grad.c", b.Mul(b.Unary(ir.OpSin, c), b.Scalar(tensor.F32, 3)))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// refAdamW is a direct Go transcription of torch.optim.AdamW's single-tensor
// step (torch/optim/adamw.py, _single_tensor_adam with decoupled decay) and of
// torch.nn.utils.clip_grad_norm_, in float64.
type refAdamW struct {
	b1, b2, eps, wd, maxNorm float64
	micro                    int
	step                     int
	m, v                     map[string][]float64
}

func (r *refAdamW) update(params, gradSums map[string][]float64, names []string, lr float64) float64 {
	grads := map[string][]float64{}
	for _, n := range names {
		g := make([]float64, len(gradSums[n]))
		for i, x := range gradSums[n] {
			g[i] = x / float64(r.micro)
		}
		grads[n] = g
	}
	// clip_grad_norm_: total = ||(||g_1||, ..., ||g_k||)||.
	var total float64
	for _, n := range names {
		var s float64
		for _, x := range grads[n] {
			s += x * x
		}
		total += s
	}
	total = math.Sqrt(total)
	if r.maxNorm > 0 {
		coef := min(r.maxNorm/(total+1e-6), 1.0)
		for _, n := range names {
			for i := range grads[n] {
				grads[n][i] *= coef
			}
		}
	}
	r.step++
	for _, n := range names {
		p, g := params[n], grads[n]
		if r.m[n] == nil {
			r.m[n], r.v[n] = make([]float64, len(p)), make([]float64, len(p))
		}
		m, v := r.m[n], r.v[n]
		for i := range p {
			p[i] *= 1 - lr*r.wd
			m[i] += (g[i] - m[i]) * (1 - r.b1)
			v[i] = v[i]*r.b2 + g[i]*g[i]*(1-r.b2)
		}
		bc1 := 1 - math.Pow(r.b1, float64(r.step))
		bc2 := 1 - math.Pow(r.b2, float64(r.step))
		stepSize := lr / bc1
		bc2Sqrt := math.Sqrt(bc2)
		for i := range p {
			denom := math.Sqrt(v[i])/bc2Sqrt + r.eps
			p[i] += -stepSize * m[i] / denom
		}
	}
	return total
}

// runSteps trains gradFunc's weights for steps updates with both the IR update
// (interp.Run in f64) and refAdamW, feeding each the gradients at its own weights,
// and returns the largest difference of weights and grad norms.
func runSteps(t *testing.T, o AdamW, steps int, sched Schedule) float64 {
	t.Helper()
	g := gradFunc(t, 7)
	u, err := o.Build(g)
	if err != nil {
		t.Fatal(err)
	}
	opts := interp.Options{Precision: tensor.F64}
	micro := max(o.MicroSteps, 1)
	ref := &refAdamW{b1: o.Beta1, b2: o.Beta2, eps: o.Eps, wd: o.WeightDecay, maxNorm: o.MaxNorm,
		micro: micro, m: map[string][]float64{}, v: map[string][]float64{}}
	refW := map[string][]float64{}
	irW := map[string]*tensor.Tensor{}
	for _, n := range u.Weights {
		refW[n] = append([]float64{}, g.Param(n).Data.F...)
		irW[n] = g.Param(n).Data
	}
	state := map[string]*tensor.Tensor{}
	for _, p := range u.Func.Params {
		if p.Role == ir.RoleState {
			state[p.Name] = State(p)
		}
	}
	var worst float64
	for s := range steps {
		// Gradient sums over micro-steps: the same gradient scaled 1, 2, ... so
		// accumulation is exercised.
		irIn := map[string]*tensor.Tensor{LRInput: tensor.Scalar(tensor.F64, sched.At(s))}
		refSums := map[string][]float64{}
		for k, v := range state {
			irIn[k] = v
		}
		gIR, err := interp.Run(g, irW, opts)
		if err != nil {
			t.Fatal(err)
		}
		refIn := map[string]*tensor.Tensor{}
		for _, n := range u.Weights {
			// Unrounded f64 values in an f32 tensor: f64 precision never rounds them.
			refIn[n] = &tensor.Tensor{DType: tensor.F32, Shape: g.Param(n).Data.Shape,
				F: append([]float64{}, refW[n]...)}
		}
		gRef, err := interp.Run(g, refIn, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range u.Weights {
			sum := gIR["grad."+n].Clone()
			rs := make([]float64, len(sum.F))
			for i := range sum.F {
				sum.F[i] *= float64(micro*(micro+1)) / 2
				rs[i] = gRef["grad."+n].F[i] * float64(micro*(micro+1)) / 2
			}
			irIn["grad."+n] = sum
			refSums[n] = rs
		}
		out, err := interp.Run(u.Func, irIn, opts)
		if err != nil {
			t.Fatal(err)
		}
		norm := ref.update(refW, refSums, u.Weights, sched.At(s))
		worst = max(worst, math.Abs(out[GradNormOutput].F[0]-norm)/max(1, norm))
		for k := range state {
			state[k] = out[k]
		}
		for _, n := range u.Weights {
			irW[n] = out[n]
			for i, x := range out[n].F {
				worst = max(worst, math.Abs(x-refW[n][i]))
			}
		}
		if got := out[StepState].F[0]; got != float64(s+1) {
			t.Fatalf("step state after %d updates = %v", s+1, got)
		}
	}
	return worst
}

// TestAdamWMatchesTorch compares five updates with the Go transcription of
// torch.optim.AdamW, in f64, with weight decay and a warmup+cosine schedule.
func TestAdamWMatchesTorch(t *testing.T) {
	o := DefaultAdamW()
	o.WeightDecay = 0.1
	sched := Schedule{LR: 0.05, MinLR: 0.005, Warmup: 2, Total: 5}
	d := runSteps(t, o, 5, sched)
	t.Logf("largest difference %g", d)
	if d > 1e-6 {
		t.Errorf("IR AdamW differs from torch's formulas by %g", d)
	}
}

// TestAdamWClipAccumulate adds active clipping and 3-way gradient accumulation.
func TestAdamWClipAccumulate(t *testing.T) {
	o := DefaultAdamW()
	o.MaxNorm = 0.5 // the toy gradient's norm is a few units, so every step clips
	o.MicroSteps = 3
	if d := runSteps(t, o, 6, Schedule{LR: 0.01, Total: 6}); d > 1e-6 {
		t.Errorf("IR AdamW with clipping and accumulation differs by %g", d)
	}
}

// TestClip checks clip_grad_norm_'s arithmetic on a gradient of known norm: the
// first Adam step moves each weight by lr·ĝ/(|ĝ|+eps) = ±lr whatever the scale, so
// the check reads the clipped gradient from the first moment (m = 0.1·ĝ).
func TestClip(t *testing.T) {
	b := ir.NewBuilder("g")
	w := b.Weight("w", tensor.FromFloats(tensor.F32, []int64{2}, []float64{0, 0}))
	b.Output("grad.w", b.Add(w, b.Const(tensor.FromFloats(tensor.F32, []int64{2}, []float64{3, 4}))))
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ maxNorm, wantScale float64 }{
		{0, 1},                  // off
		{10, 1},                 // norm 5 < 10: coefficient clamped to 1
		{1, 1 / (5 + 1e-6)},     // clipped to norm ~1
		{2.5, 2.5 / (5 + 1e-6)}, // clipped to norm ~2.5
	} {
		o := DefaultAdamW()
		o.MaxNorm = tc.maxNorm
		u, err := o.Build(g)
		if err != nil {
			t.Fatal(err)
		}
		out, err := interp.Run(u.Func, withMoments(u, map[string]*tensor.Tensor{
			LRInput:  tensor.Scalar(tensor.F64, 0.1),
			"grad.w": tensor.FromFloats(tensor.F32, []int64{2}, []float64{3, 4}),
		}), interp.Options{Precision: tensor.F64})
		if err != nil {
			t.Fatal(err)
		}
		if n := out[GradNormOutput].F[0]; n != 5 {
			t.Errorf("max_norm %v: grad_norm = %v, want 5 (before clipping)", tc.maxNorm, n)
		}
		m := out[MomentPrefix+"w"].F
		for i, gi := range []float64{3, 4} {
			if want := 0.1 * gi * tc.wantScale; math.Abs(m[i]-want) > 1e-12 {
				t.Errorf("max_norm %v: m[%d] = %v, want %v", tc.maxNorm, i, m[i], want)
			}
		}
	}
}

// TestSchedule checks warmup, peak, the cosine midpoint, the floor and beyond.
func TestSchedule(t *testing.T) {
	s := Schedule{LR: 1, MinLR: 0.1, Warmup: 4, Total: 14}
	for _, tc := range []struct {
		step int
		want float64
	}{
		{0, 0.25}, {1, 0.5}, {3, 1}, // warmup ramps to the peak
		{4, 1},               // cosine starts at the peak
		{9, 0.1 + 0.9*0.5},   // halfway down
		{14, 0.1}, {99, 0.1}, // floor
	} {
		if got := s.At(tc.step); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("At(%d) = %v, want %v", tc.step, got, tc.want)
		}
	}
	if got := (Schedule{LR: 2, Total: 3}).At(0); got != 2 {
		t.Errorf("no warmup: At(0) = %v, want 2", got)
	}
	for _, bad := range []Schedule{{LR: 0, Total: 1}, {LR: 1, MinLR: 2, Total: 1},
		{LR: 1, Warmup: -1, Total: 1}, {LR: 1}} {
		if bad.Check() == nil {
			t.Errorf("%+v: Check accepted it", bad)
		}
	}
}

// TestMasterWeightsBF16 checks that a bf16 weight trains through an f32 master
// copy: the model-dtype output is the master rounded to bf16, and a step too small
// for bf16 still accumulates in the master.
func TestMasterWeightsBF16(t *testing.T) {
	b := ir.NewBuilder("g")
	w := b.Weight("w", tensor.FromFloats(tensor.BF16, []int64{1}, []float64{1}))
	b.Output("grad.w", b.Add(b.Mul(w, b.Scalar(tensor.BF16, 0)), b.Scalar(tensor.BF16, 1)))
	o := DefaultAdamW()
	o.WeightDecay = 0
	u := buildUpdate(t, b, o)
	if dt := u.Func.Output("w").Type.DType; dt != tensor.BF16 {
		t.Fatalf("output w is %v, want bf16", dt)
	}
	in := map[string]*tensor.Tensor{LRInput: tensor.Scalar(tensor.F64, 1e-3),
		"grad.w": tensor.FromFloats(tensor.BF16, []int64{1}, []float64{1})}
	for range 3 {
		run := withMoments(u, map[string]*tensor.Tensor{})
		for k, v := range in {
			if k != "w.out" {
				run[k] = v
			}
		}
		out, err := interp.Run(u.Func, run, interp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range u.StateNames() {
			in[s] = out[s]
		}
		in["w.out"] = out["w"]
	}
	// Three steps of 1e-3 from 1: the master holds 0.997, bf16 rounds it to 0.99609375.
	if m := in[MasterPrefix+"w"].F[0]; math.Abs(m-0.997) > 1e-6 {
		t.Errorf("master = %v, want 0.997", m)
	}
	if w := in["w.out"].F[0]; w != 0.99609375 {
		t.Errorf("bf16 weight = %v, want 0.99609375", w)
	}
}

// TestAccumulate checks the accumulation function adds sums and gradients.
func TestAccumulate(t *testing.T) {
	g := gradFunc(t, 1)
	f, err := Accumulate(g)
	if err != nil {
		t.Fatal(err)
	}
	x := tensor.FromFloats(tensor.F32, []int64{4}, []float64{1, 2, 3, 4})
	in := map[string]*tensor.Tensor{"sum.c": x, "grad.c": x,
		"sum.w": tensor.New(tensor.F32, 3, 4), "grad.w": tensor.New(tensor.F32, 3, 4)}
	out, err := interp.Run(f, in, interp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := out["sum.c"].F; got[3] != 8 {
		t.Errorf("sum.c = %v, want 2·[1 2 3 4]", got)
	}
}

// TestBuildErrors checks bad hyper-parameters and a function without gradients.
func TestBuildErrors(t *testing.T) {
	g := gradFunc(t, 1)
	for _, mod := range []func(*AdamW){
		func(o *AdamW) { o.Beta1 = 1 }, func(o *AdamW) { o.Eps = 0 },
		func(o *AdamW) { o.WeightDecay = -1 }, func(o *AdamW) { o.MaxNorm = -1 },
	} {
		o := DefaultAdamW()
		mod(&o)
		if _, err := o.Build(g); err == nil {
			t.Errorf("%+v: Build accepted it", o)
		}
	}
	b := ir.NewBuilder("nograd")
	b.Output("y", b.Input("x", ir.T(tensor.F32, 2)))
	f, _ := b.Build()
	if _, err := DefaultAdamW().Build(f); err == nil {
		t.Error("Build accepted a function with no gradients")
	}
}

// buildUpdate builds the gradient function b holds and o's update of it.
func buildUpdate(t *testing.T, b *ir.Builder, o AdamW) *Update {
	t.Helper()
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	u, err := o.Build(g)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestMasterOf: the master of a weight of fp32 values shares its storage
// (issue #26: no third float64 copy of the model on the host); a weight with
// an element that rounding to fp32 changes, or a NaN, gets a rounded copy.
func TestMasterOf(t *testing.T) {
	w := tensor.FromFloats(tensor.BF16, []int64{2, 2}, []float64{1, -0.5, 3, 0.25})
	if m := masterOf(w); m.DType != tensor.F32 || &m.F[0] != &w.F[0] || !slices.Equal(m.Shape, w.Shape) {
		t.Errorf("bf16 weight: master %v%v, shared %v", m.DType, m.Shape, &m.F[0] == &w.F[0])
	}
	for _, x := range []float64{0.1, math.NaN()} {
		w := tensor.FromFloats(tensor.F64, []int64{2}, []float64{1, x})
		m := masterOf(w)
		if &m.F[0] == &w.F[0] || m.F[1] == x || m.DType != tensor.F32 {
			t.Errorf("f64 weight holding %v: master %v %v, shared %v", x, m.DType, m.F, &m.F[0] == &w.F[0])
		}
	}
}

// withMoments adds to in the zero moments a fresh update starts from (Build
// gives them no Param.Data) where in has none.
func withMoments(u *Update, in map[string]*tensor.Tensor) map[string]*tensor.Tensor {
	for _, p := range u.Func.Params {
		if _, ok := in[p.Name]; !ok && p.Role == ir.RoleState && p.Data == nil {
			in[p.Name] = State(p)
		}
	}
	return in
}
