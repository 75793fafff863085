package plan

import "github.com/lcc-dev/lcc/tensor"

// The per-GPU memory of a training step on a GPU target is one model, the one the
// executor allocates (docs/design.md §10, "One memory model"):
//
//	peak = arena + optimizer state + fixed costs
//
// where the arena is codegen's layout of the step's buffers (cuda.PlanArena over
// the launch plan: weights' working copy, inputs, activations, gradients and every
// kernel's scratch, in the storage dtype), the optimizer state is what the trainer
// keeps beside the step (OptimizerStateBytes), and the fixed costs are the CUDA
// context, the loaded modules and the cuBLASLt workspace (FixedBytes).

// Fixed per-GPU costs outside the arena. The context and module figures are
// those cuMemGetInfo shows on an H200 with CUDA 13 (lazy module loading): the
// context before the first allocation, and the NVRTC-compiled modules of a
// step's kernels.
const (
	// CUDAContextBytes is the primary context of one device.
	CUDAContextBytes = 512 << 20
	// ModuleBytes is the loaded kernel modules of one step (code, constants,
	// the local memory reserve of the kernels' stacks).
	ModuleBytes = 64 << 20
	// CuBLASLtWorkspaceBytes is the cuBLASLt workspace the executor allocates
	// (runtime/cuda.DefaultWorkspace; a test keeps the two equal).
	CuBLASLtWorkspaceBytes = 32 << 20
)

// FixedBytes is the sum of the fixed per-GPU costs.
const FixedBytes = CUDAContextBytes + ModuleBytes + CuBLASLtWorkspaceBytes

// Optimizer state of AdamW per trainable parameter, beside the step's arena.
const (
	// MomentBytesPerParam is AdamW's two fp32 moments.
	MomentBytesPerParam = 8
	// MasterBytesPerParam is the fp32 master copy kept when the working copy
	// the step reads is narrower (bf16 storage).
	MasterBytesPerParam = 4
)

// OptimizerStateBytes is what the trainer holds per GPU beside the step for n
// trainable parameters stored as storage: two fp32 AdamW moments, and an fp32
// master copy when storage is narrower than fp32. (The bf16 working copy and the
// gradients are the step's own parameters and outputs, in its arena.)
func OptimizerStateBytes(n int64, storage tensor.DType) int64 {
	b := n * MomentBytesPerParam
	if storage != tensor.F32 && storage != tensor.Invalid {
		b += n * MasterBytesPerParam
	}
	return b
}

// StepMemory is the per-GPU memory of one training (or inference) step by its
// components; PeakBytes is their sum.
type StepMemory struct {
	// Model names where ArenaBytes comes from: "arena" (codegen's layout, what
	// the executor allocates) or "simulated" (Simulate's liveness peak, for a
	// target without a GPU program).
	Model          string
	ArenaBytes     int64
	OptimizerBytes int64
	FixedBytes     int64
	PeakBytes      int64
}

// NewStepMemory sums the components (fixed is 0 for a CPU target).
func NewStepMemory(model string, arena, optimizer, fixed int64) StepMemory {
	return StepMemory{Model: model, ArenaBytes: arena, OptimizerBytes: optimizer, FixedBytes: fixed,
		PeakBytes: arena + optimizer + fixed}
}
