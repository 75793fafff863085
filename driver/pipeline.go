package driver

import (
	"fmt"
	"strings"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/passes/loss"
	"github.com/lcc-dev/lcc/plan"
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
	// Forward stops after the forward rewrites (attention and cleanup): the
	// pipeline of lcc check, which then differentiates what its reference asks.
	Forward bool
	// Objective, when set, is lcc check's gradient pipeline, run after the
	// forward one: shard-sequence (with Ranks), autodiff of this objective
	// (chosen from the reference: a loss output, or outputs seeded with
	// cotangents), all-reduce-gradients (with Ranks), and nothing else, so that
	// the numbers compared are the model's own. An empty objective only shards.
	Objective *Objective
}

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
	if _, err := o.Storage(); err != nil {
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
	// fuse-cross-entropy fuses the cross-entropy insert-loss adds.
	{"insert-loss", "fuse-cross-entropy"},
	// shard-sequence splits the loss into per-rank partial sums, fused or not.
	{"insert-loss", "shard-sequence"},
	{"fuse-cross-entropy", "shard-sequence"},
	// the backward uses the fused op's chunked gradient, of the rank's program.
	{"fuse-cross-entropy", "autodiff"},
	{"shard-sequence", "autodiff"},
	{"insert-loss", "autodiff"},
	// sum-concats merges the zero pads of slice gradients that autodiff writes.
	{"autodiff", "sum-concats"},
	// each rank's weight gradients are partial sums until all-reduced.
	{"autodiff", "all-reduce-gradients"},
	// checkpoints recompute forward values the backward reads...
	{"autodiff", "insert-checkpoints"},
	{"all-reduce-gradients", "insert-checkpoints"},
	// ...and CSE would merge the recomputed copies back.
	{"cse", "insert-checkpoints"},
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

// codegenPass describes the codegen step for `lcc passes`; Pipeline builds the
// instance that runs.
var _ = passes.Register(passes.Pass{Name: "codegen",
	Doc: "lower the final program to CUDA kernels and a launch plan (GPU targets)",
	Run: func(*ir.Func) error { return nil }})

// autodiffPass returns the autodiff pass: it replaces f by autodiff.Grad(f, o),
// o coming from opts when the pass runs, since an earlier pass of the pipeline
// (insert-loss, shard-sequence) names the loss; ok false means there is nothing
// to differentiate (an inference compile), and the pass changes nothing.
func autodiffPass(opts func(f *ir.Func) (o autodiff.Options, ok bool, err error)) passes.Pass {
	return passes.Pass{Name: "autodiff",
		Doc: "append the backward (reverse-mode) of the loss: outputs grad.<weight>",
		Run: func(f *ir.Func) error {
			o, ok, err := opts(f)
			if err != nil || !ok {
				return err
			}
			g, err := autodiff.Grad(f, o)
			if err != nil {
				return err
			}
			// A Func holds no pointers back to itself, so the gradient function can
			// take f's place.
			*f = *g
			return nil
		}}
}

var _ = passes.RegisterConfigurable(autodiffPass(func(*ir.Func) (autodiff.Options, bool, error) {
	return autodiff.Options{Loss: loss.Output, KeepOutputs: true}, true, nil
}), func(a *passes.Args) (passes.Pass, error) {
	o := autodiff.Options{Loss: a.String("loss", loss.Output), KeepOutputs: a.Bool("keep-outputs", true)}
	return autodiffPass(func(*ir.Func) (autodiff.Options, bool, error) { return o, true, nil }), nil
})

// pipeline is a pass list and what its passes found while running.
type pipeline struct {
	opts   Options
	target targets.Target
	passes []passes.Pass

	matches    passes.AttentionMatches
	layers     []string // attention layers dilate-attention rewrote
	loss       loss.Choice
	fused      int
	shard      passes.ShardResult
	seedAxes   map[string]passes.SeqAxis // sharded axes of the cotangent inputs autodiff added
	fwdFLOPs   int64
	trained    bool
	ckpt       *passes.CheckpointStats
	ckptRan    bool
	prog       *cudagen.Program
	codegenErr error
	// mem is the memory model of the report and of checkpointing's budget.
	mem memoryModel
}

// Pipeline returns the passes of a compile for target t with options o, in the
// order they run: match-attention, match-norms, dilate-attention, cancel-transposes,
// cleanup, insert-loss, fuse-cross-entropy, shard-sequence, autodiff,
// all-reduce-gradients, sum-concats, cleanup, insert-checkpoints, codegen (each only
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
	if err := o.validate(); err != nil {
		return nil, err
	}
	storage, _ := o.Storage()
	p := &pipeline{opts: o, target: t, mem: memoryModel{target: t, storage: storage, rank: o.Rank}}
	if !p.hasCodegen() {
		p.mem.target.Arch = targets.ArchCPU // no GPU program: the simulated model
	}
	add := func(ps ...passes.Pass) { p.passes = append(p.passes, ps...) }
	if o.Objective != nil {
		p.addGradTail()
		return p, p.finish()
	}
	a := o.Attention
	match := passes.MatchAttention(passes.MatchConfig{RequireAttention: a.Require, Result: &p.matches})
	if a.Require {
		match.Config = "require=true"
	}
	add(match, passes.MatchNorms)
	if a.Mode == "dilated" {
		cfg := a.dilate()
		cfg.Layers = &p.layers
		d := passes.DilateAttention(cfg)
		d.Config = fmt.Sprintf("segments=%s dilations=%s offsets=%s", joinInts(cfg.Segments),
			joinInts(cfg.Dilations), cfg.Offsets)
		add(d)
	}
	add(passes.CancelTransposes)
	add(passes.Cleanup...)
	if o.Forward || o.Loss == loss.None {
		return p, p.finish()
	}
	add(loss.Insert(o.Loss, o.KeepLogits, &p.loss))
	fuse := passes.FuseCrossEntropy
	fuse.Run = func(f *ir.Func) error {
		if p.loss.Loss == "" {
			return nil
		}
		before := countOp(f, ir.OpFusedLinearCrossEntropy)
		err := passes.FuseCrossEntropy.Run(f)
		p.fused = countOp(f, ir.OpFusedLinearCrossEntropy) - before
		return err
	}
	add(fuse, passes.EliminateDeadCode)
	p.addGradTail()
	add(passes.SumConcats)
	add(passes.Cleanup...)
	policy := o.Checkpoint
	if policy == "" {
		policy = "auto"
	}
	ck := passes.Pass{Name: "insert-checkpoints", Config: "policy=" + policy,
		Doc: "recompute forward activations in the backward to fit the memory budget",
		Run: func(f *ir.Func) error {
			if !p.trained {
				return nil
			}
			p.mem.trained = true
			run, stats := passes.InsertCheckpointsWithStats(passes.CheckpointConfig{Policy: policy,
				BudgetBytes: p.budget(), Peak: p.mem.peak, Hints: p.memoryHints()})
			p.ckpt, p.ckptRan = stats, true
			return run.Run(f)
		}}
	if o.MemoryBudget > 0 {
		ck.Config += fmt.Sprintf(" budget=%d", o.MemoryBudget)
	}
	add(ck, passes.EliminateDeadCode)
	return p, p.finish()
}

