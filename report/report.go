// Package report builds the compile report: what lcc found in a model, what it
// did, and what one training or inference step will cost on the target, before
// any GPU is touched. The same numbers come out as JSON (for tools) and as text
// (for people); both are deterministic for a given model and flags.
package report

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/lcc-dev/lcc/cost"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/targets"
)

// Input is what the report is built from besides the function.
type Input struct {
	Model  string
	Target targets.Target
	Passes []passes.Stat
	// Training describes the training step, when one was planned.
	Training Training
	// Attention is what attention matching found; nil counts attention ops.
	Attention *Attention
	// Memory is the step's per-GPU memory by the one memory model (the driver's:
	// codegen's arena, optimizer state and fixed costs); nil simulates f alone.
	Memory *cost.StepMemory
	// ArenaWeightsBytes and ArenaGradientsBytes are the weights' working copy
	// and the gradients in the arena, in their storage dtype (Memory.Model
	// "arena").
	ArenaWeightsBytes, ArenaGradientsBytes int64
}

// Training says what the compile planned for a training step.
type Training struct {
	Enabled bool
	// Loss is the output differentiated.
	Loss string
	// ForwardFLOPs counts the forward graph alone (before autodiff).
	ForwardFLOPs int64
	// FusedCrossEntropy counts fused linear cross-entropy rewrites.
	FusedCrossEntropy int
	// Checkpoints is what checkpoint insertion did (nil when it did not run).
	Checkpoints *passes.RecomputeStats
}

// AdamWBytesPerParam is the optimizer state per trainable parameter: fp32 first
// and second moments (PyTorch's AdamW keeps the same).
const AdamWBytesPerParam = 8

// Report is the compile report. Field names are the JSON schema.
type Report struct {
	Model string `json:"model"`
	// Warnings are things that look wrong in the model without being errors.
	Warnings []string `json:"warnings,omitempty"`
	// Notes say what the importer changed to keep the model the framework's (for
	// example parameters the exporter merged, trained separately again).
	Notes     []string       `json:"notes,omitempty"`
	Mode      string         `json:"mode"`
	Target    Target         `json:"target"`
	Shapes    Shapes         `json:"shapes"`
	Ops       map[string]int `json:"ops"`
	Params    Params         `json:"parameters"`
	Attention Attention      `json:"attention"`
	// RoPE is what --rope-theta and --rope-scaling rewrote (nil without them).
	RoPE    *passes.RoPEResult `json:"rope,omitempty"`
	FusedCE int                `json:"fused_cross_entropy"`
	// Fusion is what --fuse=on fused: each fused_elementwise group (nil: fuse
	// did not run).
	Fusion      *passes.FuseResult    `json:"fusion,omitempty"`
	Checkpoints passes.RecomputeStats `json:"checkpoints"`
	Memory      Memory                `json:"memory"`
	FLOPs       FLOPs                 `json:"flops"`
	Kernels     []Kernel              `json:"kernels"`
	// AttentionKernels says, for every attention node of the GPU step in body
	// order, which kernels it runs on (empty when no CUDA code was generated).
	AttentionKernels []AttentionKernel `json:"attention_kernels,omitempty"`
	// KernelError says why CUDA code could not be generated ("" when it was).
	KernelError string `json:"kernel_error,omitempty"`
	// CUDAGraph says whether lcc train captures the step as a CUDA graph
	// ("captured N launches") or why not; "" without CUDA code.
	CUDAGraph string        `json:"cuda_graph,omitempty"`
	Passes    []passes.Stat `json:"passes"`
	// Pipeline lists the passes with their configuration, as `lcc passes
	// --pipeline` prints them. Passes and Pipeline are those that made the
	// step of graph.lcc, the one-GPU step of a sharded plan (whose rank's
	// passes Sharding.Pipeline lists): lcc train DIR/graph.lcc checks them.
	Pipeline []string `json:"pipeline,omitempty"`
	// ProgramHash identifies the program (driver.ProgramHash): lcc train prints
	// the same hash when it runs this program (for a sharded plan, rank
	// Sharding.Rank's program, which lcc train --ranks runs on that rank).
	ProgramHash string `json:"program_hash,omitempty"`
	// Sharding and Communication describe a sequence-parallel plan (nil when the
	// step runs on one GPU).
	Sharding *Sharding `json:"sharding,omitempty"`
	// DataParallel is set on a multi-GPU target when the step is not sharded: it
	// is replicated, one whole copy per GPU.
	DataParallel  *DataParallel    `json:"data_parallel,omitempty"`
	Communication *Communication   `json:"communication,omitempty"`
	Outputs       map[string]Value `json:"outputs"`
}

