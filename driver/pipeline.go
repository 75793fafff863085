package driver

import (
	"fmt"
	"strings"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/cost"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/passes/loss"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
)

// Options are the flags that choose a compile's passes. lcc compile, check and
// train take them with the same names and meanings.
type Options struct {
	// Loss is a loss.Kinds value: what the step differentiates ("" is auto).
	Loss string
	// Attention selects the attention rewrites.
	Attention AttentionOptions
	// Checkpoint is the activation checkpointing policy (passes.PolicyNames);
	// MemoryBudget overrides the budget derived from the target.
	Checkpoint   string
	MemoryBudget int64
	// HostMemoryBudget (--host-memory-budget) bounds the planned host peak of a
	// GPU step (the model as lcc holds it, pinned offload and checkpoint
	// buffers): checkpointing offloads no more than it leaves, and a plan past it
	// is refused. Zero plans without a host bound, so a compile never depends on
	// the machine it runs on; lcc train checks the measured limits at run time.
	HostMemoryBudget int64
	// Precision is the device storage of float values: fp32 (default) or bf16
	// (math stays fp32). It chooses the kernels.
	Precision string
	// Ranks > 1 shards the sequence over that many GPUs with ShardMode (ring,
	// ulysses or dilated).
	Ranks     int
	ShardMode string
	// SPMD shards even for one rank (Ranks 1): the step then holds its
	// collectives, as a one-rank communicator test needs.
	SPMD bool
	// Rank is the rank whose build of a sharded program codegen makes (its
	// kernels, and so the program hash, are rank-specific).
	Rank int
	// KeepLogits keeps the model's outputs in a training step (by default a step
	// returns the loss and gradients only, so the logits need not be stored and
	// cross-entropy fuses with the output projection).
	KeepLogits bool
	// PackDocs trains on packed documents (--doc-sep): pack-documents masks
	// attention to each document, restarts positions there, and adds the
	// doc_starts input the data loader feeds.
	PackDocs bool
	// Forward stops after the forward rewrites (attention and cleanup): the
	// pipeline of lcc check, which then differentiates what its reference asks.
	Forward bool
	// Objective, when set, is lcc check's gradient pipeline, run after the
	// forward one: shard-sequence (with Ranks), autodiff of this objective
	// (chosen from the reference: a loss output, or outputs seeded with
	// cotangents), all-reduce-gradients (with Ranks), and nothing else, so that
	// the numbers compared are the model's own. An empty objective only shards.
	Objective *Objective
	// RoPE is --rope-theta and --rope-scaling: rescale-rope runs first when it
	// asks for anything.
	RoPE passes.RoPEConfig
	// CUDAGraph is "on" (the default, also "") or "off": whether the executor
	// captures the step as a CUDA graph where its plan allows (lcc train
	// --cuda-graph). It is recorded in the launch plan, so the hash covers it.
	CUDAGraph string
	// OptimizerState is where a GPU training step's trainer keeps AdamW's fp32
	// masters and moments (lcc train --optimizer-state): "device" (also "") on
	// the GPU beside the arena; "host" in pinned host memory, updated on the
	// CPU as the gradients come down (runtime/exec.HostOptimizer); "auto" on
	// the device unless the device plan does not fit the budget with it, then
	// on the host. insert-checkpoints decides (the budget it fits is the one
	// the choice frees), and the launch plan records the choice, so the
	// program hash covers it.
	OptimizerState string
	// OptimizerUpdate is where a host state's AdamW update runs (lcc train
	// --optimizer-update): "gpu", the state streamed up and back through two
	// device windows (runtime/exec.HostOptimizer's OnDevice); "cpu", as the
	// gradients come down (HostUpdate); or "auto" (also ""), the GPU unless its
	// windows keep the step from fitting the device's budget, then the CPU.
	// The GPU comes first because it measured 1.94× faster on the H200 (the
	// 1.1B Llama at 8K: 541.6 ms a step against 1049.1 ms with 16 host threads;
	// BENCHMARKS.md), and it pins 4 bytes a parameter less. It applies when the
	// state is on the host; the launch plan records the update that runs, so
	// the program hash covers it.
	OptimizerUpdate string
	// Fuse is "off" (the default, also "") or "on": whether the fuse pass
	// (passes.Fuse) merges groups of elementwise ops into fused_elementwise
	// nodes, one kernel each, after autodiff and checkpointing (lcc compile and
	// train --fuse). Off by default until fused steps have been verified on a
	// GPU. The launch plan records the choice, so the program hash covers it.
	Fuse string
}

