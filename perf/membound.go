package perf

import (
	"math/rand/v2"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/tensor"
)

// Program is the measurement of one function run by exec on the GPU.
type Program struct {
	Timing
	// IOBytes is what the inputs and outputs take on the device, in their storage
	// dtypes: the memory the workload owns whatever computes it.
	IOBytes int64
	// PlanExtra is the arena the plan lays out beyond IOBytes: the program's
	// scratch, from the arena plan (exec.PlanArena).
	PlanExtra int64
	// MeasuredExtra is the device memory the program took, measured with
	// cuMemGetInfo before the session was created and after its first run
	// (arena, kernel modules, the cuBLASLt workspace), minus IOBytes.
	MeasuredExtra int64
	// Outputs are the first run's outputs (for a sanity figure such as the loss).
	Outputs map[string]*tensor.Tensor
}

// MeasureProgram runs f once in a new session (compiling, uploading and checking
// that it runs), then times warm + iters launches of its steps with events.
func MeasureProgram(dev *cuda.Device, f *ir.Func, in map[string]*tensor.Tensor, storage tensor.DType,
	warm, iters int) (*Program, error) {
	free0, err := dev.FreeMem()
	if err != nil {
		return nil, err
	}
	s := exec.NewSession(dev, exec.Options{Storage: storage})
	defer s.Close()
	out, err := s.Run(f, in)
	if err != nil {
		return nil, err
	}
	free1, err := dev.FreeMem()
	if err != nil {
		return nil, err
	}
	p := &Program{Outputs: out}
	size := func(t ir.Type) int64 {
		if t.DType == tensor.F32 {
			return t.Numel() * int64(storage.Size())
		}
		return t.Numel() * int64(t.DType.Size())
	}
	for _, q := range f.Params {
		p.IOBytes += size(q.Value.Type)
	}
	for _, o := range f.Outputs {
		p.IOBytes += size(o.Value.Type)
	}
	p.PlanExtra = s.ArenaBytes(f) - p.IOBytes
	p.MeasuredExtra = int64(free0) - int64(free1) - p.IOBytes
	p.Timing, err = Time(dev, s.Stream(), warm, iters, func() error { return s.Launch(f) })
	if err != nil {
		return nil, err
	}
	return p, nil
}

// fill is a tensor of the given shape with uniform values of standard deviation
// scale (the timing does not depend on the distribution; normals cost more to
// draw at a billion elements).
func fill(rng *rand.Rand, scale float64, shape ...int64) *tensor.Tensor {
	t := tensor.New(tensor.F32, shape...)
	for i := range t.F {
		t.F[i] = (rng.Float64()*2 - 1) * 1.7320508 * scale
	}
	return t
}

// ids is an i64 tensor [n] of uniform ids in [0, v).
func ids(rng *rand.Rand, n, v int64) *tensor.Tensor {
	t := tensor.New(tensor.I64, n)
	for i := range t.I {
		t.I[i] = rng.Int64N(v)
	}
	return t
}

// CEFunc is the cross-entropy workload of the `ce` anchor: the loss of
// h [t, d] · Wᵀ (W [v, d]) against labels [t], mean over rows, as one
// fused_linear_cross_entropy, and its gradients dh and dW at dloss = 1.
func CEFunc(t, d, v int64) (*ir.Func, error) {
	b := ir.NewBuilder("ce")
	h := b.Input("h", ir.T(tensor.F32, t, d))
	w := b.Input("w", ir.T(tensor.F32, v, d))
	y := b.Input("labels", ir.T(tensor.I64, t))
	at := ir.A("transpose_w", true, "ignore_index", -100, "reduction", "mean")
	loss := b.Apply1(ir.OpFusedLinearCrossEntropy, at, h, w, y)
	g := b.Apply(ir.OpFusedLinearCrossEntropyGrad, at, h, w, y, b.Full(loss.Type, 1))
	b.Output("loss", loss)
	b.Output("dh", g[0])
	b.Output("dw", g[1])
	return b.Build()
}

// CEInputs are the anchor's: h of unit scale, W of scale 0.02, uniform labels.
func CEInputs(t, d, v int64, seed uint64) map[string]*tensor.Tensor {
	rng := rand.New(rand.NewPCG(seed, 1))
	return map[string]*tensor.Tensor{"h": fill(rng, 1, t, d), "w": fill(rng, 0.02, v, d), "labels": ids(rng, t, v)}
}

// EmbedFuncs are the embedding workload of the `embed` anchor: the lookup
// y = W[ids] (W [v, d], ids [t]) and its gradient dW = scatter_add(dy, ids).
func EmbedFuncs(t, d, v int64) (fwd, bwd *ir.Func, err error) {
	b := ir.NewBuilder("embed")
	w := b.Input("w", ir.T(tensor.F32, v, d))
	id := b.Input("ids", ir.T(tensor.I64, t))
	b.Output("y", b.Apply1(ir.OpGather, ir.A("axis", 0), w, id))
	if fwd, err = b.Build(); err != nil {
		return nil, nil, err
	}
	b = ir.NewBuilder("embed_grad")
	dy := b.Input("dy", ir.T(tensor.F32, t, d))
	id = b.Input("ids", ir.T(tensor.I64, t))
	b.Output("dw", b.Apply1(ir.OpScatterAdd, ir.A("axis", 0, "size", v), dy, id))
	if bwd, err = b.Build(); err != nil {
		return nil, nil, err
	}
	return fwd, bwd, nil
}

// EmbedInputs are the anchor's: W of scale 0.02, uniform ids, dy of unit scale.
func EmbedInputs(t, d, v int64, seed uint64) (fwd, bwd map[string]*tensor.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 2))
	id := ids(rng, t, v)
	return map[string]*tensor.Tensor{"w": fill(rng, 0.02, v, d), "ids": id},
		map[string]*tensor.Tensor{"dy": fill(rng, 1, t, d), "ids": id}
}

// GiB is bytes in GiB.
func GiB(b int64) float64 { return float64(b) / (1 << 30) }
