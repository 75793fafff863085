// Package optim builds optimizer updates as lcc IR, so that the CPU interpreter
// and the GPU backend run the same update (docs/design.md §7).
//
// AdamW is Loshchilov and Hutter, "Decoupled Weight Decay Regularization" (ICLR
// 2019), with the exact arithmetic of torch.optim.AdamW (single tensor, not
// amsgrad, not maximize); global-norm clipping is torch.nn.utils.clip_grad_norm_;
// the schedule is linear warmup then cosine decay (Loshchilov and Hutter, "SGDR",
// ICLR 2017), computed on the host and fed to the update as a scalar.
//
// Invariants of an update function built here:
//   - Every RoleState parameter (fp32 master weights, Adam moments, the step count)
//     has an output of the same name holding its next value, so a runner feeds
//     outputs back into state by name and never needs to know the optimizer.
//   - Every updated weight w has an output "w" in w's own dtype: the master
//     weight rounded to the model's precision (a no-op for f32 models).
//   - Scalars (step, learning rate, bias corrections) are f64, as the Python
//     doubles of torch.optim are; they are cast to f32 where they meet tensors,
//     which is where PyTorch's kernels convert them.
package optim

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/tensor"
)

// Names of the update function's parameters and outputs.
const (
	// LRInput is the f64[] input holding this step's learning rate.
	LRInput = "lr"
	// StepState is the f64[] state counting the updates done so far.
	StepState = "step"
	// GradNormOutput is the f64[] global L2 norm of the averaged gradient before
	// clipping (what clip_grad_norm_ returns).
	GradNormOutput = "grad_norm"
	// MasterPrefix, MomentPrefix and VariancePrefix name a weight's fp32 master
	// copy and its first and second Adam moments: "adam.m.<weight>".
	MasterPrefix   = "master."
	MomentPrefix   = "adam.m."
	VariancePrefix = "adam.v."
	// SumPrefix names the gradient sums of the accumulation function.
	SumPrefix = "sum."
)

// AdamW configures the update. The zero value is not useful; start from
// DefaultAdamW, which matches torch.optim.AdamW's defaults.
type AdamW struct {
	Beta1, Beta2 float64
	Eps          float64
	// WeightDecay is decoupled: w ← w·(1 − lr·wd) before the Adam step. It applies
	// to every trained weight, as torch.optim.AdamW(model.parameters()) does.
	WeightDecay float64
	// MaxNorm clips the global gradient norm; 0 turns clipping off.
	MaxNorm float64
	// MicroSteps is how many micro-batches' gradients the fed gradients sum
	// (gradient accumulation); the update divides by it. 0 means 1.
	MicroSteps int
}

// DefaultAdamW returns torch.optim.AdamW's defaults (betas (0.9, 0.999), eps 1e-8,
// weight_decay 0.01), no clipping and no accumulation.
func DefaultAdamW() AdamW {
	return AdamW{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, MicroSteps: 1}
}

// Update is a built update function and the weights it trains.
type Update struct {
	Func *ir.Func
	// Weights lists the trained weights in the gradient function's parameter order;
	// each has an input "grad.<w>", states "master.<w>", "adam.m.<w>", "adam.v.<w>"
	// and an output "<w>".
	Weights []string
}

// TrainedWeights lists the weights g has gradients for ("grad.<w>" outputs whose
// parameter exists), in parameter order.
func TrainedWeights(g *ir.Func) []string {
	var out []string
	for _, p := range g.Params {
		if g.Output(autodiff.GradPrefix+p.Name) != nil {
			out = append(out, p.Name)
		}
	}
	return out
}

// ParamError is Check's error: the parameter at fault, its value and what it
// must be. lcc train names its flag for Param (FlagOf).
type ParamError struct {
	Param string // "beta1", "beta2", "eps", "weight decay", "max norm", "micro-steps"
	Value any
	Want  string
}

func (e *ParamError) Error() string {
	return fmt.Sprintf("adamw: %s %v: want %s", e.Param, e.Value, e.Want)
}