// gpuUpdate says whether a host optimizer state is planned with the GPU's
// update first (gpu or auto; insert-checkpoints may fall back from auto's).
func (o Options) gpuUpdate() bool { return o.OptimizerUpdate != "cpu" }

// OptimizerStates are the values of Options.OptimizerState.
const OptimizerStates = "device, host or auto"

// Storage is the device storage dtype Precision names.
func (o Options) Storage() (tensor.DType, error) {
	switch o.Precision {
	case "", "fp32":
		return tensor.F32, nil
	case "bf16":
		return tensor.BF16, nil
	}
	return tensor.Invalid, fmt.Errorf("--precision %q: want fp32 or bf16", o.Precision)
}

// sharded says whether the step is sequence-sharded (an SPMD program).
func (o Options) sharded() bool { return o.Ranks > 1 || o.SPMD && o.Ranks == 1 }

// validate checks the options alone, before any model is loaded.
func (o Options) validate() error {
	if err := o.Attention.Validate(); err != nil {
		return err
	}
	if err := loss.CheckKind(o.Loss); err != nil {
		return err
	}
	if o.CUDAGraph != "" && o.CUDAGraph != "on" && o.CUDAGraph != "off" {
		return fmt.Errorf("--cuda-graph %q: want on or off", o.CUDAGraph)
	}
	if o.Fuse != "" && o.Fuse != "on" && o.Fuse != "off" {
		return fmt.Errorf("--fuse %q: want on or off", o.Fuse)
	}
	if _, err := o.Storage(); err != nil {
		return err
	}
	switch o.OptimizerState {
	case "", "device", "host", "auto":
	default:
		return fmt.Errorf("--optimizer-state %q: want %s", o.OptimizerState, OptimizerStates)
	}
	switch o.OptimizerUpdate {
	case "", "auto", "cpu", "gpu":
	default:
		return fmt.Errorf("--optimizer-update %q: want auto, gpu or cpu", o.OptimizerUpdate)
	}
	if err := o.RoPE.Validate(); err != nil {
		return err
	}
	switch o.Checkpoint {
	case "", "auto", "none", "layers", "sublayers", "selective", "layers+offload", "sublayers+offload":
	default:
		return fmt.Errorf("--checkpoint %q: want %s", o.Checkpoint, passes.PolicyNames)
	}
	if o.MemoryBudget < 0 {
		return fmt.Errorf("--memory-budget %d: want a positive number of bytes", o.MemoryBudget)
	}
	if o.HostMemoryBudget < 0 {
		return fmt.Errorf("--host-memory-budget %d: want a positive number of bytes", o.HostMemoryBudget)
	}
	if o.Ranks < 0 {
		return fmt.Errorf("--ranks %d: want a positive number", o.Ranks)
	}
	if o.Rank < 0 {
		return fmt.Errorf("--rank %d: want a rank from 0", o.Rank)
	}
	if o.Ranks > 0 && o.Rank >= o.Ranks {
		return fmt.Errorf("--rank %d: want 0 to %d (--ranks=%d)", o.Rank, o.Ranks-1, o.Ranks)
	}
	return nil
}

