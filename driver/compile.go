package driver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/plan"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
)

// CompileOptions says how to compile.
type CompileOptions struct {
	Target     targets.Target
	PrintAfter string // --print-ir-after
	VerifyEach bool   // --verify-each
	Model      string // the model path, for the report
	// Loss is "" (plan what the model computes: training if it has a scalar
	// output, inference otherwise), "cross-entropy" (add mean cross-entropy of the
	// logits against labels and plan training) or "none" (plan inference only).
	Loss string
	// Attention selects the attention rewrites.
	Attention AttentionOptions
	// Checkpoint is the activation checkpointing policy (auto, none, layers,
	// selective); MemoryBudget overrides the budget derived from the target.
	Checkpoint   string
	MemoryBudget int64
	// TimePasses keeps pass timings in the report (which then differs run to run).
	TimePasses bool
	// KeepLogits keeps the model's outputs in a training plan (by default a
	// training step returns the loss and gradients only, so the logits need not be
	// stored and cross-entropy fuses with the output projection).
	KeepLogits bool
}

// WorkspaceBytes is reserved per GPU for the CUDA context, cuBLASLt workspace and
// NCCL buffers when a checkpoint budget is derived from the target's memory.
const WorkspaceBytes = 2 << 30

// Result is what a compile produced.
type Result struct {
	Func   *ir.Func
	Report *report.Report
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
}

// Prepare runs the forward pipeline over f in place: attention matching, the
// requested attention rewrite, and cleanup.
func Prepare(f *ir.Func, a AttentionOptions, popts passes.Options) (*Prepared, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	var am passes.AttentionMatches
	var layers []string
	pl := []passes.Pass{passes.MatchAttention(passes.MatchConfig{RequireAttention: a.Require, Result: &am})}
	if a.Mode == "dilated" {
		cfg := a.dilate()
		cfg.Layers = &layers
		pl = append(pl, passes.DilateAttention(cfg))
	}
	pl = append(pl, passes.Cleanup...)
	stats, err := passes.Run(f, pl, popts)
	if err != nil {
		return nil, err
	}
	att := report.Attention{Found: len(am.Found), Rewritten: map[string]int{}, Unmatched: am.UnmatchedNames()}
	if att.Unmatched == nil {
		att.Unmatched = []string{}
	}
	if a.Mode == "dilated" {
		if len(layers) == 0 && len(am.Found) > 0 {
			return nil, fmt.Errorf("--attention=dilated: no attention layer could be rewritten")
		}
		att.Rewritten["dilated"] = len(layers)
		if d := len(am.Found) - len(layers); d > 0 {
			att.Rewritten["dense"] = d
		}
	} else if len(am.Found) > 0 {
		att.Rewritten["dense"] = len(am.Found)
	}
	return &Prepared{Stats: stats, Attention: att}, nil
}

// Compile runs the pipeline over f and builds the report. For training it appends
// the backward (reverse-mode autodiff) and plans weights, gradients and AdamW state.
func Compile(f *ir.Func, opts CompileOptions) (*Result, error) {
	st, err := compileStep(f, opts, nil)
	if err != nil {
		return nil, err
	}
	if !opts.TimePasses {
		for i := range st.stats {
			st.stats[i].Micros = 0
		}
	}
	rep := report.Build(st.f, report.Input{Model: filepath.Base(opts.Model), Target: opts.Target,
		Passes: st.stats, Training: st.train, Attention: &st.attention})
	return &Result{Func: st.f, Report: rep}, nil
}

// step is what compileStep produced.
type step struct {
	f         *ir.Func
	stats     []passes.Stat
	train     report.Training
	attention report.Attention
	shard     passes.ShardResult
}