// Check validates o's hyperparameters, one rule per row; NaN fails every rule.
func (o AdamW) Check() error {
	for _, r := range []struct {
		ok    bool
		param string
		value any
		want  string
	}{
		{o.Beta1 >= 0 && o.Beta1 < 1, "beta1", o.Beta1, "0 <= beta1 < 1"},
		{o.Beta2 >= 0 && o.Beta2 < 1, "beta2", o.Beta2, "0 <= beta2 < 1"},
		{o.Eps > 0, "eps", o.Eps, "> 0"},
		{o.WeightDecay >= 0, "weight decay", o.WeightDecay, ">= 0"},
		{o.MaxNorm >= 0, "max norm", o.MaxNorm, ">= 0 (0 turns clipping off)"},
		{o.MicroSteps >= 0, "micro-steps", o.MicroSteps, ">= 1"},
	} {
		if !r.ok {
			return &ParamError{Param: r.param, Value: r.value, Want: r.want}
		}
	}
	return nil
}

// Build returns the update function for the gradient function g: for every
// "grad.<w>" output of g it trains weight w. Its initial state (Param.Data) is
// the weights' current values in f32 and step 0; the moments start at zero and
// have no Param.Data (ZeroMoment): a GPU run uploads zeros without a host copy,
// which for a 3B model is 26 GB of float64 zeros the host need not hold (issue
// #26). A caller that runs the update function itself feeds State's tensors.
//
// Per step, with g the fed gradient sum divided by MicroSteps, t = step + 1:
//
//	norm = sqrt(Σ_w Σ g²);  g ← g · min(1, max_norm/(norm + 1e-6))   (if MaxNorm > 0)
//	w ← w · (1 − lr·wd)
//	m ← m + (g − m)·(1 − β1)                                   (torch's lerp_)
//	v ← v·β2 + g·g·(1 − β2)
//	w ← w − (lr/(1 − β1^t)) · m / (sqrt(v)/sqrt(1 − β2^t) + eps)
func (o AdamW) Build(g *ir.Func) (*Update, error) {
	if o.MicroSteps == 0 {
		o.MicroSteps = 1
	}
	if err := o.Check(); err != nil {
		return nil, err
	}
	weights := TrainedWeights(g)
	if len(weights) == 0 {
		return nil, fmt.Errorf("adamw: func @%s has no %s<weight> outputs to train", g.Name,
			autodiff.GradPrefix)
	}
	b := ir.NewBuilder("adamw")
	f := b.Func()
	b.SetName("adamw")
	f64 := func(v float64) *ir.Value { return b.Scalar(tensor.F64, v) }
	// k makes an f32 scalar of a host double; the cast rounds only in f32 runs, so
	// f64 runs see the exact value.
	k := func(v *ir.Value) *ir.Value { return b.Cast(v, tensor.F32) }

	lr := b.Input(LRInput, ir.T(tensor.F64))
	step := f.AddParam(StepState, ir.RoleState, ir.T(tensor.F64), tensor.Scalar(tensor.F64, 0))
	t := b.Add(step, f64(1))

	type slot struct{ w, master, m, v, grad *ir.Value }
	slots := make([]slot, len(weights))
	for i, name := range weights {
		wt := g.Param(name).Value.Type
		if !wt.DType.IsFloat() {
			return nil, fmt.Errorf("adamw: weight %q is %v; only floating-point weights train", name, wt)
		}
		st := ir.T(tensor.F32, wt.Shape...)
		var init *tensor.Tensor
		if d := g.Param(name).Data; d != nil {
			init = masterOf(d)
		}
		s := slot{
			master: f.AddParam(MasterPrefix+name, ir.RoleState, st, init),
			m:      f.AddParam(MomentPrefix+name, ir.RoleState, st, nil),
			v:      f.AddParam(VariancePrefix+name, ir.RoleState, st, nil),
		}
		gt := g.Output(autodiff.GradPrefix + name).Type
		s.grad = b.Input(autodiff.GradPrefix+name, ir.T(gt.DType, gt.Shape...))
		s.w = g.Param(name).Value
		slots[i] = s
	}

	// Average the accumulated sum and compute the global norm, both in f32 with
	// the per-tensor sums of squares added in f64.
	grads := make([]*ir.Value, len(slots))
	var sq *ir.Value
	for i, s := range slots {
		gr := b.Cast(s.grad, tensor.F32)
		if o.MicroSteps > 1 {
			gr = b.Div(gr, k(f64(float64(o.MicroSteps))))
		}
		grads[i] = gr
		part := b.Cast(b.ReduceSum(b.Mul(gr, gr), false), tensor.F64)
		if sq == nil {
			sq = part
		} else {
			sq = b.Add(sq, part)
		}
	}
	norm := b.Unary(ir.OpSqrt, sq)
	if o.MaxNorm > 0 {
		// clip_grad_norm_: coef = max_norm/(norm + 1e-6), clamped to at most 1 and
		// always applied.
		coef := b.Apply1(ir.OpMin, nil, b.Div(f64(o.MaxNorm), b.Add(norm, f64(1e-6))), f64(1))
		c32 := k(coef)
		for i := range grads {
			grads[i] = b.Mul(grads[i], c32)
		}
	}

	// Host-side scalars of torch.optim.AdamW, in f64.
	decay := k(b.Sub(f64(1), b.Mul(lr, f64(o.WeightDecay))))
	bc1 := b.Sub(f64(1), b.Apply1(ir.OpPow, nil, f64(o.Beta1), t))
	bc2 := b.Sub(f64(1), b.Apply1(ir.OpPow, nil, f64(o.Beta2), t))
	stepSize := k(b.Neg(b.Div(lr, bc1)))
	bc2Sqrt := k(b.Unary(ir.OpSqrt, bc2))
	oneMinusB1 := k(f64(1 - o.Beta1))
	beta2 := k(f64(o.Beta2))
	oneMinusB2 := k(f64(1 - o.Beta2))
	eps := k(f64(o.Eps))

	b.Output(StepState, t)
	b.Output(GradNormOutput, norm)
	for i, s := range slots {
		gr := grads[i]
		p := b.Mul(s.master, decay)
		m := b.Add(s.m, b.Mul(b.Sub(gr, s.m), oneMinusB1))
		v := b.Add(b.Mul(s.v, beta2), b.Mul(b.Mul(gr, gr), oneMinusB2))
		denom := b.Add(b.Div(b.Unary(ir.OpSqrt, v), bc2Sqrt), eps)
		p = b.Add(p, b.Mul(b.Div(m, denom), stepSize))
		name := weights[i]
		b.Output(MasterPrefix+name, p)
		b.Output(MomentPrefix+name, m)
		b.Output(VariancePrefix+name, v)
		b.Output(name, b.Cast(p, s.w.Type.DType))
	}
	fn, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("adamw: %w", err)
	}
	return &Update{Func: fn, Weights: weights}, nil
}