// passOrder lists pairs {a, b}: when both run, the last run of a precedes the
// last run of b. Pipeline checks every pipeline it builds against it (as Go's SSA
// backend checks its pass list, cmd/compile/internal/ssa/compile.go), and a test
// checks that every name is a registered pass.
var passOrder = [...]struct{ a, b string }{
	// cancel-transposes permutes the cos and sin tables rescale-rope recomputes
	// by position, and the backward is to see the new frequencies.
	{"rescale-rope", "cancel-transposes"},
	{"rescale-rope", "autodiff"},
	// the backward of one rms_norm or layer_norm op replaces the decomposition's.
	{"match-norms", "autodiff"},
	// cancel-transposes removes the transposes match-attention puts around the
	// attention op, and the backward is to lose them too.
	{"match-attention", "cancel-transposes"},
	{"cancel-transposes", "autodiff"},
	// dilate-attention rewrites the attention ops match-attention makes.
	{"match-attention", "dilate-attention"},
	// sequence sharding rewrites attention ops: matched, dilated or not.
	{"match-attention", "shard-sequence"},
	{"dilate-attention", "shard-sequence"},
	// pack-documents masks the attention ops the rewrites before it make, and
	// shard-sequence carries its doc starts to every rank.
	{"dilate-attention", "pack-documents"},
	{"cancel-transposes", "pack-documents"},
	{"pack-documents", "shard-sequence"},
	{"pack-documents", "autodiff"},
	// fuse-cross-entropy fuses the cross-entropy insert-loss adds.
	{"insert-loss", "fuse-cross-entropy"},
	// shard-sequence splits the loss into per-rank partial sums, fused or not.
	{"insert-loss", "shard-sequence"},
	{"fuse-cross-entropy", "shard-sequence"},
	// the backward uses the fused op's chunked gradient, of the rank's program.
	{"fuse-cross-entropy", "autodiff"},
	{"shard-sequence", "autodiff"},
	{"insert-loss", "autodiff"},
	// sum-concats merges the zero pads of slice gradients that autodiff writes,
	// and sink-concats moves the elementwise ops around every concat into it.
	{"autodiff", "sum-concats"},
	{"sum-concats", "sink-concats"},
	{"autodiff", "sink-concats"},
	{"sink-concats", "insert-checkpoints"},
	{"sink-concats", "fuse"},
	// each rank's weight gradients are partial sums until all-reduced.
	{"autodiff", "all-reduce-gradients"},
	// checkpoints recompute forward values the backward reads...
	{"autodiff", "insert-checkpoints"},
	{"all-reduce-gradients", "insert-checkpoints"},
	// ...and CSE would merge the recomputed copies back.
	{"cse", "insert-checkpoints"},
	// fuse groups the finished step's elementwise ops: the backward's, and the
	// forward values checkpointing recomputes...
	{"autodiff", "fuse"},
	{"all-reduce-gradients", "fuse"},
	{"insert-checkpoints", "fuse"},
	{"sum-concats", "fuse"},
	// ...which no later pass but codegen sees (a dce would not know the op's
	// results apart, and nothing else expects it).
	{"dce", "fuse"},
	{"cse", "fuse"},
	{"fuse", "codegen"},
	// kernels are generated for the final program.
	{"insert-checkpoints", "codegen"},
	{"autodiff", "codegen"},
	{"all-reduce-gradients", "codegen"},
	{"dce", "codegen"},
}

// CheckOrder checks a pass list against the order constraints.
func CheckOrder(ps []passes.Pass) error {
	last := map[string]int{}
	for i, p := range ps {
		last[p.Name] = i
	}
	for _, c := range passOrder {
		i, okA := last[c.a]
		j, okB := last[c.b]
		if okA && okB && i >= j {
			return fmt.Errorf("passes %s and %s out of order: %s must run before %s", c.a, c.b, c.a, c.b)
		}
	}
	return nil
}

// The pipeline is a table: one stage per row, each a pass by name, its
// configuration as a typed value that prints itself (what `lcc passes
// --pipeline` shows is what runs), and a run over the function and the
// compile's findings. A run reads what earlier rows found (the loss insert-loss
// chose, the sharding shard-sequence made) and records what it finds; nothing
// else passes between rows. passList binds the rows to one findings value for
// passes.Run, which verifies, times and prints after each.
type stage struct {
	name, doc string
	cfg       fmt.Stringer
	run       func(f *ir.Func, fd *findings) error
}

// findings are what the stages of one compile found, for later stages and for
// the report.
type findings struct {
	matches  passes.AttentionMatches
	layers   []string // attention layers dilate-attention rewrote
	skipped  []string // the layers it left dense, and why
	loss     loss.Choice
	fused    int // fused_linear_cross_entropy ops fuse-cross-entropy made
	shard    passes.ShardResult
	seedAxes map[string]passes.SeqAxis // sharded axes of the cotangent inputs autodiff added
	fwdFLOPs int64
	trained  bool // autodiff differentiated a loss
	ckpt     *passes.RecomputeStats
	// hostState: insert-checkpoints planned the step with AdamW's state in
	// pinned host memory (Options.OptimizerState); gpuUpdate: that state
	// updated on the GPU (Options.OptimizerUpdate, as auto resolved).
	hostState, gpuUpdate bool
	prog                 *cudagen.Program   // codegen's program (nil: no GPU target, or codegen failed)
	fuse                 *passes.FuseResult // what fuse made (nil: it did not run)
	rope                 *passes.RoPEResult // what rescale-rope rewrote (nil: it did not run)
}

// words is a configuration already in words: a pass of package passes whose
// Config string is all it has.
type words string

func (w words) String() string { return string(w) }

// plain is the stage of a pass that needs no findings.
func plain(p passes.Pass) stage {
	return stage{name: p.Name, doc: p.Doc, cfg: words(p.Config),
		run: func(f *ir.Func, _ *findings) error { return p.Run(f) }}
}

