package passes

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/plan"
)

// This file chooses which forward values the backward keeps and which it
// recomputes (activation checkpointing; Chen et al., "Training Deep Nets with
// Sublinear Memory Cost", arXiv 1604.06174; Checkmate, Jain et al., MLSys 2020).
// It runs after autodiff, on a body that is the forward followed by the backward
// (plan.BackwardStart finds the split). Recomputing a value duplicates the forward
// nodes that make it, back to values that are kept, right before the first backward
// node that needs it; every backward read goes to the copy, so the forward original
// dies at its last forward use. The copies run the same kernels on the same inputs,
// so gradients are bitwise unchanged.
//
// The copies equal their originals, so CSE would merge them back: run CSE before
// this pass and not after it (dead-code elimination is fine). The budget is checked
// against plan.Simulate's peak, the number the report prints, not saved bytes.

// CheckpointConfig configures InsertCheckpoints.
type CheckpointConfig struct {
	// Policy is one of:
	//   "none"      keep every activation;
	//   "selective" keep matmul and attention outputs (attention's lse included),
	//               recompute pointwise ops, norms, softmax and data movement;
	//   "layers"    keep only block boundaries (the residual stream between layers,
	//               found from "layers.N"/"blocks.N" node names or residual adds) and
	//               recompute the rest;
	//   "auto"      (or "") the first of none, selective, layers whose simulated peak
	//               fits BudgetBytes, else a greedy choice of kept values under it,
	//               else an error giving the smallest peak found.
	Policy string
	// BudgetBytes bounds plan.Simulate(f).PeakBytes (weights, inputs, activations
	// and gradients; not optimizer state). Zero or less means no bound: auto
	// then chooses none.
	BudgetBytes int64
}

// CheckpointStats says what InsertCheckpoints did, for the report.
type CheckpointStats struct {
	// Policy is the policy applied: none, selective, layers or greedy.
	Policy string `json:"policy"`
	// RecomputedOps is the number of forward nodes duplicated into the backward.
	RecomputedOps int `json:"recomputed_ops"`
	// SavedBytes is the reduction of the simulated peak (PeakBefore − PeakAfter).
	SavedBytes int64 `json:"saved_bytes"`
	// PeakBefore and PeakAfter are plan.Simulate's peaks without and with it.
	PeakBefore int64 `json:"peak_before_bytes"`
	PeakAfter  int64 `json:"peak_after_bytes"`
}

// InsertCheckpoints returns the insert-checkpoints pass for cfg.
func InsertCheckpoints(cfg CheckpointConfig) Pass {
	p, _ := InsertCheckpointsWithStats(cfg)
	return p
}

// InsertCheckpointsWithStats is InsertCheckpoints that also returns the statistics
// of the pass's latest run; they are overwritten by each run.
func InsertCheckpointsWithStats(cfg CheckpointConfig) (Pass, *CheckpointStats) {
	stats := &CheckpointStats{}
	return Pass{Name: "insert-checkpoints",
		Doc: "recompute forward activations in the backward to fit the memory budget",
		Run: func(f *ir.Func) error {
			s, err := Checkpoint(f, cfg)
			*stats = s
			return err
		}}, stats
}

// The registry's instance (for `lcc passes` and --print-ir-after): auto without a
// budget, which changes nothing.
var _ = RegisterConfigurable(InsertCheckpoints(CheckpointConfig{Policy: "auto"}),
	func(a *Args) (Pass, error) {
		return InsertCheckpoints(CheckpointConfig{Policy: a.String("policy", "auto"),
			BudgetBytes: a.Int("budget", 0)}), nil
	})