// Accumulate returns the function that adds one micro-step's gradients to running
// sums: inputs "sum.<w>" and "grad.<w>", outputs "sum.<w>" = sum + grad, for every
// weight g has a gradient for. Sums are in the gradients' dtype, added in the
// order the micro-steps ran, so accumulation is deterministic.
func Accumulate(g *ir.Func) (*ir.Func, error) {
	b := ir.NewBuilder("accumulate")
	b.SetName("accumulate")
	for _, name := range TrainedWeights(g) {
		gt := g.Output(autodiff.GradPrefix + name).Type
		t := ir.T(gt.DType, gt.Shape...)
		sum := b.Input(SumPrefix+name, t)
		b.Output(SumPrefix+name, b.Add(sum, b.Input(autodiff.GradPrefix+name, t)))
	}
	f, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("accumulate: %w", err)
	}
	return f, nil
}

// StateNames lists the update's state parameters (step, then master, m and v of
// each weight): what a checkpoint must hold to resume the optimizer.
func (u *Update) StateNames() []string {
	var out []string
	for _, p := range u.Func.Params {
		if p.Role == ir.RoleState {
			out = append(out, p.Name)
		}
	}
	return out
}

// State is the update's state parameter p as a tensor: its Param.Data, or the
// zeros a moment starts at (Build leaves them unallocated).
func State(p *ir.Param) *tensor.Tensor {
	if p.Data != nil {
		return p.Data
	}
	return tensor.New(p.Value.Type.DType, p.Value.Type.Shape...)
}