// matchConfig configures match-attention.
type matchConfig struct{ Require bool }

func (c matchConfig) String() string {
	if c.Require {
		return "require=true"
	}
	return ""
}

// dilateConfig configures dilate-attention.
type dilateConfig struct{ passes.DilateConfig }

func (c dilateConfig) String() string {
	return fmt.Sprintf("segments=%s dilations=%s offsets=%s", joinInts(c.Segments), joinInts(c.Dilations), c.Offsets)
}

// lossConfig configures insert-loss (package loss's rules).
type lossConfig struct {
	Kind        string
	KeepOutputs bool
}

func (c lossConfig) String() string {
	return loss.Insert(c.Kind, c.KeepOutputs, nil).Config
}

// shardConfig configures shard-sequence.
type shardConfig struct {
	Ranks int
	Mode  string
}

func (c shardConfig) String() string { return fmt.Sprintf("ranks=%d mode=%s", c.Ranks, c.Mode) }

// autodiffConfig is what autodiff differentiates: the loss insert-loss chose,
// each rank's partial sum of it in a sharded step, or lcc check's objective.
type autodiffConfig struct {
	Objective *Objective
	Sharded   bool
	Ranks     int
}

func (autodiffConfig) String() string { return "" }

// checkpointConfig configures insert-checkpoints: the policy and --memory-budget
// as given, and, derived from the target and flags (so not printed), the
// budget in bytes, the memory model the plan is measured with and the flags
// that would lower the peak, for a refusal.
type checkpointConfig struct {
	Policy string
	Budget int64 // --memory-budget (0: the target's)
	// HostBudget is --host-memory-budget (0: no host bound).
	HostBudget int64
	// OptimizerState is Options.OptimizerState; the row shows "host" only:
	// "auto" resolves to what the launch plan records.
	OptimizerState string
	// update is Options.OptimizerUpdate: with auto, a host state's GPU update
	// falls back to the CPU's where its device windows do not fit.
	update string

	budget int64
	mem    memoryModel
	hints  func(attention bool) []string
}

func (c checkpointConfig) String() string {
	s := "policy=" + c.Policy
	if c.Budget > 0 {
		s += fmt.Sprintf(" budget=%d", c.Budget)
	}
	if c.HostBudget > 0 {
		s += fmt.Sprintf(" host-budget=%d", c.HostBudget)
	}
	if c.OptimizerState == "host" {
		s += " optimizer-state=host"
	}
	return s
}

// codegenConfig configures codegen: the target's arch, the storage dtype and the
// rank whose build of a sharded program it makes.
type codegenConfig struct {
	Arch    string
	Storage tensor.DType
	Rank    int
	NoGraph bool // the plan runs uncaptured (--cuda-graph=off)
	// CPUUpdate: --optimizer-update=cpu where the state may be on the host,
	// which the row names (where a host state's update runs is
	// insert-checkpoints' finding, fd.gpuUpdate).
	CPUUpdate bool
}

func (c codegenConfig) String() string {
	s := "arch=" + c.Arch
	if c.Storage != tensor.F32 && c.Storage != tensor.Invalid {
		s += " storage=" + c.Storage.String()
	}
	if c.Rank > 0 {
		s += fmt.Sprintf(" rank=%d", c.Rank)
	}
	if c.NoGraph {
		s += " cuda-graph=off"
	}
	if c.CPUUpdate {
		s += " optimizer-update=cpu"
	}
	return s
}

// codegenError is codegen's failure: an op without a GPU lowering. The compile
// still reports the plan, naming the op (Report.KernelError).
type codegenError struct{ err error }

func (e *codegenError) Error() string { return e.err.Error() }
func (e *codegenError) Unwrap() error { return e.err }

// codegenStage lowers the final program to kernels and a launch plan; it is the
// pipeline's last stage, and its error is returned as a *codegenError.
func codegenStage(c codegenConfig) stage {
	return stage{name: "codegen", doc: "lower the final program to CUDA kernels and a launch plan (GPU targets)",
		cfg: c, run: func(f *ir.Func, fd *findings) error {
			prog, err := cudagen.Build(f, cudagen.Options{Arch: c.Arch, Storage: c.Storage, Rank: c.Rank,
				NoCUDAGraph: c.NoGraph})
			if err != nil {
				return &codegenError{err}
			}
			if fd.hostState {
				prog.Plan.OptimizerState = cudagen.OptimizerStateHost
				if fd.gpuUpdate {
					prog.Plan.OptimizerUpdate = cudagen.OptimizerUpdateGPU
				}
			}
			// A compiled step's IR holds its groups when fuse does not run again.
			prog.Plan.Fused = fd.fuse != nil || countOp(f, ir.OpFusedElementwise) > 0
			fd.prog = prog
			return nil
		}}
}