// compileStep is the pipeline Compile and PlanSharded share: attention rewrites,
// the loss, fused cross-entropy, then (with so) shard-sequence, then autodiff
// (of the rank's partial loss, gradients all-reduced, when sharded), cleanup and
// checkpoints under the target's budget. It rewrites f in place.
func compileStep(f *ir.Func, opts CompileOptions, so *ShardOptions) (*step, error) {
	popts := passes.Options{VerifyEach: true, PrintAfter: opts.PrintAfter}
	prep, err := Prepare(f, opts.Attention, popts)
	if err != nil {
		return nil, err
	}
	st := &step{stats: prep.Stats, attention: prep.Attention}
	run := func(g *ir.Func, pl ...passes.Pass) error {
		more, err := passes.Run(g, pl, popts)
		st.stats = append(st.stats, more...)
		return err
	}
	switch opts.Loss {
	case "cross-entropy":
		if err := AddCrossEntropy(f); err != nil {
			return nil, err
		}
		st.train.Loss = "loss"
	case "", "none":
		if opts.Loss == "" {
			st.train.Loss = scalarLoss(f)
		}
	default:
		return nil, fmt.Errorf("--loss %q: want cross-entropy or none", opts.Loss)
	}
	if st.train.Loss != "" {
		if !opts.KeepLogits {
			keepOnly(f, st.train.Loss)
		}
		before := countOp(f, ir.OpFusedLinearCrossEntropy)
		if err := run(f, passes.FuseCrossEntropy, passes.EliminateDeadCode); err != nil {
			return nil, err
		}
		st.train.FusedCrossEntropy = countOp(f, ir.OpFusedLinearCrossEntropy) - before
	}
	loss := st.train.Loss
	if so != nil {
		if err := run(f, passes.ShardSequence(passes.ShardConfig{Ranks: so.Ranks, Mode: so.Mode,
			Result: &st.shard})); err != nil {
			return nil, err
		}
		if loss != "" {
			local, ok := st.shard.Partial[loss]
			if !ok {
				return nil, fmt.Errorf("--ranks=%d: the loss %q is not a sum over positions", so.Ranks, loss)
			}
			loss = local
		}
	}
	if loss == "" {
		st.f = f
		return st, ir.Verify(f)
	}
	st.train.ForwardFLOPs = countFLOPs(f)
	g, err := autodiff.Grad(f, autodiff.Options{Loss: loss, KeepOutputs: true})
	if err != nil {
		return nil, err
	}
	if so != nil {
		if err := passes.AllReduceGradients(g, so.Ranks, autodiff.GradPrefix); err != nil {
			return nil, err
		}
	}
	st.stats = append(st.stats, passes.Stat{Name: "autodiff", Changed: true})
	if err := run(g, passes.Cleanup...); err != nil {
		return nil, err
	}
	// Checkpointing runs after CSE, which would merge recomputed copies back.
	budget := opts.MemoryBudget
	if budget == 0 && opts.Target.MemoryBytes > 0 {
		budget = opts.Target.MemoryBytes - trainable(g)*report.AdamWBytesPerParam - WorkspaceBytes
	}
	policy := opts.Checkpoint
	if policy == "" {
		policy = "auto"
	}
	cp, cst := passes.InsertCheckpointsWithStats(passes.CheckpointConfig{Policy: policy, BudgetBytes: budget})
	if err := run(g, cp, passes.EliminateDeadCode); err != nil {
		return nil, err
	}
	st.train.Checkpoints = cst
	st.train.Enabled = true
	st.f = g
	return st, ir.Verify(g)
}

// keepOnly drops every output but name.
func keepOnly(f *ir.Func, name string) {
	var outs []ir.Output
	for _, o := range f.Outputs {
		if o.Name == name {
			outs = append(outs, o)
		}
	}
	f.Outputs = outs
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

func countFLOPs(f *ir.Func) int64 {
	var n int64
	for _, node := range f.Body {
		n += plan.NodeFLOPs(node)
	}
	return n
}

// WriteOutputs writes DIR/graph.lcc, DIR/weights.safetensors and DIR/report.json,
// after running extra writers (the CUDA backend's kernels and launch plan). Every
// file is written to a temporary name and renamed, so a failure leaves no
// half-written file; files written before a failure are removed.
func WriteOutputs(dir string, res *Result, extra ...func(dir string) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("-o %s: %w", dir, err)
	}
	js, err := json.MarshalIndent(res.Report, "", "  ")
	if err != nil {
		return err
	}
	weights, err := EncodeWeights(res.Func)
	if err != nil {
		return err
	}
	files := []struct {
		name string
		data []byte
	}{
		{"graph.lcc", []byte(ir.Print(res.Func))},
		{"weights.safetensors", weights},
		{"report.json", append(js, '\n')},
	}
	var written []string
	for _, w := range extra {
		if err := w(dir); err != nil {
			return err
		}
	}
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		if err := WriteFileAtomic(path, f.data); err != nil {
			for _, w := range written {
				os.Remove(w)
			}
			return err
		}
		written = append(written, path)
	}
	return nil
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

// WriteFileAtomic writes data to path through a temporary file in the same folder,
// fsynced and renamed.
func WriteFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// ReportJSON renders the report as indented JSON.
func ReportJSON(r *report.Report) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	err := enc.Encode(r)
	return buf.Bytes(), err
}
