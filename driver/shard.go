package driver

import (
	"fmt"
	"time"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/runtime/comm"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
)

// ShardOptions says how `lcc check --ranks=N` shards and runs a model.
type ShardOptions struct {
	// Ranks is the number of simulated ranks N.
	Ranks int
	// Mode is the sequence-parallel attention: ring (zigzag layout), ulysses or
	// dilated (LongNet's all-gather over the contiguous layout).
	Mode string
	// Grads also differentiates, as CheckGrads does.
	Grads bool
	// Timeout bounds every collective wait (comm.DefaultTimeout when 0).
	Timeout time.Duration
	// Precision of the interpreter: tensor.F32 (default) or tensor.F64.
	Precision tensor.DType
}

// ShardModes splits an --attention value into the attention rewrite Prepare runs
// (dense or dilated) and the shard-sequence mode used with --ranks > 1: ring and
// ulysses shard dense attention, dilated shards LongNet attention, and dense with
// --ranks > 1 means ring.
func ShardModes(attention string) (rewrite, shard string, err error) {
	switch attention {
	case "", "dense", passes.ShardRing:
		return "dense", passes.ShardRing, nil
	case passes.ShardUlysses:
		return "dense", passes.ShardUlysses, nil
	case "dilated":
		return "dilated", passes.ShardDilated, nil
	}
	return "", "", fmt.Errorf("--attention %q: want dense, dilated, ring or ulysses", attention)
}

// ShardedProgram is a model sharded over ranks and ready to run: its SPMD function
// (with the backward when asked) and how its inputs and outputs are laid out.
type ShardedProgram struct {
	Func   *ir.Func
	Layout passes.ShardResult
	// Objective is the objective of the unsharded model (as ChooseObjective chose it).
	Objective Objective
	// seedAxes are the sharded axes of the cotangent inputs autodiff added.
	seedAxes map[string]passes.SeqAxis
}

// BuildSharded shards a copy of f (after Prepare) for so.Ranks ranks and, with
// so.Grads, appends the backward of the objective ChooseObjective picks for ref,
// with parameter gradients all-reduced. f is not modified.
func BuildSharded(f *ir.Func, ref *safetensors.File, so ShardOptions) (*ShardedProgram, error) {
	g := f.Clone()
	var obj Objective
	if so.Grads {
		var err error
		if obj, err = ChooseObjective(g, ref); err != nil { // may add the loss to g
			return nil, err
		}
	}
	return shardObjective(g, obj, so)
}

// ShardObjective shards a copy of f (after Prepare) for so.Ranks ranks and, with
// so.Grads, appends the backward of obj (a loss output of f, or seeded outputs):
// each rank differentiates its local share of the loss, and the parameter
// gradients are all-reduced, so every rank ends the step with the whole
// gradient. It runs the pipeline's gradient passes (Options.Objective). f is not
// modified.
func ShardObjective(f *ir.Func, obj Objective, so ShardOptions) (*ShardedProgram, error) {
	return shardObjective(f.Clone(), obj, so)
}

// shardObjective is ShardObjective rewriting g in place.
func shardObjective(g *ir.Func, obj Objective, so ShardOptions) (*ShardedProgram, error) {
	o := Options{Ranks: so.Ranks, ShardMode: so.Mode, SPMD: true, Objective: &Objective{}}
	if so.Grads {
		o.Objective = &obj
	}
	p, err := newPipeline(targets.Target{}, o)
	if err != nil {
		return nil, err
	}
	if _, err := passes.Run(g, p.passes, passes.Options{VerifyEach: true}); err != nil {
		return nil, err
	}
	sp := &ShardedProgram{Func: g, Layout: p.found.shard, Objective: obj, seedAxes: p.found.seedAxes}
	if sp.seedAxes == nil {
		sp.seedAxes = map[string]passes.SeqAxis{}
	}
	return sp, nil
}

// axisOf returns the sharded axis of input name, if it is sharded.
func (sp *ShardedProgram) axisOf(name string) (passes.SeqAxis, bool) {
	if a, ok := sp.Layout.Inputs[name]; ok {
		return a, true
	}
	a, ok := sp.seedAxes[name]
	return a, ok
}

// ShardFeeds cuts whole-sequence feeds into each rank's share.
func (sp *ShardedProgram) ShardFeeds(feeds map[string]*tensor.Tensor) []map[string]*tensor.Tensor {
	out := make([]map[string]*tensor.Tensor, sp.Layout.Ranks)
	for r := range out {
		out[r] = sp.RankFeeds(feeds, r)
	}
	return out
}

// RankFeeds cuts whole-sequence feeds into rank's share; feeds that are not
// sharded are passed as they are.
func (sp *ShardedProgram) RankFeeds(feeds map[string]*tensor.Tensor, rank int) map[string]*tensor.Tensor {
	out := make(map[string]*tensor.Tensor, len(feeds))
	for name, t := range feeds {
		if a, ok := sp.axisOf(name); ok {
			out[name] = takeAxis(t, a.Axis, sp.Layout.Positions(a, rank))
		} else {
			out[name] = t
		}
	}
	return out
}