// codegen in a pass list of its own (lcc passes, golden tests) builds the
// program and checks that every op lowers, keeping nothing.
var _ = passes.RegisterConfigurable(bindStage(codegenStage(codegenConfig{Arch: "sm_90a"}), &findings{}),
	func(a *passes.Args) (passes.Pass, error) {
		st, err := tensor.ParseDType(a.String("storage", "f32"))
		if err != nil {
			return passes.Pass{}, err
		}
		c := codegenConfig{Arch: a.String("arch", "sm_90a"), Storage: st, Rank: int(a.Int("rank", 0))}
		return bindStage(codegenStage(c), &findings{}), nil
	})

// autodiffStage replaces f by the gradient function of what c says to
// differentiate; with nothing to differentiate (an inference compile) it
// changes nothing.
func autodiffStage(c autodiffConfig) stage {
	return stage{name: "autodiff", doc: "append the backward (reverse-mode) of the loss: outputs grad.<weight>",
		cfg: c, run: func(f *ir.Func, fd *findings) error {
			o, ok, err := c.options(f, fd)
			if err != nil || !ok {
				return err
			}
			return gradInPlace(f, o)
		}}
}

// gradInPlace replaces f by autodiff.Grad(f, o). A Func holds no pointers back
// to itself, so the gradient function can take f's place.
func gradInPlace(f *ir.Func, o autodiff.Options) error {
	g, err := autodiff.Grad(f, o)
	if err != nil {
		return err
	}
	*f = *g
	return nil
}

var _ = passes.RegisterConfigurable(passes.Pass{Name: "autodiff",
	Doc: "append the backward (reverse-mode) of the loss: outputs grad.<weight>",
	Run: func(f *ir.Func) error { return gradInPlace(f, autodiff.Options{Loss: loss.Output, KeepOutputs: true}) },
}, func(a *passes.Args) (passes.Pass, error) {
	o := autodiff.Options{Loss: a.String("loss", loss.Output), KeepOutputs: a.Bool("keep-outputs", true)}
	return passes.Pass{Name: "autodiff", Run: func(f *ir.Func) error { return gradInPlace(f, o) }}, nil
})

// bindStage is s as a pass whose runs record into fd.
func bindStage(s stage, fd *findings) passes.Pass {
	return passes.Pass{Name: s.name, Doc: s.doc, Config: s.cfg.String(),
		Run: func(f *ir.Func) error { return s.run(f, fd) }}
}

// pipeline is the table of a compile's stages, the findings its run records,
// and the memory model of its report.
type pipeline struct {
	opts   Options
	target targets.Target
	stages []stage
	found  findings
	// passes are the stages bound to found, as passes.Run runs them.
	passes []passes.Pass
	mem    memoryModel
	// sealed is the compiled folder a compiled step was read from (nil: none).
	sealed *sealed
}

// Pipeline returns the passes of a compile for target t with options o, in the
// order they run: match-attention, match-norms, dilate-attention, cancel-transposes,
// cleanup, insert-loss, fuse-cross-entropy, shard-sequence, autodiff,
// all-reduce-gradients, sum-concats, sink-concats, cleanup, insert-checkpoints, codegen (each only
// where the options call for it). It is the one pass list of lcc compile, lcc check
// (o.Forward) and lcc train.
func Pipeline(t targets.Target, o Options) ([]passes.Pass, error) {
	p, err := newPipeline(t, o)
	if err != nil {
		return nil, err
	}
	return p.passes, nil
}

func newPipeline(t targets.Target, o Options) (*pipeline, error) {
	return newStepPipeline(t, o, false, false)
}

// newStepPipeline is newPipeline for a step whose trainer takes checkpoints
// with its optimizer state on the GPU (CompileOptions.Snapshots), or resumes
// from one (CompileOptions.Resume): their pinned buffer, or the state a resume
// loads, is then part of the host plan checkpointing is bounded by.
func newStepPipeline(t targets.Target, o Options, snapshots, resume bool) (*pipeline, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	storage, _ := o.Storage()
	p := &pipeline{opts: o, target: t, mem: memoryModel{target: t, storage: storage, rank: o.Rank,
		snapshots: snapshots, resume: resume, gpuUpdate: o.gpuUpdate()}}
	if !p.hasCodegen() {
		p.mem.target.Arch = targets.ArchCPU // no GPU program: the simulated model
	}
	p.stages = p.table()
	for _, s := range p.stages {
		p.passes = append(p.passes, bindStage(s, &p.found))
	}
	if err := CheckOrder(p.passes); err != nil {
		return nil, fmt.Errorf("lcc: BUG: %w", err)
	}
	return p, nil
}