// Checkpoint applies cfg to f, a function made by autodiff, in place.
func Checkpoint(f *ir.Func, cfg CheckpointConfig) (CheckpointStats, error) {
	start := plan.BackwardStart(f)
	before := plan.Simulate(f).PeakBytes
	st := CheckpointStats{Policy: "none", PeakBefore: before, PeakAfter: before}
	try := func(policy string, recompute func(*ir.Node) bool) (*ir.Func, CheckpointStats) {
		g := f.Clone()
		n := rematerialize(g, start, func(i int) bool { return recompute(f.Body[i]) })
		peak := plan.Simulate(g).PeakBytes
		return g, CheckpointStats{Policy: policy, RecomputedOps: n, SavedBytes: before - peak,
			PeakBefore: before, PeakAfter: peak}
	}
	apply := func(g *ir.Func, s CheckpointStats) (CheckpointStats, error) {
		*f = *g
		return s, nil
	}
	fits := func(s CheckpointStats) bool { return s.PeakAfter <= cfg.BudgetBytes }
	switch cfg.Policy {
	case "none":
		return st, nil
	case "selective":
		return apply(try("selective", selectiveRecompute))
	case "layers":
		return apply(try("layers", layersRecompute(f, start)))
	case "auto", "":
	default:
		return st, fmt.Errorf("--checkpoint %q: want auto, none, selective or layers", cfg.Policy)
	}
	if cfg.BudgetBytes <= 0 || before <= cfg.BudgetBytes {
		return st, nil
	}
	best := st
	var bestF *ir.Func
	consider := func(g *ir.Func, s CheckpointStats) bool {
		if s.PeakAfter < best.PeakAfter {
			best, bestF = s, g
		}
		return fits(s)
	}
	for _, c := range []struct {
		name string
		rec  func(*ir.Node) bool
	}{{"selective", selectiveRecompute}, {"layers", layersRecompute(f, start)}} {
		if g, s := try(c.name, c.rec); consider(g, s) {
			return apply(g, s)
		}
	}
	if g, s := greedyCheckpoint(f, start, cfg.BudgetBytes, try); consider(g, s) {
		return apply(g, s)
	}
	if bestF != nil {
		*f = *bestF // the smallest peak found, so the report shows the closest plan
	}
	return best, fmt.Errorf("activations do not fit the memory budget: budget %d bytes, "+
		"smallest simulated peak %d bytes (policy %s, without checkpointing %d); try "+
		"--checkpoint=layers, a larger --memory-budget, more GPUs (--ranks) or --attention=dilated",
		cfg.BudgetBytes, best.PeakAfter, best.Policy, before)
}

// rematerialize rewrites g's backward (the nodes from start on) to read, instead of
// each forward value whose node recompute(index) selects, a copy of it computed
// just before the first backward node that needs it. Copies are made once and
// recursively: a recomputed node's recomputed arguments are copied too, back to
// kept values and parameters. It returns the number of nodes copied.
func rematerialize(g *ir.Func, start int, recompute func(i int) bool) int {
	pos := make(map[*ir.Node]int, len(g.Body))
	for i, n := range g.Body {
		pos[n] = i
	}
	body := append([]*ir.Node(nil), g.Body[:start]...)
	copies := make(map[*ir.Value]*ir.Value)
	count := 0
	var ensure func(v *ir.Value) *ir.Value
	ensure = func(v *ir.Value) *ir.Value {
		if v.Def == nil {
			return v
		}
		i, ok := pos[v.Def]
		if !ok || i >= start || !recompute(i) {
			return v
		}
		if c := copies[v]; c != nil {
			return c
		}
		n := v.Def
		c := &ir.Node{Op: n.Op, Attrs: n.Attrs.Clone(), Name: n.Name + "/recompute"}
		for _, a := range n.Args {
			c.Args = append(c.Args, ensure(a))
		}
		for j, r := range n.Results {
			cv := &ir.Value{Type: r.Type, Def: c, Index: j}
			c.Results = append(c.Results, cv)
			copies[r] = cv
		}
		body = append(body, c)
		count++
		return copies[v]
	}
	for _, n := range g.Body[start:] {
		for i, a := range n.Args {
			n.Args[i] = ensure(a)
		}
		body = append(body, n)
	}
	g.Body = body
	return count
}

// isConstant reports ops that are never recomputed: copying them saves nothing.
func isConstant(op ir.Op) bool {
	return op == ir.OpConstant || op == ir.OpFull || op == ir.OpRange
}

// selectiveRecompute keeps the outputs of the expensive ops (GEMMs, attention with
// its lse) and recomputes the rest, as Korthikanti et al. ("Reducing Activation
// Recomputation in Large Transformer Models", arXiv 2205.05198) do.
func selectiveRecompute(n *ir.Node) bool {
	switch n.Op {
	case ir.OpMatMul, ir.OpAttention, ir.OpDilatedAttention, ir.OpFusedLinearCrossEntropy:
		return false
	}
	return !isConstant(n.Op)
}

