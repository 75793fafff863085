package cost

import (
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/tensor"
)

// The per-GPU memory of a training step on a GPU target is one model, the one the
// executor allocates (docs/design.md §10, "One memory model"):
//
//	peak = arena + optimizer state + fixed costs
//
// where the arena is codegen's layout of the step's buffers (cuda.PlanArena over
// the launch plan: weights' working copy, inputs, activations, gradients and every
// kernel's scratch, in the storage dtype), the optimizer state is what the trainer
// keeps beside the step (OptimizerStateBytes), and the fixed costs are the loaded
// modules and the cuBLASLt workspace (FixedBytes). That is what a run allocates,
// the quantity lcc train measures (free memory when its meter starts, after the
// device's context exists, minus the least free memory seen). The CUDA context
// (CUDAContextBytes) is outside the peak: a budget leaves room for it.

// Fixed per-GPU costs outside the arena (estimates for an H200 with CUDA 13 and
// lazy module loading). Measured on the H200 on 2026-12-01 as the measured peak
// minus arena and optimizer state: 35 MiB for llama_mini (39 kernels) and about
// 45 MiB for the flagship at T=4096 and at 1M tokens; that is the 32 MiB cuBLASLt
// workspace plus 3 to 13 MiB of modules. ModuleBytes rounds the larger up.
const (
	// CUDAContextBytes is the primary context of one device: there before a
	// run starts, so not in the planned peak, but left free by budgets.
	CUDAContextBytes = 512 << 20
	// ModuleBytes is the loaded kernel modules of one step (code, constants,
	// the local memory reserve of the kernels' stacks).
	ModuleBytes = 16 << 20
	// CuBLASLtWorkspaceBytes is the cuBLASLt workspace the executor allocates
	// (runtime/cuda.DefaultWorkspace; a test keeps the two equal).
	CuBLASLtWorkspaceBytes = 32 << 20
)

// HostRuntimeBytes is the host memory a GPU run holds besides its model and
// pinned buffers: the CUDA driver and the libraries lcc loads (cuBLASLt, the
// NVRTC-built modules), the compiled program and lcc's own heap. Measured on
// the H200 on 2026-12-01 as the resident set a flagship run kept at its end,
// with no host copy of its weights or optimizer state left: 621.75 MiB,
// rounded up here. Without it the host peak of a 221M-parameter run came out
// 9% under what it measured once loading no longer held garbage (issue #26).
const HostRuntimeBytes = 640 << 20

// FixedBytes is the sum of the fixed per-GPU costs of a run.
const FixedBytes = ModuleBytes + CuBLASLtWorkspaceBytes

// Optimizer state of AdamW per trainable parameter, beside the step's arena, as
// the resident optimizer (runtime/exec) allocates it for every storage dtype.
const (
	// MomentBytesPerParam is AdamW's two fp32 moments.
	MomentBytesPerParam = 8
	// MasterBytesPerParam is the fp32 master copy the update runs on.
	MasterBytesPerParam = 4
)