// IsState reports whether name is a state of an update function (for tools that
// split a checkpoint's tensors into weights and optimizer state).
func IsState(name string) bool {
	return name == StepState || strings.HasPrefix(name, MasterPrefix) ||
		strings.HasPrefix(name, MomentPrefix) || strings.HasPrefix(name, VariancePrefix)
}

// StepScalars are the host-side scalars of one AdamW update, computed in fp64
// and rounded to fp32 exactly where Build's update function casts them: what a
// fused device update (runtime/exec.Optimizer) takes per step.
type StepScalars struct {
	Decay, OneMinusBeta1, Beta2, OneMinusBeta2, Bc2Sqrt, Eps, StepSize float32
}

// Scalars returns the scalars of the update after done updates (the state's
// step count) at learning rate lr.
func (o AdamW) Scalars(done int, lr float64) StepScalars {
	t := float64(done) + 1
	bc1 := 1 - math.Pow(o.Beta1, t)
	bc2 := 1 - math.Pow(o.Beta2, t)
	return StepScalars{Decay: float32(1 - lr*o.WeightDecay), OneMinusBeta1: float32(1 - o.Beta1),
		Beta2: float32(o.Beta2), OneMinusBeta2: float32(1 - o.Beta2), Bc2Sqrt: float32(math.Sqrt(bc2)),
		Eps: float32(o.Eps), StepSize: float32(-(lr / bc1))}
}

// Apply is one AdamW update of Build's function on a chunk of fp32 state, as
// the fused device update (codegen/cuda's optimizer kernels) computes it: every
// operation rounded to fp32 in the update function's order, the explicit
// conversions keeping Go from contracting a product and a sum into an FMA. g
// is the chunk's gradient in fp32, already divided by the micro-steps; with
// clip it is scaled by coef (the clipping coefficient, the fp64 value rounded
// to fp32). master, m and v are updated in place; all four have one length.
// It is the CPU update of runtime/exec.HostOptimizer, bit for bit the resident
// optimizer's.
func (s StepScalars) Apply(g, master, m, v []float32, coef float32, clip bool) {
	n := len(g)
	master, m, v = master[:n], m[:n], v[:n]
	// Go may fuse a product with a later sum or difference, across statements
	// too, unless a conversion rounds the product first: every product is
	// converted.
	for j, gr := range g {
		if clip {
			gr = float32(gr * coef)
		}
		mo, vo := m[j], v[j]
		p := float32(master[j] * s.Decay)
		mn := mo + float32(float32(gr-mo)*s.OneMinusBeta1)
		vn := float32(vo*s.Beta2) + float32(float32(gr*gr)*s.OneMinusBeta2)
		denom := float32(float32(math.Sqrt(float64(vn)))/s.Bc2Sqrt) + s.Eps
		master[j] = p + float32(float32(mn/denom)*s.StepSize)
		m[j], v[j] = mn, vn
	}
}

// masterOf is the fp32 master copy of weight d. A weight whose every element
// is already an fp32 value (f32, bf16 and f16 weights as loaded) shares d's
// storage: nothing writes a host tensor in place (the interpreter rounds only
// fresh storage, an update returns new tensors), so the master is d's values
// without a third float64 copy of the model on the host (issue #26;
// cost.HostModelBytes counts it so). Any other weight (f64, a NaN whose
// payload rounding would change) is rounded into a copy, as before.
func masterOf(d *tensor.Tensor) *tensor.Tensor {
	for _, v := range d.F {
		if float64(float32(v)) != v {
			return tensor.FromFloats(tensor.F32, d.Shape, d.F)
		}
	}
	return &tensor.Tensor{DType: tensor.F32, Shape: slices.Clone(d.Shape), F: d.F}
}
