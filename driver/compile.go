package driver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/loss"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
)

// CompileOptions says how to compile: the pass-choosing Options and the rest.
type CompileOptions struct {
	Options
	Target     targets.Target
	PrintAfter string // --print-ir-after
	Model      string // the model path, for the report
	// TimePasses keeps pass timings in the report (which then differs run to run).
	TimePasses bool
	// Snapshots says the trainer checkpoints the step with its optimizer state
	// on the GPU (lcc train --checkpoint-dir, rank 0): the memory model then
	// holds the checkpoints' pinned buffer and staging copy (WithSnapshots).
	Snapshots bool
	// Resume says the trainer resumes the step from a checkpoint (lcc train
	// --resume with a checkpoint to load): the host plan then holds the
	// checkpoint's optimizer state beside the model while it loads
	// (cost.StepMemory.HostResumeBytes).
	Resume bool
	// DefaultShard shards the step over the target's GPUs when one GPU cannot
	// hold it and Ranks is 0 (lcc compile's default on multi-GPU targets).
	DefaultShard bool
	// ForDevice says Target's arch is the GPU's found at run time, not the one
	// the flags name (lcc train --recompile-for-device): a step read from a
	// compiled folder then has its kernels generated again for that arch, under
	// a new hash, instead of running as the program the folder holds.
	ForDevice bool
}

// Result is what a compile produced.
type Result struct {
	// Func is the final program: the training step (forward, backward) or the
	// forward alone for inference.
	Func   *ir.Func
	Report *report.Report
	// Program is the CUDA kernels and launch plan of the step one GPU runs: of
	// Func or, for a sharded plan, of rank Sharded.Rank's program Sharded.Func
	// (what lcc train --ranks runs on that rank); nil for a CPU target or when an
	// op has no GPU lowering (Report.KernelError says which).
	Program *cudagen.Program
	// Loss is the output the step differentiates ("" for inference).
	Loss string
	// Pipeline is the pass list that ran.
	Pipeline []passes.Pass
	// Sharded is the sequence-sharded plan (nil when the step runs on one GPU).
	Sharded *ShardPlan
	// Rank is the program of one rank and its layout, from CompileStep with
	// Ranks > 1 (Func is then that program); nil otherwise.
	Rank *ShardedProgram
	// Hash identifies Program and the IR it was built from (Func, or the rank's
	// program Sharded.Func): see ProgramHash.
	Hash string
}

// AttentionOptions are the attention rewrites asked for on the command line.
type AttentionOptions struct {
	// Mode is "dense" (match attention, keep it exact; the default) or "dilated".
	Mode      string
	Segments  []int64
	Dilations []int64
	Offsets   string // paper (default) or block
	// Require makes an attention-like subgraph that does not match an error.
	Require bool
}

// Validate checks the flags alone, before any model is loaded.
func (a AttentionOptions) Validate() error {
	switch a.Mode {
	case "", "dense":
		if len(a.Segments) > 0 || len(a.Dilations) > 0 {
			return fmt.Errorf("--segments and --dilations need --attention=dilated")
		}
		return nil
	case "dilated":
		return a.dilate().Validate()
	}
	return fmt.Errorf("--attention %q: want dense or dilated", a.Mode)
}

func (a AttentionOptions) dilate() passes.DilateConfig {
	cfg := passes.DefaultDilateConfig
	if len(a.Segments) > 0 || len(a.Dilations) > 0 {
		cfg.Segments, cfg.Dilations = a.Segments, a.Dilations
	}
	if a.Offsets != "" {
		cfg.Offsets = a.Offsets
	}
	return cfg
}

// Prepared is what the forward pipeline found and did.
type Prepared struct {
	Stats     []passes.Stat
	Attention report.Attention
	// RoPE is what rescale-rope rewrote (nil without --rope-theta or --rope-scaling).
	RoPE *passes.RoPEResult
}

// Prepare runs the forward pipeline over f in place (Pipeline with Forward set:
// attention matching, the requested attention rewrite, and cleanup), as lcc check
// does before it runs the model.
func Prepare(f *ir.Func, a AttentionOptions, popts passes.Options) (*Prepared, error) {
	return PrepareWith(f, Options{Attention: a}, popts)
}