// Target describes the target the plan was made for.
type Target struct {
	Name        string `json:"name"`
	GPUs        int    `json:"gpus"`
	Arch        string `json:"arch"`
	MemoryBytes int64  `json:"memory_bytes"`
}

// Shapes gives the bound symbolic dims and every input's shape.
type Shapes struct {
	Dims   map[string]int64 `json:"dims"`
	Inputs map[string]Value `json:"inputs"`
}

// Value is a type in the report.
type Value struct {
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
}

// Params counts the model's parameters.
type Params struct {
	Count     int64 `json:"count"`
	Tensors   int   `json:"tensors"`
	Trainable int64 `json:"trainable"`
}

// Attention says which attention layers were found and how they were rewritten.
type Attention struct {
	Found     int            `json:"found"`
	Rewritten map[string]int `json:"rewritten"`
	Unmatched []string       `json:"unmatched"`
	// Dilated is the configuration of dilated attention (nil when not used).
	Dilated *Dilated `json:"dilated,omitempty"`
	// Windows counts the sliding-window layers by their window (ir/window.go):
	// {"4096": 16} for 16 layers that each see the last 4096 keys.
	Windows map[string]int `json:"windows,omitempty"`
}

// Dilated is the LongNet configuration the dilated layers use: branch i has
// segment length Segments[i] and dilation Dilations[i] (a segment longer than the
// sequence is one segment).
type Dilated struct {
	Segments  []int64 `json:"segments"`
	Dilations []int64 `json:"dilations"`
	Offsets   string  `json:"offsets"`
	// Defaulted is true when --segments and --dilations were not given and
	// LongNet's million-token configuration was used.
	Defaulted bool `json:"defaulted"`
	// Skipped names each layer dilate-attention left dense, and why (a
	// sliding window: already local).
	Skipped []string `json:"skipped,omitempty"`
}