// addGradTail appends shard-sequence (when sharded), autodiff and
// all-reduce-gradients (when sharded).
func (p *pipeline) addGradTail() {
	o := p.opts
	if o.sharded() {
		s := passes.ShardSequence(passes.ShardConfig{Ranks: max(o.Ranks, 1), Mode: o.ShardMode,
			Result: &p.shard})
		s.Config = fmt.Sprintf("ranks=%d mode=%s", max(o.Ranks, 1), o.ShardMode)
		p.passes = append(p.passes, s)
	}
	p.passes = append(p.passes, autodiffPass(p.autodiffOptions))
	if o.sharded() {
		ar := passes.AllReduceGradientsPass(max(o.Ranks, 1), autodiff.GradPrefix)
		run := ar.Run
		ar.Run = func(f *ir.Func) error {
			if !p.trained {
				return nil
			}
			return run(f)
		}
		p.passes = append(p.passes, ar)
	}
}

// finish appends codegen for a GPU target and checks the order.
func (p *pipeline) finish() error {
	if p.hasCodegen() {
		storage, _ := p.opts.Storage()
		cfg := "arch=" + p.target.Arch
		if storage != tensor.F32 {
			cfg += " storage=" + storage.String()
		}
		if p.opts.Rank > 0 {
			cfg += fmt.Sprintf(" rank=%d", p.opts.Rank)
		}
		p.passes = append(p.passes, passes.Pass{Name: "codegen", Config: cfg,
			Doc: "lower the final program to CUDA kernels and a launch plan (GPU targets)",
			Run: func(f *ir.Func) error {
				// An op without a GPU lowering leaves the plan standing; the report says
				// which op is missing.
				p.prog, p.codegenErr = cudagen.Build(f, cudagen.Options{Arch: p.target.Arch, Storage: storage,
					Rank: p.opts.Rank})
				return nil
			}})
	}
	if err := CheckOrder(p.passes); err != nil {
		return fmt.Errorf("lcc: BUG: %w", err)
	}
	return nil
}

