package train

import (
	"fmt"

	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/optim"
)

// resident is the training state of a GPU run kept on the device across steps
// (Config.Session): the step's arena holds the working weights, in the storage
// dtype, and its gradients; an exec.Optimizer holds fp32 masters and AdamW
// moments and updates them with fused kernels. A step uploads its token batch
// and downloads its loss and gradient norm; the host copies in t.weights and
// t.state are brought up to date only for checkpoints (pull).
type resident struct {
	bound *exec.Bound
	opt   *exec.Optimizer
	adamw optim.AdamW
	done  int // updates done: the optimizer's step count
	// saver takes the run's checkpoints in the background (nil: this rank
	// writes none).
	saver *saver
}

// setupResident binds the step to cfg.Session with the current weights and
// loads the optimizer state (fresh or resumed) into device memory.
func (t *trainer) setupResident() error {
	bound, err := t.cfg.Session.Bind(t.grad, t.weights)
	if err != nil {
		return err
	}
	grads := make([]string, len(t.upd.Weights))
	for i, w := range t.upd.Weights {
		grads[i] = autodiff.GradPrefix + w
	}
	opt, err := bound.NewOptimizer(exec.OptimizerSpec{Weights: t.upd.Weights, Grads: grads,
		Micro: t.cfg.Accumulate, MaxNorm: t.cfg.Clip})
	if err != nil {
		return err
	}
	var master, m, v []*tensor.Tensor
	for _, w := range t.upd.Weights {
		master = append(master, t.state[optim.MasterPrefix+w])
		m = append(m, t.state[optim.MomentPrefix+w])
		v = append(v, t.state[optim.VariancePrefix+w])
	}
	if err := opt.Load(master, m, v); err != nil {
		opt.Close()
		return err
	}
	t.dev = &resident{bound: bound, opt: opt, adamw: t.adamw, done: int(t.state[optim.StepState].F[0])}
	return nil
}

// residentStep is step on the device: Accumulate micro-batches through the
// bound step, then the fused AdamW update.
func (t *trainer) residentStep(s int) (stepStats, error) {
	d := t.dev
	var lossSum float64
	feeds := make(map[string]*tensor.Tensor, 2)
	for i := range t.cfg.Accumulate {
		b, err := t.stream.Next()
		if err != nil {
			return stepStats{}, err
		}
		feeds[t.tokens] = b.InputIDs
		if t.labels != "" {
			feeds[t.labels] = b.Labels
		}
		out, err := d.bound.Step(feeds, t.lossName)
		if err != nil {
			return stepStats{}, err
		}
		lossSum += out[0]
		if t.cfg.Accumulate > 1 {
			if err := d.opt.Accumulate(i == 0); err != nil {
				return stepStats{}, err
			}
		}
	}
	lr := t.sched.At(s)
	norm, err := d.opt.Step(exec.AdamWStep(d.adamw.Scalars(d.done, lr)))
	if err != nil {
		return stepStats{}, err
	}
	d.done++
	return stepStats{loss: lossSum / float64(t.cfg.Accumulate), lr: lr, gradNorm: norm}, nil
}

// residentTensors is what a checkpoint of a resident run holds after done
// updates, by checkpoint name: the masters and moments copied from the device,
// each trained weight as its master rounded to the weight's dtype (as the update
// function's output is), the step count, and the untrained weights and other
// state as the host holds them. It reads t.weights and t.state, which a
// resident run does not change, so the background writer may call it.
func (t *trainer) residentTensors(master, m, v []*tensor.Tensor, done int) map[string]*tensor.Tensor {
	ts := make(map[string]*tensor.Tensor, len(t.weights)+len(t.state))
	for k, w := range t.weights {
		ts[k] = w
	}
	for k, st := range t.state {
		ts[optimPrefix+k] = st
	}
	for i, w := range t.upd.Weights {
		ts[optimPrefix+optim.MasterPrefix+w] = master[i]
		ts[optimPrefix+optim.MomentPrefix+w] = m[i]
		ts[optimPrefix+optim.VariancePrefix+w] = v[i]
		wt := t.grad.Param(w).Value.Type
		ts[w] = tensor.FromFloats(wt.DType, wt.Shape, master[i].F)
	}
	ts[optimPrefix+optim.StepState] = tensor.Scalar(tensor.F64, float64(done))
	return ts
}

// residentReason says why the state of cfg cannot stay on the device, or "".
func (t *trainer) residentReason() string {
	switch {
	case t.cfg.Session == nil:
		return "no session"
	case t.shard != nil:
		return "a sharded step keeps its state on the host"
	}
	for _, w := range t.upd.Weights {
		if dt := t.grad.Param(w).Value.Type.DType; dt != tensor.F32 && dt != tensor.BF16 {
			return fmt.Sprintf("weight %q is %v", w, dt)
		}
	}
	return ""
}