// Memory is the per-GPU memory of one step. For a GPU target (Model "arena")
// PerGPUPeakBytes = ArenaBytes + OptimizerBytes + FixedBytes: the arena the
// executor allocates (codegen's layout of weights' working copy, inputs,
// activations, gradients and kernel scratch in the storage dtype), the optimizer
// state the trainer keeps beside it (fp32 masters and AdamW moments) and the
// fixed costs (cost.ModuleBytes, cost.CuBLASLtWorkspaceBytes): what a run
// allocates, as lcc train measures it. ContextBytes (cost.CUDAContextBytes) is
// the device context beside it; FitsTarget counts both. WeightsBytes, GradientsBytes and
// ActivationsBytes split the arena (activations: the rest of it, scratch
// included).
type Memory struct {
	PerGPUPeakBytes int64 `json:"per_gpu_peak_bytes"`
	// Model is "arena" or "simulated" (a CPU target, or a step with an op that
	// has no GPU lowering: cost.Simulate's liveness peak in the IR's dtypes).
	Model            string `json:"model,omitempty"`
	ArenaBytes       int64  `json:"arena_bytes"`
	FixedBytes       int64  `json:"fixed_bytes"`
	ContextBytes     int64  `json:"context_bytes"`
	WeightsBytes     int64  `json:"weights_bytes"`
	GradientsBytes   int64  `json:"gradients_bytes"`
	OptimizerBytes   int64  `json:"optimizer_bytes"`
	ActivationsBytes int64  `json:"activations_bytes"`
	FitsTarget       bool   `json:"fits_target"`
	// SimulatedPeakBytes is cost.Simulate's peak of the step graph alone, in the
	// IR's dtypes (a cross-check of the arena; not the planned peak).
	SimulatedPeakBytes int64 `json:"simulated_peak_bytes"`
	// HostBytes is the pinned host memory the offloaded activations take beside
	// the device (a "+offload" checkpoint policy); not in PerGPUPeakBytes.
	HostBytes int64 `json:"host_bytes"`
	// SnapshotHostBytes is the pinned host buffer lcc train copies its
	// checkpoints into, and SnapshotStagingBytes the device copy they are staged
	// through, in PerGPUPeakBytes (0: the update waits for the copy instead).
	// Both are 0 for a compile without checkpoints (cost.StepMemory.WithSnapshots).
	SnapshotHostBytes    int64 `json:"snapshot_host_bytes,omitempty"`
	SnapshotStagingBytes int64 `json:"snapshot_staging_bytes,omitempty"`
	// HostPeakBytes is the planned host peak of a run (cost.StepMemory's
	// HostPeakBytes): HostModelBytes, the model as lcc holds it on the host,
	// plus PinnedBytes, every pinned buffer (HostBytes and SnapshotHostBytes).
	// HostKeptBytes is what the host keeps of the model once a resident run
	// has it on the GPU.
	HostPeakBytes  int64 `json:"host_peak_bytes,omitempty"`
	HostModelBytes int64 `json:"host_model_bytes,omitempty"`
	HostKeptBytes  int64 `json:"host_kept_bytes,omitempty"`
	PinnedBytes    int64 `json:"pinned_bytes,omitempty"`
	// HostResumeBytes is what the host holds while lcc train --resume loads
	// its checkpoint (the model and the checkpoint's optimizer state, in
	// HostPeakBytes); 0 for a compile of a run that does not resume.
	HostResumeBytes int64 `json:"host_resume_bytes,omitempty"`
	// HostRuntimeBytes is the CUDA runtime's host memory beside the model, in
	// HostPeakBytes (cost.HostRuntimeBytes).
	HostRuntimeBytes int64 `json:"host_runtime_bytes,omitempty"`
	// OptimizerState is "host" when the trainer keeps AdamW's fp32 masters and
	// moments in pinned host memory (HostStateBytes, with HostStagingBytes of
	// pinned gradient and weight staging; OptimizerBytes is then 0), "" when
	// they stay on the GPU (cost.StepMemory.WithHostState).
	OptimizerState string `json:"optimizer_state,omitempty"`
	// OptimizerUpdate is "gpu" when that host state is updated on the GPU,
	// streamed through device windows ("" with the CPU's update).
	OptimizerUpdate  string `json:"optimizer_update,omitempty"`
	HostStateBytes   int64  `json:"host_state_bytes,omitempty"`
	HostStagingBytes int64  `json:"host_staging_bytes,omitempty"`
}

// FLOPs counts floating-point operations of one step on one GPU: the whole step
// when it runs on one GPU or is replicated, one rank's share when the sequence is
// sharded.
type FLOPs struct {
	// Scope is always "per_gpu", so that a reader of the JSON need not guess.
	Scope    string `json:"scope"`
	Forward  int64  `json:"forward"`
	Backward int64  `json:"backward"`
	PerStep  int64  `json:"per_step"`
}

// FLOPsScope is FLOPs.Scope.
const FLOPsScope = "per_gpu"