// Run executes every rank on the CPU interpreter, each with its own endpoint of
// an in-process communicator, and returns each rank's outputs.
func (sp *ShardedProgram) Run(feeds []map[string]*tensor.Tensor, timeout time.Duration,
	prec tensor.DType) ([]map[string]*tensor.Tensor, error) {
	if prec == tensor.Invalid {
		prec = tensor.F32
	}
	outs := make([]map[string]*tensor.Tensor, sp.Layout.Ranks)
	w := comm.NewWorld(sp.Layout.Ranks, timeout)
	err := w.Run(func(e *comm.Endpoint) error {
		o, err := interp.Run(sp.Func, feeds[e.Rank()], interp.Options{Precision: prec, Comm: e})
		if err != nil {
			return fmt.Errorf("rank %d: %w", e.Rank(), err)
		}
		outs[e.Rank()] = o
		return nil
	})
	return outs, err
}

// Gather assembles output name from every rank's outputs: a sharded output is put
// back in global position order (the zigzag undone); any other is rank 0's (every
// rank holds the same).
func (sp *ShardedProgram) Gather(outs []map[string]*tensor.Tensor, name string) *tensor.Tensor {
	a, ok := sp.Layout.Outputs[name]
	if !ok {
		return outs[0][name]
	}
	loc := outs[0][name]
	shape := append([]int64{}, loc.Shape...)
	shape[a.Axis] = a.Outer * sp.Layout.SeqLen * a.Inner
	full := tensor.New(loc.DType, shape...)
	for r, o := range outs {
		putAxis(full, o[name], a.Axis, sp.Layout.Positions(a, r))
	}
	return full
}

// takeAxis returns t's elements at indices idx along axis.
func takeAxis(t *tensor.Tensor, axis int, idx []int64) *tensor.Tensor {
	shape := append([]int64{}, t.Shape...)
	shape[axis] = int64(len(idx))
	out := tensor.New(t.DType, shape...)
	moveAxis(t, out, axis, idx, true)
	return out
}

// putAxis writes part into full at indices idx along axis.
func putAxis(full, part *tensor.Tensor, axis int, idx []int64) {
	moveAxis(full, part, axis, idx, false)
}

// moveAxis copies between full's rows at indices idx along axis and part's
// rows in order: into part when take, else into full.
func moveAxis(full, part *tensor.Tensor, axis int, idx []int64, take bool) {
	outer, size, inner := tensor.SplitAxis(full.Shape, axis)
	for o := range outer {
		for j, p := range idx {
			at := (o*size + int(p)) * inner // in full
			in := (o*len(idx) + j) * inner  // in part
			switch {
			case full.DType.IsFloat() && take:
				copy(part.F[in:in+inner], full.F[at:at+inner])
			case full.DType.IsFloat():
				copy(full.F[at:at+inner], part.F[in:in+inner])
			case take:
				copy(part.I[in:in+inner], full.I[at:at+inner])
			default:
				copy(full.I[at:at+inner], part.I[in:in+inner])
			}
		}
	}
}

// CheckSharded is Check (and, with so.Grads, CheckGrads) for the model sharded over
// so.Ranks ranks: it shards the reference inputs by the layout, runs every rank on
// the CPU interpreter with the in-process communicator, gathers the outputs (the
// zigzag undone) and the all-reduced gradients, and compares them with the same
// references, printing the same lines.
func CheckSharded(f *ir.Func, ref *safetensors.File, refPath string, so ShardOptions,
	opts CheckOptions) (*CheckResult, error) {
	if opts.Run != nil {
		return nil, fmt.Errorf("--ranks=%d: sharded checks run the ranks on the CPU interpreter only",
			so.Ranks)
	}
	if err := CheckWeights(f); err != nil {
		return nil, err
	}
	sp, err := BuildSharded(f, ref, so)
	if err != nil {
		return nil, err
	}
	feeds, err := Feeds(sp.Func, ref, refPath)
	if err != nil {
		return nil, err
	}
	// The ranks run at once in this process.
	if err := opts.HostBudget.Share(so.Ranks).Fit(sp.Func, 0); err != nil {
		return nil, err
	}
	outs, err := sp.Run(sp.ShardFeeds(feeds), so.Timeout, so.Precision)
	if err != nil {
		return nil, err
	}
	res := &CheckResult{}
	add := func(name string, got, want *tensor.Tensor) error { return res.record(Compare(name, got, want)) }
	for _, o := range f.Outputs {
		if want, ok := ref.Tensors[o.Name]; ok {
			if err := add(o.Name, sp.Gather(outs, o.Name), want); err != nil {
				return nil, err
			}
		}
	}
	if !so.Grads {
		if len(res.Comparisons) == 0 {
			return nil, fmt.Errorf("%s: no tensor named like a model output (outputs: %s)", refPath,
				outputNames(f))
		}
		return res, res.Print(opts)
	}
	obj := sp.Objective
	if want, ok := ref.Tensors["loss"]; ok && obj.Loss != "" && (obj.Added || f.Output("loss") == nil) {
		if err := add("loss", sp.Gather(outs, obj.Loss), want); err != nil {
			return nil, err
		}
	}
	grad := func(p *ir.Param) *tensor.Tensor { return sp.Gather(outs, autodiff.GradPrefix+p.Name) }
	record := func(c Comparison) { res.Comparisons = append(res.Comparisons, c) }
	if err := compareGrads(sp.Func, ref, refPath, opts.Out, grad, nil, tensor.F32, record); err != nil {
		return nil, err
	}
	return res, res.Print(opts)
}