// layersRecompute recomputes every forward node except constants and the block
// boundaries.
func layersRecompute(f *ir.Func, start int) func(*ir.Node) bool {
	b := blockBoundaries(f, start)
	return func(n *ir.Node) bool { return !b[n] && !isConstant(n.Op) }
}

var layerName = regexp.MustCompile(`(?:^|[./_])(?:layers|blocks|layer|block|h)[./_](\d+)(?:[./_]|$)`)

// blockBoundaries finds the forward nodes whose results carry the residual stream
// from one transformer block to the next. With exporter names such as
// "/model/layers.3/..." a boundary is a node of layer L read by a node of a later
// layer or of no layer; otherwise it is a residual add, add(x, f(x)), one of whose
// arguments depends on the other.
func blockBoundaries(f *ir.Func, start int) map[*ir.Node]bool {
	out := make(map[*ir.Node]bool)
	layer := make(map[*ir.Node]int)
	for _, n := range f.Body[:start] {
		if m := layerName.FindStringSubmatch(n.Name); m != nil {
			l, _ := strconv.Atoi(m[1])
			layer[n] = l + 1 // 0: no layer
		}
	}
	if len(layer) > 0 {
		for _, n := range f.Body[:start] {
			for _, a := range n.Args {
				if a.Def != nil && layer[a.Def] > 0 && layer[n] != layer[a.Def] {
					out[a.Def] = true
				}
			}
		}
		return out
	}
	for _, n := range f.Body[:start] {
		if n.Op != ir.OpAdd || !n.Args[0].Type.Equal(n.Args[1].Type) ||
			!n.Result().Type.Equal(n.Args[0].Type) {
			continue
		}
		x := n.Args[0] // add(x, f(x)): x is the stream entering the block
		if !dependsOn(n.Args[1], x) {
			if x = n.Args[1]; !dependsOn(n.Args[0], x) {
				continue
			}
		}
		out[n] = true
		if x.Def != nil {
			out[x.Def] = true
		}
	}
	return out
}

// dependsOn reports whether v is computed from u.
func dependsOn(v, u *ir.Value) bool {
	seen := make(map[*ir.Node]bool)
	var walk func(v *ir.Value) bool
	walk = func(v *ir.Value) bool {
		if v == u {
			return true
		}
		if v.Def == nil || seen[v.Def] {
			return false
		}
		seen[v.Def] = true
		for _, a := range v.Def.Args {
			if walk(a) {
				return true
			}
		}
		return false
	}
	return walk(v)
}

// greedyCheckpoint starts from keeping the union of selective's and layers' kept
// saved values and drops kept values, largest first, while that lowers the peak,
// stopping as soon as the peak fits budget (a greedy knapsack; Checkmate's ILP
// would be optimal).
func greedyCheckpoint(f *ir.Func, start int, budget int64,
	try func(string, func(*ir.Node) bool) (*ir.Func, CheckpointStats)) (*ir.Func, CheckpointStats) {
	bound := blockBoundaries(f, start)
	keep := make(map[*ir.Node]bool)
	var cands []*ir.Node
	for _, v := range plan.Saved(f) {
		n := v.Def
		if !keep[n] && (bound[n] || !selectiveRecompute(n)) && !isConstant(n.Op) {
			keep[n] = true
			cands = append(cands, n)
		}
	}
	size := func(n *ir.Node) int64 {
		var s int64
		for _, r := range n.Results {
			s += r.Type.Bytes()
		}
		return s
	}
	sort.SliceStable(cands, func(i, j int) bool { return size(cands[i]) > size(cands[j]) })
	rec := func(n *ir.Node) bool { return !keep[n] && !isConstant(n.Op) }
	g, s := try("greedy", rec)
	for _, n := range cands {
		if s.PeakAfter <= budget {
			break
		}
		keep[n] = false
		g2, s2 := try("greedy", rec)
		if s2.PeakAfter < s.PeakAfter {
			g, s = g2, s2
		} else {
			keep[n] = true
		}
	}
	return g, s
}