// Sharding says how the sequence is split across GPUs.
type Sharding struct {
	Ranks       int    `json:"ranks"`
	Mode        string `json:"mode"`
	Layout      string `json:"layout"`
	SeqLen      int64  `json:"seq_len"`
	LocalSeqLen int64  `json:"local_seq_len"`
	// Program names the file (in -o DIR) holding one rank's program.
	Program string `json:"program,omitempty"`
	// Rank is that rank: the report's ops, kernels, attention kernels and
	// program hash, and DIR/kernels and DIR/launch_plan.json, are its program's
	// (the one lcc train --ranks builds on this rank; other ranks' kernels differ
	// in the sequence positions they bake in).
	Rank int `json:"rank"`
	// Pipeline lists the passes that made the rank's program (the report's
	// Pipeline is graph.lcc's: the one-GPU step).
	Pipeline []string `json:"pipeline,omitempty"`
}

// DataParallel says that each of GPUs GPUs runs the whole step on its own
// sequences (gradients are all-reduced in training), and why the sequence is
// not split instead.
type DataParallel struct {
	GPUs   int    `json:"gpus"`
	Reason string `json:"reason"`
}

// Communication is the traffic of one step per GPU.
type Communication struct {
	BytesPerStepPerGPU int64            `json:"bytes_per_step_per_gpu"`
	ByOp               map[string]int64 `json:"by_op"`
}

// Kernel is one kernel (or kernel group) the plan needs.
type Kernel struct {
	Name string `json:"name"`
	Op   string `json:"op"`
}

// AttentionKernel is the kernel family one attention node runs on: "flash" (tier
// 1, FlashAttention-2 on tensor cores) or "scalar" (CUDA cores), with the reason
// the tensor-core tier did not take it.
type AttentionKernel struct {
	Node   int    `json:"node"` // index in the step's body
	Op     string `json:"op"`
	Name   string `json:"name,omitempty"`
	Kernel string `json:"kernel"`
	Tier   int    `json:"tier,omitempty"`
	Why    string `json:"why,omitempty"`
	// Note says what the tensor-core kernels do differently (a padded head
	// dim, a sliding window, tier 1 on a tier-2 target).
	Note string `json:"note,omitempty"`
}

// attentionKernelLines groups ks by op, kernel and reason, in order of first
// appearance: "attention ×2: flash tier 1 (tensor cores, mma.sync)".
func attentionKernelLines(ks []AttentionKernel) []string {
	var order []string
	count := map[string]int{}
	for _, k := range ks {
		how := fmt.Sprintf("%s tier %d (tensor cores, %s)", k.Kernel, k.Tier, map[int]string{1: "mma.sync", 2: "wgmma"}[k.Tier])
		if k.Note != "" {
			how = fmt.Sprintf("%s tier %d (tensor cores, %s; %s)", k.Kernel, k.Tier,
				map[int]string{1: "mma.sync", 2: "wgmma"}[k.Tier], k.Note)
		}
		if k.Why != "" {
			how = fmt.Sprintf("%s (CUDA cores): %s", k.Kernel, k.Why)
		}
		key := k.Op + "\x00" + how
		if count[key] == 0 {
			order = append(order, key)
		}
		count[key]++
	}
	out := make([]string, len(order))
	for i, key := range order {
		op, how, _ := strings.Cut(key, "\x00")
		out[i] = fmt.Sprintf("%s ×%d: %s", op, count[key], how)
	}
	return out
}

func valueOf(t ir.Type) Value {
	return Value{DType: t.DType.String(), Shape: append([]int64{}, t.Shape...)}
}