// table is the pipeline's rows for its options.
func (p *pipeline) table() []stage {
	o := p.opts
	var rows []stage
	add := func(s ...stage) { rows = append(rows, s...) }
	plains := func(ps ...passes.Pass) {
		for _, ps := range ps {
			add(plain(ps))
		}
	}
	if o.Objective != nil {
		add(p.gradTail()...)
		return append(rows, p.codegenRows()...)
	}
	if o.RoPE.Active() {
		add(ropeStage(o.RoPE))
	}
	a := o.Attention
	mc := matchConfig{Require: a.Require}
	add(stage{name: "match-attention", doc: passes.MatchAttention(passes.MatchConfig{}).Doc, cfg: mc,
		run: func(f *ir.Func, fd *findings) error {
			return passes.MatchAttention(passes.MatchConfig{RequireAttention: mc.Require, Result: &fd.matches}).Run(f)
		}})
	plains(passes.MatchNorms)
	if a.Mode == "dilated" {
		dc := dilateConfig{a.dilate()}
		add(stage{name: "dilate-attention", doc: passes.DilateAttention(dc.DilateConfig).Doc, cfg: dc,
			run: func(f *ir.Func, fd *findings) error {
				cfg := dc.DilateConfig
				cfg.Layers = &fd.layers
				cfg.Skipped = &fd.skipped
				return passes.DilateAttention(cfg).Run(f)
			}})
	}
	plains(passes.CancelTransposes)
	if o.PackDocs {
		plains(passes.PackDocuments())
	}
	plains(passes.Cleanup...)
	if o.Forward || o.Loss == loss.None {
		return append(rows, p.codegenRows()...)
	}
	lc := lossConfig{Kind: o.Loss, KeepOutputs: o.KeepLogits}
	if lc.Kind == "" {
		lc.Kind = loss.Auto
	}
	add(stage{name: "insert-loss", doc: loss.Insert(lc.Kind, lc.KeepOutputs, nil).Doc, cfg: lc,
		run: func(f *ir.Func, fd *findings) error {
			var err error
			fd.loss, err = loss.Apply(f, lc.Kind, lc.KeepOutputs)
			return err
		}})
	add(stage{name: passes.FuseCrossEntropy.Name, doc: passes.FuseCrossEntropy.Doc, cfg: words(passes.FuseCrossEntropy.Config),
		run: func(f *ir.Func, fd *findings) error {
			if fd.loss.Loss == "" {
				return nil
			}
			before := countOp(f, ir.OpFusedLinearCrossEntropy)
			err := passes.FuseCrossEntropy.Run(f)
			fd.fused = countOp(f, ir.OpFusedLinearCrossEntropy) - before
			return err
		}})
	plains(passes.EliminateDeadCode)
	add(p.gradTail()...)
	plains(passes.SumConcats)
	plains(passes.SinkConcats)
	plains(passes.Cleanup...)
	policy := o.Checkpoint
	if policy == "" {
		policy = "auto"
	}
	cc := checkpointConfig{Policy: policy, Budget: o.MemoryBudget, HostBudget: o.HostMemoryBudget,
		OptimizerState: o.OptimizerState, update: o.OptimizerUpdate, budget: p.budget(), mem: p.mem,
		hints: p.memoryHints}
	add(stage{name: "insert-checkpoints", doc: "recompute forward activations in the backward to fit the memory budget",
		cfg: cc, run: func(f *ir.Func, fd *findings) error {
			if !fd.trained {
				return nil
			}
			mem := cc.mem
			mem.trained = true
			switch cc.OptimizerState {
			case "host":
				mem.hostState = true
			case "auto":
				mem.hostState = !cc.deviceFits(f, mem)
			}
			fd.hostState = mem.hostState
			attention := len(fd.matches.Found) > 0
			stats, err := cc.recompute(f, mem, attention)
			if auto := cc.update == "" || cc.update == "auto"; auto && mem.hostState && mem.gpuUpdate &&
				(err != nil || cc.budget > 0 && mem.gpu() && mem.peak(f) > cc.budget) {
				// The GPU's windows do not fit: the CPU's update, which needs
				// none. A failed plan left f as it was; a fixed policy's does
				// not depend on the update.
				mem.gpuUpdate = false
				if err != nil {
					stats, err = cc.recompute(f, mem, attention)
				}
			}
			fd.gpuUpdate = mem.hostState && mem.gpuUpdate
			fd.ckpt = &stats
			return mem.explain(f, err, cc.budget, cc.HostBudget)
		}})
	plains(passes.EliminateDeadCode)
	return append(rows, p.codegenRows()...)
}

