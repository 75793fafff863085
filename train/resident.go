package train

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/safetensors"
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
	opt   stateOptimizer
	adamw optim.AdamW
	done  int // updates done: the optimizer's step count
	// saver takes the run's checkpoints in the background (nil: this rank
	// writes none).
	saver *saver
}

// stateOptimizer is what a resident run asks of its optimizer: the device's
// (exec.Optimizer) or the host's (exec.HostOptimizer, when the plan keeps the
// state in pinned host memory). Both hold the state in one layout, so their
// checkpoints are the same files.
type stateOptimizer interface {
	Elements() int64
	Load(master, m, v []*tensor.Tensor) error
	Accumulate(first bool) error
	Step(h exec.AdamWStep) (float64, error)
	Save() (master, m, v []*tensor.Tensor, err error)
	SnapshotBytes() int
	Snapshot(host *cuda.HostBuffer, stage bool) (*exec.Snapshot, error)
	CUDAGraph() string
	Close() error
}

// hostUpdate is the host optimizer's chunk update: train/optim's AdamW.
func hostUpdate(h exec.AdamWStep, g, master, m, v []float32, coef float32, clip bool) {
	optim.StepScalars(h).Apply(g, master, m, v, coef, clip)
}

// setupResident binds the step to cfg.Session with the current weights and
// loads the optimizer state (fresh or resumed) into device memory.
func (t *trainer) setupResident() error {
	traceHost(t.cfg.Log, "before binding")
	bound, err := t.cfg.Session.Bind(t.grad, t.weights)
	if err != nil {
		return err
	}
	traceHost(t.cfg.Log, "bound")
	grads := make([]string, len(t.upd.Weights))
	for i, w := range t.upd.Weights {
		grads[i] = autodiff.GradPrefix + w
	}
	spec := exec.OptimizerSpec{Weights: t.upd.Weights, Grads: grads, Micro: t.cfg.Accumulate, MaxNorm: t.cfg.Clip}
	var opt stateOptimizer
	if t.hostState {
		hs := exec.HostOptimizerSpec{OptimizerSpec: spec, Update: hostUpdate}
		if t.gpuUpdate {
			hs.Update, hs.OnDevice = nil, true
		}
		opt, err = bound.NewHostOptimizer(hs)
	} else {
		opt, err = bound.NewOptimizer(spec)
	}
	if err != nil {
		return err
	}
	traceHost(t.cfg.Log, "optimizer allocated")
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
	traceHost(t.cfg.Log, "optimizer loaded")
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
		if err := t.nextBatch(feeds); err != nil {
			return stepStats{}, err
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

// residentRaw is what a checkpoint of a resident run holds after done
// updates, by checkpoint name, in file bytes: the masters and moments copied
// from the device (fp32, little-endian, one slice per trained weight in
// t.upd.Weights order), each trained weight as its master rounded to the
// weight's dtype (as the update function's output is), the step count, and the
// untrained weights and other state as the host holds them. The files are
// those the tensors of a synchronous download would give (checkpoint.Save of
// Optimizer.Save's tensors), without going through float64 tensors. It reads
// t.weights and t.state, which a resident run does not change, so the
// background writer may call it; it quiets signalling NaNs in master, m and v
// in place.
func (t *trainer) residentRaw(master, m, v [][]byte, done int) map[string]safetensors.Raw {
	out := make(map[string]safetensors.Raw, len(t.weights)+len(t.state))
	enc := func(x *tensor.Tensor) safetensors.Raw {
		return safetensors.Raw{DType: x.DType, Shape: x.Shape, Data: x.Encode()}
	}
	out[optimPrefix+optim.StepState] = enc(tensor.Scalar(tensor.F64, float64(done)))
	for i, w := range t.upd.Weights {
		wt := t.grad.Param(w).Value.Type
		for _, st := range []struct {
			prefix string
			raw    []byte
		}{{optim.MasterPrefix, master[i]}, {optim.MomentPrefix, m[i]}, {optim.VariancePrefix, v[i]}} {
			quietNaNs(st.raw)
			out[optimPrefix+st.prefix+w] = safetensors.Raw{DType: tensor.F32, Shape: wt.Shape, Data: st.raw}
		}
		out[w] = safetensors.Raw{DType: wt.DType, Shape: wt.Shape, Data: roundF32(wt.DType, master[i])}
	}
	for k, x := range t.weights {
		if _, ok := out[k]; !ok {
			out[k] = enc(x)
		}
	}
	for k, x := range t.state {
		if _, ok := out[optimPrefix+k]; !ok {
			out[optimPrefix+k] = enc(x)
		}
	}
	return out
}

// quietNaNs sets the quiet bit of every signalling NaN among raw's fp32
// values, as a conversion to float64 and back does (tensors hold float64).
func quietNaNs(raw []byte) {
	for i := 0; i+4 <= len(raw); i += 4 {
		u := binary.LittleEndian.Uint32(raw[i:])
		if u&0x7fc00000 == 0x7f800000 && u&0x003fffff != 0 {
			binary.LittleEndian.PutUint32(raw[i:], u|0x00400000)
		}
	}
}

// roundF32 is fp32 values raw (NaNs quiet) rounded to dt, f32 or bf16, in file
// bytes: raw itself for f32.
func roundF32(dt tensor.DType, raw []byte) []byte {
	switch dt {
	case tensor.F32:
		return raw
	case tensor.BF16:
	default:
		panic(fmt.Sprintf("lcc: BUG: a resident weight of dtype %v", dt))
	}
	out := make([]byte, len(raw)/2)
	for i := range len(raw) / 4 {
		f := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		binary.LittleEndian.PutUint16(out[2*i:], tensor.Float32ToBF16(f))
	}
	return out
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