// Build computes the report for f.
func Build(f *ir.Func, in Input) *Report {
	r := &Report{
		Model: in.Model,
		Mode:  "inference",
		Target: Target{Name: in.Target.Name, GPUs: in.Target.GPUs, Arch: in.Target.Arch,
			MemoryBytes: in.Target.MemoryBytes},
		Shapes:    Shapes{Dims: map[string]int64{}, Inputs: map[string]Value{}},
		Ops:       map[string]int{},
		Attention: Attention{Rewritten: map[string]int{}, Unmatched: []string{}},
		Kernels:   []Kernel{},
		Passes:    in.Passes,
		Outputs:   map[string]Value{},
	}
	if r.Passes == nil {
		r.Passes = []passes.Stat{}
	}
	for _, p := range f.Params {
		t := p.Value.Type
		switch p.Role {
		case ir.RoleInput, ir.RoleLabel:
			r.Shapes.Inputs[p.Name] = valueOf(t)
			for i, l := range t.Labels {
				if l != "" {
					r.Shapes.Dims[l] = t.Shape[i]
				}
			}
		case ir.RoleWeight:
			r.Params.Count += t.Numel()
			r.Params.Tensors++
			if !p.Frozen && t.DType.IsFloat() {
				r.Params.Trainable += t.Numel()
			}
		}
	}
	for _, o := range f.Outputs {
		r.Outputs[o.Name] = valueOf(o.Value.Type)
	}
	var fwd int64
	for _, n := range f.Body {
		r.Ops[n.Op.String()]++
		fwd += cost.NodeFLOPs(n)
		switch n.Op {
		case ir.OpAttention:
			r.Attention.Found++
			r.Attention.Rewritten["dense"]++
		case ir.OpDilatedAttention:
			r.Attention.Found++
			r.Attention.Rewritten["dilated"]++
		}
	}
	if in.Attention != nil {
		r.Attention = *in.Attention
	}
	r.FusedCE = in.Training.FusedCrossEntropy
	r.Checkpoints = passes.RecomputeStats{Policy: "none"}
	if in.Training.Checkpoints != nil {
		r.Checkpoints = *in.Training.Checkpoints
	}
	r.FLOPs = FLOPs{Scope: FLOPsScope, Forward: fwd, PerStep: fwd}
	if in.Training.Enabled {
		r.Mode = "training"
		r.FLOPs = FLOPs{Scope: FLOPsScope, Forward: in.Training.ForwardFLOPs,
			Backward: fwd - in.Training.ForwardFLOPs, PerStep: fwd}
	}
	var grads, optimizer int64
	for _, o := range f.Outputs {
		if strings.HasPrefix(o.Name, "grad.") {
			grads += o.Value.Type.Bytes()
		}
	}
	if in.Training.Enabled {
		optimizer = r.Params.Trainable * AdamWBytesPerParam
	} else {
		grads = 0
	}
	// One simulation of the whole step: weights, inputs, activations and
	// gradients over the schedule, plus the optimizer state that lives throughout.
	mem := cost.SimulateStep(f, optimizer)
	r.Memory = Memory{
		PerGPUPeakBytes:    mem.PeakBytes,
		SimulatedPeakBytes: mem.PeakBytes - optimizer,
		WeightsBytes:       mem.WeightsBytes,
		GradientsBytes:     grads,
		OptimizerBytes:     mem.StateBytes,
		ActivationsBytes:   mem.PeakBytes - mem.WeightsBytes - mem.StateBytes,
		Model:              "simulated",
		ArenaBytes:         mem.PeakBytes - optimizer,
	}
	if m := in.Memory; m != nil {
		r.Memory.Model = m.Model
		r.Memory.PerGPUPeakBytes = m.PeakBytes
		r.Memory.ArenaBytes = m.ArenaBytes
		r.Memory.OptimizerBytes = m.OptimizerBytes
		r.Memory.FixedBytes = m.FixedBytes
		r.Memory.HostBytes = m.HostBytes
		r.Memory.SnapshotHostBytes, r.Memory.SnapshotStagingBytes = m.SnapshotHostBytes, m.SnapshotStagingBytes
		r.Memory.HostPeakBytes, r.Memory.HostModelBytes = m.HostPeakBytes(), m.HostModelBytes
		r.Memory.HostKeptBytes, r.Memory.HostRuntimeBytes = m.HostKeptBytes, m.HostRuntimeBytes
		r.Memory.HostResumeBytes = m.HostResumeBytes
		if m.HostStateBytes > 0 {
			r.Memory.OptimizerState = "host"
			r.Memory.HostStateBytes, r.Memory.HostStagingBytes = m.HostStateBytes, m.HostStagingBytes
			if m.HostUpdateGPU {
				r.Memory.OptimizerUpdate = "gpu"
			}
		}
		r.Memory.PinnedBytes = m.PinnedBytes()
		if m.Model == "arena" {
			r.Memory.ContextBytes = cost.CUDAContextBytes
		}
		r.Memory.ActivationsBytes = m.ArenaBytes - mem.WeightsBytes
		if m.Model == "arena" {
			r.Memory.WeightsBytes, r.Memory.GradientsBytes = in.ArenaWeightsBytes, in.ArenaGradientsBytes
			r.Memory.ActivationsBytes = m.ArenaBytes - in.ArenaWeightsBytes - in.ArenaGradientsBytes
		}
	}
	r.Memory.FitsTarget = in.Target.MemoryBytes == 0 ||
		r.Memory.PerGPUPeakBytes+r.Memory.ContextBytes <= in.Target.MemoryBytes
	r.Kernels = kernels(f)
	return r
}