// PrepareWith is Prepare with the forward options of o (its attention and RoPE).
func PrepareWith(f *ir.Func, o Options, popts passes.Options) (*Prepared, error) {
	p, err := newPipeline(targets.Target{}, Options{Attention: o.Attention, RoPE: o.RoPE, Forward: true})
	if err != nil {
		return nil, err
	}
	stats, err := passes.Run(f, p.passes, popts)
	if err != nil {
		return nil, err
	}
	att, err := p.attention()
	if err != nil {
		return nil, err
	}
	return &Prepared{Stats: stats, Attention: att, RoPE: p.found.rope}, nil
}

// ApplyRoPE runs rescale-rope alone over f (lcc run, which runs the model as
// imported), verified; nil when c asks for nothing.
func ApplyRoPE(f *ir.Func, c passes.RoPEConfig) (*passes.RoPEResult, error) {
	if !c.Active() {
		return nil, nil
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var fd findings
	if _, err := passes.Run(f, []passes.Pass{bindStage(ropeStage(c), &fd)}, passes.Options{VerifyEach: true}); err != nil {
		return nil, err
	}
	return fd.rope, nil
}

// attention summarises what the attention passes did, for the report.
func (p *pipeline) attention() (report.Attention, error) {
	am := p.found.matches
	att := report.Attention{Found: len(am.Found), Rewritten: map[string]int{}, Unmatched: am.UnmatchedNames()}
	if att.Unmatched == nil {
		att.Unmatched = []string{}
	}
	if p.opts.Attention.Mode == "dilated" {
		if len(p.found.layers) == 0 && len(am.Found) > 0 {
			return att, fmt.Errorf("--attention=dilated: no attention layer could be rewritten")
		}
		a := p.opts.Attention
		cfg := a.dilate()
		att.Dilated = &report.Dilated{Segments: cfg.Segments, Dilations: cfg.Dilations,
			Offsets: cfg.Offsets, Defaulted: len(a.Segments) == 0 && len(a.Dilations) == 0, Skipped: p.found.skipped}
		att.Rewritten["dilated"] = len(p.found.layers)
		if d := len(am.Found) - len(p.found.layers); d > 0 {
			att.Rewritten["dense"] = d
		}
	} else if len(am.Found) > 0 {
		att.Rewritten["dense"] = len(am.Found)
	}
	for _, f := range am.Found {
		if f.Window > 0 {
			if att.Windows == nil {
				att.Windows = map[string]int{}
			}
			att.Windows[fmt.Sprint(f.Window)]++
		}
	}
	return att, nil
}

// Compile runs the pipeline (see Pipeline) over f, which it rewrites in place,
// and returns the final program, its kernels and launch plan, the report and the
// program hash. With Ranks > 1, or DefaultShard on a multi-GPU target whose one
// GPU cannot hold the step, it also plans the sequence-sharded step: the report
// then gives that step's memory, FLOPs, checkpoints and communication, and the
// ops, kernels, launch plan (Result.Program) and program hash are those of rank
// opts.Rank's program (lcc compile --rank, 0 by default), the program lcc train
// --ranks with the same flags builds on that rank (CompileStep); Result.Func
// stays the single-GPU step (graph.lcc), the rank's program is
// Result.Sharded.Func. A Rank other than 0 needs a sharded plan of more ranks.
//
// A function that is already a training step (lcc compile -o DIR wrote it to
// DIR/graph.lcc) is not compiled again: only codegen runs, so the program and
// its hash are those of the compile that wrote it (see CompiledStep).
func Compile(f *ir.Func, opts CompileOptions) (*Result, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	var model *ir.Func
	if opts.Ranks > 1 || opts.Ranks == 0 && opts.DefaultShard && opts.Target.GPUs > 1 {
		model = f.Clone()
	}
	single := opts
	single.Ranks, single.Rank = 0, 0
	res, _, err := compileOne(f, single)
	if err != nil {
		return res, err
	}
	unsharded := func() (*Result, error) {
		if opts.Rank != 0 {
			return nil, fmt.Errorf("--rank %d: the plan is not sharded: every GPU runs the one program", opts.Rank)
		}
		res.attachReplicated(opts)
		return res, nil
	}
	if model == nil {
		return unsharded()
	}
	so := ShardOptions{Ranks: opts.Ranks, Mode: opts.ShardMode}
	if opts.Ranks == 0 {
		var ok bool
		so, ok = DefaultShard(res.Report, opts.Target, opts.Attention.Mode)
		// A multi-GPU target with fewer sequences than GPUs has no data
		// parallelism to use them: split the sequence across all of them, when
		// the model has attention (a sequence) to split.
		if !ok && batchOf(res.Report) < int64(opts.Target.GPUs) && res.Report.Attention.Found > 0 {
			so, ok = ShardOptions{Ranks: opts.Target.GPUs, Mode: defaultShardMode(opts.Attention.Mode)}, true
		}
		if !ok {
			return unsharded()
		}
		if opts.Rank >= so.Ranks {
			return nil, fmt.Errorf("--rank %d: the plan has %d ranks", opts.Rank, so.Ranks)
		}
		if res.Sharded, err = PlanSharded(model, opts.withoutPrint(), so); err != nil {
			return nil, fmt.Errorf("%w (the step does not fit one GPU; pass --ranks=1 to plan it unsharded)", err)
		}
	} else if res.Sharded, err = PlanSharded(model, opts.withoutPrint(), so); err != nil {
		return nil, err
	}
	res.attachSharded()
	return res, nil
}

// CompileStep compiles f, in place, into the step lcc train runs: the pipeline
// of Compile for one GPU or, with Ranks > 1, for one of Ranks ranks (the SPMD
// program every rank runs on its share of the sequence; Result.Rank says how to
// cut the feeds). It plans nothing else, so it is Compile's program and hash.
func CompileStep(f *ir.Func, opts CompileOptions) (*Result, error) {
	if _, ok := CompiledStep(f); ok && opts.Ranks > 1 {
		return nil, fmt.Errorf("--ranks=%d: %s is a compiled one-GPU step; give the model it came from",
			opts.Ranks, opts.Model)
	}
	res, p, err := compileOne(f, opts)
	if err != nil {
		return nil, err
	}
	if !opts.ForDevice {
		if err := p.sealed.check(opts.Model, res.Hash, res.Program); err != nil {
			return nil, err
		}
	}
	if opts.sharded() {
		res.Rank = &ShardedProgram{Func: res.Func, Layout: p.found.shard, Objective: Objective{Loss: res.Loss},
			seedAxes: map[string]passes.SeqAxis{}}
	}
	return res, nil
}

// withoutPrint is o without --print-ir-after, for a second compile of the model.
func (o CompileOptions) withoutPrint() CompileOptions {
	o.PrintAfter = ""
	return o
}

// attachReplicated says, on a multi-GPU target, that the step is not split but
// replicated: every GPU runs the whole step on its own sequences (data
// parallelism), which is what is left when there is no sequence to shard.
func (res *Result) attachReplicated(opts CompileOptions) {
	gpus := opts.Target.GPUs
	if gpus <= 1 {
		return
	}
	rep := res.Report
	var why string
	switch {
	case opts.Ranks == 1:
		why = "--ranks=1"
	case rep.Attention.Found == 0:
		why = "the model has no attention, so no sequence to shard"
	case batchOf(rep) >= int64(gpus):
		why = fmt.Sprintf("the batch of %d gives every GPU its own sequences", batchOf(rep))
	default:
		why = "the step fits one GPU"
	}
	rep.DataParallel = &report.DataParallel{GPUs: gpus, Reason: why}
}

// attachSharded puts the sharded step's plan into the report, and makes its
// rank's program the one the result holds (Program, Hash) and the report lists.
func (res *Result) attachSharded() {
	sh, rep := res.Sharded, res.Report
	rep.Memory = sh.Memory
	rep.Sharding = &report.Sharding{Ranks: sh.Ranks, Mode: sh.Mode, Layout: sh.Layout,
		SeqLen: sh.SeqLen, LocalSeqLen: sh.LocalSeqLen, Program: "rank.lcc", Rank: sh.Rank,
		Pipeline: sh.Report.Pipeline}
	rep.Communication = &report.Communication{BytesPerStepPerGPU: sh.Communication.BytesPerStepPerGPU,
		ByOp: sh.Communication.ByOp}
	// The step that runs on each GPU is the rank's: its FLOPs, checkpoints, ops,
	// kernels and program.
	sr := sh.Report
	rep.FLOPs, rep.Checkpoints, rep.Ops = sr.FLOPs, sr.Checkpoints, sr.Ops
	rep.Kernels, rep.AttentionKernels = sr.Kernels, sr.AttentionKernels
	rep.KernelError, rep.CUDAGraph = "", sr.CUDAGraph
	if sr.KernelError != "" {
		rep.KernelError = "sharded step: " + sr.KernelError
	}
	res.Program, res.Hash, rep.ProgramHash = sh.Program, sh.Hash, sh.Hash
}

// compileOne compiles f for one GPU, or for one of opts.Ranks ranks.
func compileOne(f *ir.Func, opts CompileOptions) (*Result, *pipeline, error) {
	p, err := newStepPipeline(opts.Target, opts.Options, opts.Snapshots, opts.Resume)
	if err != nil {
		return nil, nil, err
	}
	popts := passes.Options{VerifyEach: true, PrintAfter: opts.PrintAfter}
	var stats []passes.Stat
	var codegenErr error // an op without a GPU lowering: the report names it
	training := report.Training{}
	l, precompiled := CompiledStep(f)
	if precompiled {
		// Only codegen runs: the passes before it ran when the step was compiled.
		rec, err := checkRecordedPipeline(opts.Model, p.passes, opts.ForDevice)
		if err != nil {
			return nil, nil, err
		}
		if p.sealed, err = readSealed(opts.Model); err != nil {
			return nil, nil, err
		}
		if p.sealed != nil && p.sealed.prog != nil && p.hasCodegen() && !opts.ForDevice {
			// The folder's own kernels and launch plan, which its manifest verified:
			// codegen does not run again (CompileStep checks the program's hash).
			p.found.prog = p.sealed.prog
		} else {
			var rest []passes.Pass
			for _, ps := range p.passes {
				if ps.Name == "codegen" {
					rest = append(rest, ps)
				}
			}
			var kernelErr error
			if stats, kernelErr, err = runStages(f, rest, popts); err != nil {
				return nil, nil, err
			}
			codegenErr = kernelErr
		}
		p.found.loss = loss.Choice{Loss: l}
		training = report.Training{Enabled: true, Loss: l}
		if rec != nil {
			// The checkpoints were inserted by that compile; the report says so.
			training.Checkpoints = rec.Checkpoints
		}
	} else {
		if stats, codegenErr, err = runStages(f, p.passes, popts); err != nil {
			return nil, nil, err
		}
		if p.found.trained {
			training = report.Training{Enabled: true, Loss: p.found.loss.Loss, ForwardFLOPs: p.found.fwdFLOPs,
				FusedCrossEntropy: p.found.fused, Checkpoints: p.found.ckpt}
		}
	}
	if err := ir.Verify(f); err != nil {
		return nil, nil, err
	}
	att, err := p.attention()
	if err != nil {
		return nil, nil, err
	}
	if !opts.TimePasses {
		for i := range stats {
			stats[i].Micros = 0
		}
	}
	p.mem.trained = training.Enabled
	prog := p.found.prog
	p.mem.hostState = p.found.hostState
	if p.found.hostState {
		p.mem.gpuUpdate = p.found.gpuUpdate
	}
	if prog != nil && training.Enabled {
		if p.sealed != nil && p.sealed.prog == prog {
			// A compiled folder's program keeps the choice it was compiled with.
			p.mem.hostState = prog.Plan.OptimizerState == cudagen.OptimizerStateHost
			p.mem.gpuUpdate = prog.Plan.OptimizerUpdate == cudagen.OptimizerUpdateGPU
		} else if precompiled {
			// A compiled step's insert-checkpoints does not run again: its choice
			// is made here, on the step as it is.
			cc := checkpointConfig{budget: p.budget()}
			p.mem.hostState = opts.OptimizerState == "host" ||
				opts.OptimizerState == "auto" && !cc.deviceFitsAsIs(f, p.mem)
			if p.mem.hostState {
				prog.Plan.OptimizerState = cudagen.OptimizerStateHost
				if p.mem.gpuUpdate {
					prog.Plan.OptimizerUpdate = cudagen.OptimizerUpdateGPU
				}
			}
		}
	}
	mem := p.mem.of(f, prog)
	if opts.Snapshots && training.Enabled && mem.Model == "arena" {
		mem = mem.WithSnapshots(p.budget())
	}
	if err := p.mem.fitHost(f, mem, opts.HostMemoryBudget); err != nil {
		return nil, nil, err
	}
	in := report.Input{Model: filepath.Base(opts.Model), Target: opts.Target,
		Passes: stats, Training: training, Attention: &att, Memory: &mem}
	if mem.Model == "arena" {
		in.ArenaWeightsBytes, in.ArenaGradientsBytes = arenaParts(prog)
	}
	rep := report.Build(f, in)
	rep.RoPE = p.found.rope
	rep.Fusion = p.found.fuse
	res := &Result{Func: f, Report: rep, Loss: p.found.loss.Loss, Pipeline: p.passes, Program: p.found.prog}
	for _, ps := range p.passes {
		rep.Pipeline = append(rep.Pipeline, strings.TrimSpace(ps.Name+" "+ps.Config))
	}
	if codegenErr != nil {
		rep.KernelError = codegenErr.Error()
	} else if p.found.prog != nil {
		rep.Kernels = rep.Kernels[:0]
		for _, k := range p.found.prog.Kernels {
			rep.Kernels = append(rep.Kernels, report.Kernel{Name: k.Name, Op: k.Op})
		}
		for _, a := range p.found.prog.Attention {
			rep.AttentionKernels = append(rep.AttentionKernels, report.AttentionKernel{Node: a.Node, Op: a.Op,
				Name: a.Name, Kernel: a.Kernel, Tier: a.Tier, Why: a.Why, Note: a.Note})
		}
		rep.Kernels = append(rep.Kernels, libraryKernels(p.found.prog.Plan)...)
		rep.CUDAGraph = p.found.prog.Plan.Graph.String()
	}
	res.Hash = ProgramHash(f, res.Program)
	rep.ProgramHash = res.Hash
	return res, p, nil
}

// runStages runs a pipeline's passes. Codegen's failure (an op without a GPU
// lowering, a *codegenError from the last stage) is not the compile's: it comes
// back as kernelErr beside the statistics, and the report names the op.
func runStages(f *ir.Func, ps []passes.Pass, popts passes.Options) (stats []passes.Stat, kernelErr, err error) {
	stats, err = passes.Run(f, ps, popts)
	var ce *codegenError
	if errors.As(err, &ce) {
		return stats, ce.err, nil
	}
	return stats, nil, err
}

// libraryKernels lists what plan launches besides its generated kernels: a
// "cublaslt_gemm" entry when it has GEMMs, then one "nccl_<op>" entry per NCCL
// collective it calls (send_recv for ring attention's k/v blocks, all_reduce for
// gradients, ...), in the order the plan first calls each.
func libraryKernels(pl *cudagen.LaunchPlan) []report.Kernel {
	var ks []report.Kernel
	if slices.ContainsFunc(pl.Steps, func(st cudagen.Step) bool { return st.Kind == "gemm" }) {
		ks = append(ks, report.Kernel{Name: "cublaslt_gemm", Op: "matmul"})
	}
	seen := map[string]bool{}
	for _, st := range pl.Steps {
		if st.Kind == "collective" && st.Coll != nil && !seen[st.Coll.Op] {
			seen[st.Coll.Op] = true
			ks = append(ks, report.Kernel{Name: "nccl_" + st.Coll.Op, Op: st.Coll.Op})
		}
	}
	return ks
}

// batchOf is the bound batch dim of a report (1 when the model has none).
func batchOf(r *report.Report) int64 {
	for _, name := range batchNames {
		if v, ok := r.Shapes.Dims[name]; ok {
			return v
		}
	}
	return 1
}

// defaultShardMode is the sequence-parallel attention for an --attention mode.
func defaultShardMode(attention string) string {
	if attention == "dilated" {
		return passes.ShardDilated
	}
	return passes.ShardRing
}

func countOp(f *ir.Func, op ir.Op) int {
	n := 0
	for _, node := range f.Body {
		if node.Op == op {
			n++
		}
	}
	return n
}

func trainable(f *ir.Func) int64 {
	var n int64
	for _, p := range f.Params {
		if p.Role == ir.RoleWeight && !p.Frozen && p.Value.Type.DType.IsFloat() {
			n += p.Value.Type.Numel()
		}
	}
	return n
}

// WriteOutputs is WriteFolder with only files emit asks for besides the
// program's own.
func WriteOutputs(dir string, res *Result, emit ...string) error {
	return WriteFolder(dir, res, OutputOptions{Emit: emit})
}

// EncodeWeights serialises the data of every weight and state parameter.
func EncodeWeights(f *ir.Func) ([]byte, error) {
	ts := map[string]*tensor.Tensor{}
	var names []string
	for _, p := range f.Params {
		if p.Data != nil {
			ts[p.Name] = p.Data
			names = append(names, p.Name)
		}
	}
	sort.Strings(names)
	return safetensors.Encode(names, ts, map[string]string{"format": "lcc"})
}

// ReportJSON renders the report as indented JSON.
func ReportJSON(r *report.Report) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	err := enc.Encode(r)
	return buf.Bytes(), err
}
