package driver

import (
	"strings"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/cost"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
)

// memoryModel is the per-GPU memory of a step for one target and storage dtype:
// the one model that the report prints, that checkpointing's budget is checked
// against, and that the executor allocates (see cost.StepMemory).
type memoryModel struct {
	target  targets.Target
	storage tensor.DType
	rank    int
	// trained: the step is a training step whose optimizer state the trainer
	// keeps beside it.
	trained bool
	// snapshots: the trainer checkpoints it with its state on the GPU, into a
	// pinned host buffer (cost.StepMemory.WithSnapshots).
	snapshots bool
	// resume: the trainer resumes it from a checkpoint, whose optimizer state
	// it holds on the host beside the model while it loads (hostResume).
	resume bool
	// hostState: the trainer keeps the optimizer state in pinned host memory
	// (cost.StepMemory.WithHostState); gpuUpdate: updated on the GPU
	// (cost.StepMemory.WithGPUUpdate).
	hostState, gpuUpdate bool
}

// placeState moves a trained step's optimizer state to the host when the
// model says so.
func (m memoryModel) placeState(f *ir.Func, sm cost.StepMemory) cost.StepMemory {
	if !m.trained || !m.hostState {
		return sm
	}
	sm = sm.WithHostState(trainable(f), int64(m.storage.Size()))
	if m.gpuUpdate {
		sm = sm.WithGPUUpdate()
	}
	return sm
}

// gpu says whether the target runs the step on GPUs (an arena and fixed costs).
func (m memoryModel) gpu() bool { return m.target.Arch != "" && m.target.Arch != targets.ArchCPU }

// of returns the memory of f: for a GPU target, codegen's arena layout of f's
// program (prog, or a build of f when prog is nil), the optimizer state and the
// fixed costs; for a CPU target, or when f has an op without a GPU lowering, the
// simulated liveness peak of f in its own dtypes and the optimizer state. The
// pinned host memory of offloaded activations is beside either (HostBytes).
func (m memoryModel) of(f *ir.Func, prog *cudagen.Program) cost.StepMemory {
	var opt int64
	if m.trained {
		opt = cost.OptimizerStateBytes(trainable(f))
	}
	if m.gpu() {
		if prog == nil {
			prog, _ = cudagen.Build(f, cudagen.Options{Arch: m.target.Arch, Storage: m.storage, Rank: m.rank})
		}
		if prog != nil {
			_, arena := cudagen.PlanArena(prog.Plan)
			sm := cost.NewStepMemory("arena", arena, opt, cost.FixedBytes, cudagen.HostBytes(prog.Plan))
			sm.HostModelBytes, sm.HostKeptBytes = m.hostModel(f)
			sm.HostResumeBytes, sm.HostRuntimeBytes = m.hostResume(f), m.hostRuntime()
			return m.placeState(f, sm)
		}
	}
	sim := cost.Simulate(f)
	sm := cost.NewStepMemory("simulated", sim.PeakBytes, opt, 0, sim.HostBytes)
	sm.HostModelBytes, sm.HostKeptBytes = m.hostModel(f)
	sm.HostResumeBytes = m.hostResume(f)
	return m.placeState(f, sm)
}

// measure is of's per-GPU peak and pinned offload bytes, checkpointing's
// memory model (one build of the program gives both).
func (m memoryModel) measure(f *ir.Func) (peak, host int64) {
	sm := m.of(f, nil)
	return sm.PeakBytes, sm.HostBytes
}

// peak is of's total, the function checkpointing minimises.
func (m memoryModel) peak(f *ir.Func) int64 { return m.of(f, nil).PeakBytes }

// arenaParts splits an arena program's buffers into the weights' working copy
// and the gradient outputs, in their storage dtype (for the report's breakdown).
func arenaParts(prog *cudagen.Program) (weights, grads int64) {
	pl := prog.Plan
	for _, b := range pl.Buffers {
		if b.Kind == "param" && b.Role == ir.RoleWeight.String() {
			weights += b.Bytes
		}
	}
	for _, o := range pl.Outputs {
		if strings.HasPrefix(o.Name, cost.GradPrefix) {
			id := o.ID
			for pl.Buffers[id].Kind == "alias" {
				id = pl.Buffers[id].AliasOf
			}
			grads += pl.Buffers[id].Bytes
		}
	}
	return weights, grads
}