// kernels lists the kernel groups the plan needs: one per distinct op and
// shape class, named as the CUDA backend names them.
func kernels(f *ir.Func) []Kernel {
	seen := map[string]bool{}
	out := []Kernel{}
	for _, n := range f.Body {
		switch n.Op {
		case ir.OpConstant, ir.OpReshape:
			continue // constants are uploaded; reshapes are views
		}
		name := n.Op.String()
		if n.Op == ir.OpMatMul {
			name = "gemm_cublaslt"
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, Kernel{Name: name, Op: n.Op.String()})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// WriteText writes the report for people.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "model      %s (%s)\n", r.Model, r.Mode)
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "warning    %s\n", warn)
	}
	for _, note := range r.Notes {
		fmt.Fprintf(w, "note       %s\n", note)
	}
	fmt.Fprintf(w, "target     %s: %d× GPU %s, %s each\n", r.Target.Name, r.Target.GPUs, r.Target.Arch,
		Bytes(r.Target.MemoryBytes))
	fmt.Fprintf(w, "dims       %s\n", sortedKV(r.Shapes.Dims))
	for _, name := range sortedKeys(r.Shapes.Inputs) {
		v := r.Shapes.Inputs[name]
		fmt.Fprintf(w, "input      %s %s%v\n", name, v.DType, v.Shape)
	}
	grads := 0
	for _, name := range sortedKeys(r.Outputs) {
		if strings.HasPrefix(name, "grad.") {
			grads++
			continue
		}
		v := r.Outputs[name]
		fmt.Fprintf(w, "output     %s %s%v\n", name, v.DType, v.Shape)
	}
	if grads > 0 {
		fmt.Fprintf(w, "output     grad.* for %d parameters\n", grads)
	}
	fmt.Fprintf(w, "params     %d in %d tensors (%d trainable)\n", r.Params.Count, r.Params.Tensors, r.Params.Trainable)
	fmt.Fprintf(w, "attention  %d found, rewritten %s, unmatched %d\n", r.Attention.Found,
		sortedKV(r.Attention.Rewritten), len(r.Attention.Unmatched))
	for _, u := range r.Attention.Unmatched {
		fmt.Fprintf(w, "           unmatched: %s\n", u)
	}
	if len(r.Attention.Windows) > 0 {
		fmt.Fprintf(w, "           sliding windows (keys=layers): %s\n", sortedKV(r.Attention.Windows))
	}
	if d := r.Attention.Dilated; d != nil {
		how := "from --segments and --dilations"
		if d.Defaulted {
			how = "LongNet's defaults: --segments and --dilations not given"
		}
		fmt.Fprintf(w, "dilated    segments %s, dilations %s, %s offsets (%s)\n", joinInts(d.Segments),
			joinInts(d.Dilations), d.Offsets, how)
		for _, s := range d.Skipped {
			fmt.Fprintf(w, "           kept dense: %s\n", s)
		}
	}
	if r.RoPE != nil {
		for i, l := range RoPELines(*r.RoPE) {
			fmt.Fprintf(w, "%-10s %s\n", map[bool]string{true: "rope", false: ""}[i == 0], l)
		}
	}
	fmt.Fprintf(w, "fused CE   %d\n", r.FusedCE)
	if fu := r.Fusion; fu != nil {
		for i, l := range FusionLines(*fu) {
			fmt.Fprintf(w, "%-10s %s\n", map[bool]string{true: "fused", false: ""}[i == 0], l)
		}
	}
	off := ""
	if c := r.Checkpoints; c.Offloaded > 0 {
		off = fmt.Sprintf(", %d values offloaded to host memory", c.Offloaded)
		if c.Offloadable > 0 {
			off = fmt.Sprintf(", %d of %d kept values offloaded to host memory (%s pinned)",
				c.Offloaded, c.Offloadable, Bytes(c.OffloadedBytes))
			if c.Offloaded < c.Offloadable {
				off += ", the rest on the GPU"
			}
		}
		if cp := c.Copies; cp != nil {
			off += fmt.Sprintf("; copies %.3f s on the host link, %.3f s of compute stalled (of %.3f s)",
				cp.CopySeconds, cp.StallSeconds, cp.ComputeSeconds)
		}
	}
	fmt.Fprintf(w, "checkpoint %s: %d ops recomputed, %s saved%s\n", r.Checkpoints.Policy,
		r.Checkpoints.RecomputedOps, Bytes(r.Checkpoints.SavedBytes), off)
	if sh := r.Sharding; sh != nil {
		fmt.Fprintf(w, "sharding   %d ranks, %s (%s layout), %d of %d tokens per GPU\n", sh.Ranks, sh.Mode,
			sh.Layout, sh.LocalSeqLen, sh.SeqLen)
		fmt.Fprintf(w, "rank       %d of %d: ops, kernels and program below are this rank's (lcc train "+
			"--ranks=%d runs it there; other ranks' kernels differ in their positions)\n", sh.Rank, sh.Ranks,
			sh.Ranks)
	}
	if dp := r.DataParallel; dp != nil {
		fmt.Fprintf(w, "parallel   data-parallel: the step is replicated on each of %d GPUs (%s)\n",
			dp.GPUs, dp.Reason)
	}
	if c := r.Communication; c != nil {
		var ops []string
		for _, k := range sortedKeys(c.ByOp) {
			ops = append(ops, fmt.Sprintf("%s %s", k, Bytes(c.ByOp[k])))
		}
		fmt.Fprintf(w, "comm       %s per step per GPU (%s)\n", Bytes(c.BytesPerStepPerGPU), strings.Join(ops, ", "))
	}
	fmt.Fprintf(w, "memory     peak %s per GPU (weights %s, gradients %s, optimizer %s, activations %s)%s\n",
		Bytes(r.Memory.PerGPUPeakBytes), Bytes(r.Memory.WeightsBytes), Bytes(r.Memory.GradientsBytes),
		Bytes(r.Memory.OptimizerBytes), Bytes(r.Memory.ActivationsBytes), fits(r.Memory.FitsTarget))
	if r.Memory.Model == "arena" {
		fmt.Fprintf(w, "memory     = arena %s + optimizer %s + fixed %s (modules, cuBLASLt workspace); CUDA context %s beside\n",
			Bytes(r.Memory.ArenaBytes), Bytes(r.Memory.OptimizerBytes), Bytes(r.Memory.FixedBytes),
			Bytes(r.Memory.ContextBytes))
	}
	if r.Memory.HostBytes > 0 {
		fmt.Fprintf(w, "memory     host (pinned) %s of offloaded activations beside the GPU, not in its peak\n",
			Bytes(r.Memory.HostBytes))
	}
	if m := r.Memory; m.HostPeakBytes > 0 && m.Model == "arena" {
		resume := ""
		if m.HostResumeBytes > 0 {
			resume = fmt.Sprintf(", %s with the checkpoint a resume loads", Bytes(m.HostResumeBytes))
		}
		fmt.Fprintf(w, "memory     host peak %s beside the GPU's %s (model as lcc holds it %s%s, %s once "+
			"on the GPU; pinned %s; CUDA runtime %s)\n", Bytes(m.HostPeakBytes), Bytes(m.PerGPUPeakBytes),
			Bytes(m.HostModelBytes), resume, Bytes(m.HostKeptBytes), Bytes(m.PinnedBytes),
			Bytes(m.HostRuntimeBytes))
	}
	if m := r.Memory; m.OptimizerState == "host" && m.OptimizerUpdate == "gpu" {
		fmt.Fprintf(w, "memory     optimizer state: host (pinned) %s of fp32 masters and AdamW moments; the GPU "+
			"runs AdamW as they stream through two device windows (%s, in the fixed costs)\n",
			Bytes(m.HostStateBytes), Bytes(cost.HostStreamBytes(m.HostStateBytes/cost.OptimizerStateBytes(1))))
	} else if m.OptimizerState == "host" {
		fmt.Fprintf(w, "memory     optimizer state: host (pinned) %s of fp32 masters and AdamW moments, %s of "+
			"gradient and weight staging; the CPU runs AdamW as the gradients come down\n",
			Bytes(m.HostStateBytes), Bytes(m.HostStagingBytes))
	}
	if m := r.Memory; m.SnapshotHostBytes > 0 {
		how := fmt.Sprintf("staged through %s on the GPU (in its peak)", Bytes(m.SnapshotStagingBytes))
		if m.SnapshotStagingBytes == 0 {
			how = "unstaged (a staging copy would pass the budget: the next update waits for the copy)"
		}
		fmt.Fprintf(w, "memory     checkpoints: host (pinned) %s, %s\n", Bytes(m.SnapshotHostBytes), how)
	}
	fmt.Fprintf(w, "flops      per GPU: forward %s, backward %s, per step %s\n", FLOPString(r.FLOPs.Forward),
		FLOPString(r.FLOPs.Backward), FLOPString(r.FLOPs.PerStep))
	var ks []string
	for _, k := range r.Kernels {
		ks = append(ks, k.Name)
	}
	fmt.Fprintf(w, "kernels    %d: %s\n", len(r.Kernels), strings.Join(ks, " "))
	for _, line := range attentionKernelLines(r.AttentionKernels) {
		fmt.Fprintf(w, "attn kern  %s\n", line)
	}
	if r.ProgramHash != "" {
		fmt.Fprintf(w, "program    %s\n", r.ProgramHash)
	}
	if r.CUDAGraph != "" {
		fmt.Fprintf(w, "cuda graph %s\n", r.CUDAGraph)
	}
	if r.KernelError != "" {
		fmt.Fprintf(w, "kernels    incomplete: %s\n", r.KernelError)
	}
	var ops []string
	for _, k := range sortedKeys(r.Ops) {
		ops = append(ops, fmt.Sprintf("%s×%d", k, r.Ops[k]))
	}
	fmt.Fprintf(w, "ops        %s\n", strings.Join(ops, " "))
	for _, p := range r.Passes {
		ch := ""
		if p.Changed {
			ch = " (changed)"
		}
		tm := ""
		if p.Micros > 0 {
			tm = fmt.Sprintf(" %.3f ms", float64(p.Micros)/1000)
		}
		fmt.Fprintf(w, "pass       %s%s%s\n", p.Name, tm, ch)
	}
}

func fits(ok bool) string {
	if ok {
		return ""
	}
	return "  DOES NOT FIT"
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func sortedKV[V any](m map[string]V) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s=%v", k, m[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// Bytes formats a byte count with a binary unit.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.2f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// FLOPString formats a FLOP count with a decimal unit.
func FLOPString(n int64) string {
	units := []string{"", "K", "M", "G", "T", "P", "E"}
	f := float64(n)
	i := 0
	for f >= 1000 && i < len(units)-1 {
		f /= 1000
		i++
	}
	return fmt.Sprintf("%.3g %sFLOP", f, units[i])
}

func joinInts(xs []int64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprint(x))
	}
	return strings.Join(parts, ",")
}