// recompute is checkpointing of f under c's budgets with memory model mem;
// attention says the model has attention layers (for the refusal's hints).
func (c checkpointConfig) recompute(f *ir.Func, mem memoryModel, attention bool) (passes.RecomputeStats, error) {
	rc := passes.RecomputeConfig{Policy: c.Policy, BudgetBytes: c.budget, Memory: mem.measure,
		Hints: c.hints(attention)}
	rc.HostBudgetBytes, rc.FLOPsPerSec, rc.LinkBytesPerSec = mem.offloadBounds(f, c.HostBudget)
	return passes.Recompute(f, rc)
}

// deviceFits is --optimizer-state=auto's test: whether the step f, with its
// optimizer state on the device (mem), fits the budget, as it is or once
// checkpointing (on a copy of f) has done its best. Without a budget or a
// GPU it fits.
func (c checkpointConfig) deviceFits(f *ir.Func, mem memoryModel) bool {
	mem.hostState = false
	if c.budget <= 0 || !mem.gpu() {
		return true
	}
	if mem.peak(f) <= c.budget {
		return true
	}
	g := f.Clone()
	_, err := c.recompute(g, mem, false)
	return err == nil && mem.peak(g) <= c.budget
}

// deviceFitsAsIs is deviceFits without checkpointing (a step compiled
// already).
func (c checkpointConfig) deviceFitsAsIs(f *ir.Func, mem memoryModel) bool {
	mem.hostState, mem.trained = false, true
	return c.budget <= 0 || !mem.gpu() || mem.peak(f) <= c.budget
}

// ropeStage is rescale-rope with c, recording what it rewrote.
func ropeStage(c passes.RoPEConfig) stage {
	return recordingStage(passes.RescaleRoPEPass(c), c, passes.RescaleRoPE,
		func(fd *findings, r *passes.RoPEResult) { fd.rope = r })
}

// recordingStage is the stage of pass p with config c whose run returns a result
// that later stages or the report read: keep stores it in the findings.
func recordingStage[C fmt.Stringer, R any](p passes.Pass, c C, run func(*ir.Func, C) (R, error),
	keep func(*findings, *R)) stage {
	return stage{name: p.Name, doc: p.Doc, cfg: c, run: func(f *ir.Func, fd *findings) error {
		res, err := run(f, c)
		if err == nil {
			keep(fd, &res)
		}
		return err
	}}
}

// gradTail is shard-sequence (when sharded), autodiff and all-reduce-gradients
// (when sharded).
func (p *pipeline) gradTail() []stage {
	o := p.opts
	ranks := max(o.Ranks, 1)
	var rows []stage
	if o.sharded() {
		sc := shardConfig{Ranks: ranks, Mode: o.ShardMode}
		rows = append(rows, stage{name: "shard-sequence", doc: passes.ShardSequence(passes.ShardConfig{}).Doc,
			cfg: sc, run: func(f *ir.Func, fd *findings) error {
				res, err := passes.Shard(f, passes.ShardConfig{Ranks: sc.Ranks, Mode: sc.Mode})
				if err == nil {
					fd.shard = *res
				}
				return err
			}})
	}
	rows = append(rows, autodiffStage(autodiffConfig{Objective: o.Objective, Sharded: o.sharded(), Ranks: ranks}))
	if o.sharded() {
		ar := passes.AllReduceGradientsPass(ranks, autodiff.GradPrefix)
		rows = append(rows, stage{name: ar.Name, doc: ar.Doc, cfg: words(ar.Config),
			run: func(f *ir.Func, fd *findings) error {
				if !fd.trained {
					return nil
				}
				return ar.Run(f)
			}})
	}
	return rows
}

// codegenRows is the codegen stage for a GPU target's compile or step, last,
// after fuse with --fuse=on.
func (p *pipeline) codegenRows() []stage {
	if !p.hasCodegen() {
		return nil
	}
	var rows []stage
	if p.opts.Fuse == "on" {
		rows = append(rows, fuseStage(passes.FuseConfig{}))
	}
	storage, _ := p.opts.Storage()
	return append(rows, codegenStage(codegenConfig{Arch: p.target.Arch, Storage: storage, Rank: p.opts.Rank,
		NoGraph:   p.opts.CUDAGraph == "off",
		CPUUpdate: !p.opts.gpuUpdate() && (p.opts.OptimizerState == "host" || p.opts.OptimizerState == "auto")}))
}