// OptimizerStateBytes is what the trainer holds per GPU beside the step for n
// trainable parameters: an fp32 master copy and two fp32 AdamW moments. (The
// working copy, bf16 under --precision=bf16, and the gradients are the step's
// own parameters and outputs, in its arena.)
func OptimizerStateBytes(n int64) int64 {
	return n * (MasterBytesPerParam + MomentBytesPerParam)
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
	// HostBytes is the pinned host memory of offloaded activations (ir.IsHost
	// values), beside the device: not in PeakBytes.
	HostBytes int64
	// SnapshotHostBytes is the pinned host buffer checkpoints of a resident
	// step are copied into, and SnapshotStagingBytes the device copy they are
	// staged through (in PeakBytes; 0 when it would not fit): see WithSnapshots.
	SnapshotHostBytes, SnapshotStagingBytes int64
	// HostStateBytes is AdamW's state (fp32 masters and moments) when the
	// trainer keeps it in pinned host memory (OptimizerBytes is then 0), and
	// HostStagingBytes the pinned staging of the gradients going down and the
	// working weights coming back (runtime/exec.HostOptimizer): see WithHostState.
	HostStateBytes, HostStagingBytes int64
	// HostUpdateGPU says that state is updated on the GPU (WithGPUUpdate).
	HostUpdateGPU bool
	// HostModelBytes is what lcc holds of the model on the host while the step
	// is set up (HostModelBytes below), HostKeptBytes what it keeps once a
	// resident run has uploaded it (the untrained weights' host tensors, which
	// checkpoints write from the host): see HostPeakBytes.
	HostModelBytes, HostKeptBytes int64
	// HostResumeBytes is what the host holds while a run that resumes loads
	// its checkpoint, before anything is uploaded: the model's weights, which
	// the checkpoint's are decoded into, and the checkpoint's optimizer state
	// beside them (ResumeStateBytes); 0 for a run that does not resume.
	HostResumeBytes int64
	// HostRuntimeBytes is the host memory of the runtime beside the model
	// (HostRuntimeBytes above for a GPU step, 0 for a CPU one), in every phase.
	HostRuntimeBytes int64
}

// PinnedBytes is the page-locked host memory of the step: the offloaded
// activations' block, the checkpoints' buffer and a host optimizer's state and
// staging.
func (m StepMemory) PinnedBytes() int64 {
	return m.HostBytes + m.SnapshotHostBytes + m.HostStateBytes + m.HostStagingBytes
}

// HostPeakBytes is the planned host peak of a run of the step, the largest of
// its phases: while the step is bound, the model as lcc holds it and the
// offload block (allocated with the arena); for a run that resumes, the same
// with the checkpoint's state still held (HostResumeBytes: the trainer drops
// it only once the state is on the device); once the state is on the device,
// what the host keeps of the model, the offload block and the checkpoints'
// buffer (allocated after the host copies are released). A host optimizer's
// pinned state and staging are in all of them: they are allocated and loaded
// while the model's host copies are still held, and so is the runtime.
func (m StepMemory) HostPeakBytes() int64 {
	opt := m.HostStateBytes + m.HostStagingBytes + m.HostRuntimeBytes
	bound := max(m.HostModelBytes, m.HostResumeBytes)
	return max(bound+m.HostBytes, m.HostKeptBytes+m.HostBytes+m.SnapshotHostBytes) + opt
}

// HostModelBytes is what lcc holds of a model on the host during a run: every
// weight's host tensor (weightElems elements, tensor.HostElemBytes each: a host
// tensor keeps every element in 8 bytes, whatever its dtype). A training step
// adds nothing for its optimizer state: the fp32 master shares its weight's
// storage (train/optim's masterOf: a loaded weight's elements are fp32 values)
// and the AdamW moments of a fresh run have no host tensor (optim.Build leaves
// them unallocated; the optimizer uploads zeros). The load holds each weight
// once: the importer transposes an exporter's folded Linear weights in place
// (frontends/onnx ImportOptions.Consume). Before it did, the 3B Llama's load
// peaked at 45.15 GiB for 23.94 GiB of weights, which the plan did not count
// (measured on the H200 on 2026-12-02 with LCC_TRACE_HOST; now 24.39 GiB). A
// resume holds the checkpoint's masters and moments besides (ResumeStateBytes).
func HostModelBytes(weightElems int64) int64 {
	return weightElems * tensor.HostElemBytes
}