// autodiffOptions is what the autodiff pass differentiates: the loss insert-loss
// chose, or each rank's partial sum of it in a sharded step.
func (p *pipeline) autodiffOptions(f *ir.Func) (autodiff.Options, bool, error) {
	l := p.loss.Loss
	var seeds map[string]string
	if obj := p.opts.Objective; obj != nil {
		l, seeds = obj.Loss, obj.Seeds
	}
	if l == "" && len(seeds) == 0 {
		return autodiff.Options{}, false, nil
	}
	if p.opts.sharded() {
		ranks := max(p.opts.Ranks, 1)
		if l != "" {
			local, ok := p.shard.Partial[l]
			if !ok {
				return autodiff.Options{}, false, fmt.Errorf("--ranks=%d: the loss %q is not a sum over "+
					"positions, so its gradient cannot be split over ranks", ranks, l)
			}
			l = local
		}
		p.seedAxes = map[string]passes.SeqAxis{}
		for out, dy := range seeds {
			a, ok := p.shard.Outputs[out]
			if !ok {
				return autodiff.Options{}, false, fmt.Errorf("--ranks=%d: output %q seeded by %s is not "+
					"sharded along the sequence", ranks, out, dy)
			}
			p.seedAxes[dy] = a
		}
	}
	p.trained = true
	p.fwdFLOPs = countFLOPs(f)
	return autodiff.Options{Loss: l, Seeds: seeds, KeepOutputs: true}, true, nil
}

// memoryHints are the flags that would lower this compile's peak, for
// checkpointing's refusal.
func (p *pipeline) memoryHints() []string {
	o := p.opts
	var h []string
	if o.MemoryBudget > 0 && (p.target.MemoryBytes == 0 || o.MemoryBudget < p.target.MemoryBytes) {
		h = append(h, "a larger --memory-budget")
	}
	if p.mem.storage == tensor.F32 {
		h = append(h, "--precision=bf16")
	}
	if o.Attention.Mode != "dilated" && len(p.matches.Found) > 0 {
		h = append(h, "--attention=dilated")
	}
	if p.target.GPUs > 1 && o.Ranks <= 1 {
		h = append(h, fmt.Sprintf("--ranks=%d (sequence parallelism over the target's GPUs)", p.target.GPUs))
	} else if p.target.GPUs <= 1 {
		h = append(h, "a target with more GPUs and --ranks")
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
		return p.target.MemoryBytes - plan.CUDAContextBytes
	}
	return p.target.MemoryBytes
}

// run runs the pipeline over f in place.
func (p *pipeline) run(f *ir.Func, popts passes.Options) ([]passes.Stat, error) {
	return passes.Run(f, p.passes, popts)
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
		n += plan.NodeFLOPs(node)
	}
	return n
}