// fuseStage is fuse with c, recording the groups it made.
func fuseStage(c passes.FuseConfig) stage {
	return recordingStage(passes.FusePass(c), c, passes.Fuse, func(fd *findings, r *passes.FuseResult) { fd.fuse = r })
}

// options is what autodiff differentiates in f, given what the stages before
// it found; ok false means nothing.
func (c autodiffConfig) options(f *ir.Func, fd *findings) (autodiff.Options, bool, error) {
	l := fd.loss.Loss
	var seeds map[string]string
	if obj := c.Objective; obj != nil {
		l, seeds = obj.Loss, obj.Seeds
	}
	if l == "" && len(seeds) == 0 {
		return autodiff.Options{}, false, nil
	}
	if c.Sharded {
		if l != "" {
			local, ok := fd.shard.Partial[l]
			if !ok {
				return autodiff.Options{}, false, fmt.Errorf("--ranks=%d: the loss %q is not a sum over "+
					"positions, so its gradient cannot be split over ranks", c.Ranks, l)
			}
			l = local
		}
		fd.seedAxes = map[string]passes.SeqAxis{}
		for out, dy := range seeds {
			a, ok := fd.shard.Outputs[out]
			if !ok {
				return autodiff.Options{}, false, fmt.Errorf("--ranks=%d: output %q seeded by %s is not "+
					"sharded along the sequence", c.Ranks, out, dy)
			}
			fd.seedAxes[dy] = a
		}
	}
	fd.trained = true
	fd.fwdFLOPs = countFLOPs(f)
	return autodiff.Options{Loss: l, Seeds: seeds, KeepOutputs: true}, true, nil
}

// memoryHints are the flags that would lower this compile's peak, for
// checkpointing's refusal; attention says the model has attention layers (what
// match-attention found).
func (p *pipeline) memoryHints(attention bool) []string {
	o := p.opts
	var h []string
	if o.MemoryBudget > 0 && (p.target.MemoryBytes == 0 || o.MemoryBudget < p.target.MemoryBytes) {
		h = append(h, "a larger --memory-budget")
	}
	if p.mem.storage == tensor.F32 {
		h = append(h, "--precision=bf16")
	}
	if o.Attention.Mode != "dilated" && attention {
		h = append(h, "--attention=dilated")
	}
	if p.target.GPUs > 1 && o.Ranks <= 1 {
		h = append(h, fmt.Sprintf("--ranks=%d (sequence parallelism over the target's GPUs)", p.target.GPUs))
	} else if p.target.GPUs <= 1 {
		h = append(h, "a target with more GPUs and --ranks")
	}
	if o.OptimizerState == "" || o.OptimizerState == "device" {
		h = append(h, "--optimizer-state=host (AdamW's state in pinned host memory)")
	}
	return append(h, "a shorter --seq-len")
}

// hasCodegen says whether the pipeline ends in codegen (a GPU target's compile
// or training step).
func (p *pipeline) hasCodegen() bool {
	return !p.opts.Forward && p.opts.Objective == nil && p.target.Arch != "" && p.target.Arch != targets.ArchCPU
}

// budget is checkpointing's bound on the per-GPU peak of the memory model
// (arena, optimizer state and fixed costs): --memory-budget, or the target's
// memory per GPU less the CUDA context.
func (p *pipeline) budget() int64 {
	if p.opts.MemoryBudget > 0 {
		return p.opts.MemoryBudget
	}
	if p.mem.gpu() && p.target.MemoryBytes > 0 {
		return p.target.MemoryBytes - cost.CUDAContextBytes
	}
	return p.target.MemoryBytes
}

// Describe renders a pass list one pass a line with its configuration, in the
// syntax of passes.ParsePipeline (`name key=value ...`), as `lcc passes
// --pipeline` prints it: a printed pipeline can be pasted into a golden test.
func Describe(ps []passes.Pass) string {
	var sb strings.Builder
	for _, p := range ps {
		sb.WriteString(strings.TrimSpace(p.Name+" "+p.Config) + "\n")
	}
	return sb.String()
}

func joinInts(xs []int64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

func countFLOPs(f *ir.Func) int64 {
	var n int64
	for _, node := range f.Body {
		n += cost.NodeFLOPs(node)
	}
	return n
}