// ResumeStateBytes is what a resume holds on the host beside the model's
// weights while it loads the checkpoint of n trained parameters (train/snapshot's
// Load): the fp32 masters and both AdamW moments as host tensors (3 ×
// tensor.HostElemBytes a parameter: a resumed master is a tensor of its own,
// where a fresh one shares its weight's storage; the file's two agree only
// for an f32 weight), the
// optimizer's step, and the one chunk of the file the reader holds
// (safetensors.ReadChunkBytes). The checkpoint's weights are decoded into the
// model's own, in place, and its other tensors are not held. Before the
// reader streamed, a resume held the whole file's bytes (16 a parameter, in
// a buffer that doubled past 1 GiB) beside a second decoded copy of the
// weights: 5996 MiB measured for a 75M-parameter model whose fresh set-up
// held 603 MiB; streaming, 2342 MiB, what this and the model give.
func ResumeStateBytes(n int64) int64 {
	return 3*n*tensor.HostElemBytes + tensor.HostElemBytes + safetensors.ReadChunkBytes
}

// WithSnapshots adds what writing checkpoints of a step whose optimizer state
// stays on the GPU takes: a pinned host buffer the size of that state (fp32
// masters and moments, OptimizerBytes), and a staging copy of it on the device
// while a checkpoint is copied out, when the peak with it stays within budget
// (≤ 0: no budget). Without the staging copy the next update waits for the copy
// to the host instead, so the plan, not the trainer, decides.
//
// With the state in host memory (WithHostState) a checkpoint is a copy on the
// host: the pinned buffer, no staging.
func (m StepMemory) WithSnapshots(budget int64) StepMemory {
	if m.HostStateBytes > 0 {
		m.SnapshotHostBytes = m.HostStateBytes
		return m
	}
	m.SnapshotHostBytes = m.OptimizerBytes
	if budget <= 0 || m.PeakBytes+m.OptimizerBytes <= budget {
		m.SnapshotStagingBytes = m.OptimizerBytes
		m.PeakBytes += m.OptimizerBytes
	}
	return m
}

// WithHostState moves the optimizer state of n trainable parameters from the
// device to pinned host memory (ZeRO-Offload's split, runtime/exec.HostOptimizer):
// the device peak loses OptimizerBytes, the host gains the same fp32 masters
// and moments (OptimizerStateBytes) and the staging of the gradients and
// working weights, storage bytes each per parameter.
func (m StepMemory) WithHostState(n int64, storage int64) StepMemory {
	m.PeakBytes -= m.OptimizerBytes
	m.OptimizerBytes = 0
	m.HostStateBytes = OptimizerStateBytes(n)
	m.HostStagingBytes = 2 * storage * n
	return m
}

// HostStreamWindow is the most elements of one window of the optimizer update
// on the GPU over a state in host memory (runtime/exec.HostOptimizer with
// OnDevice): 48 MiB of fp32 masters and moments a window.
const HostStreamWindow = 1 << 22

// HostStreamBytes is the device memory that update holds beside the arena,
// its two windows' masters and moments, over n
// trained elements: a window is at most HostStreamWindow of them and at most
// all n (runtime/exec sizes its windows to the longest it cuts).
func HostStreamBytes(n int64) int64 { return 2 * 3 * 4 * min(n, HostStreamWindow) }

// WithGPUUpdate is WithHostState's state updated on the GPU instead of the CPU
// (runtime/exec.HostOptimizer with OnDevice): the state streams through two
// device windows (HostStreamBytes, a fixed cost of the device), and the host
// keeps no staging of gradients or weights.
func (m StepMemory) WithGPUUpdate() StepMemory {
	if m.HostStateBytes == 0 {
		return m
	}
	win := HostStreamBytes(m.HostStateBytes / OptimizerStateBytes(1))
	m.HostStagingBytes = 0
	m.HostUpdateGPU = true
	m.FixedBytes += win
	m.PeakBytes += win
	return m
}

// NewStepMemory sums the components (fixed is 0 for a CPU target); host is
// the pinned host memory beside them.
func NewStepMemory(model string, arena, optimizer, fixed, host int64) StepMemory {
	return StepMemory{Model: model, ArenaBytes: arena, OptimizerBytes: optimizer, FixedBytes: fixed,
		PeakBytes: arena + optimizer + fixed, HostBytes: host}
}
