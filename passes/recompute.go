package passes

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/lcc-dev/lcc/cost"
	"github.com/lcc-dev/lcc/ir"
)

// This file chooses which forward values the backward keeps and which it
// recomputes: activation recompute, which PyTorch calls activation checkpointing
// (hence the pass's name, insert-checkpoints, and the --checkpoint flag); it is
// not train/snapshot's checkpoints of a run on disk. Chen et al., "Training Deep Nets with
// Sublinear Memory Cost", arXiv 1604.06174; Checkmate, Jain et al., MLSys 2020.
// It runs after autodiff, on a body that is the forward followed by the backward
// (cost.BackwardStart finds the split). Recomputing a value duplicates the forward
// nodes that make it, back to values that are kept, right before the first backward
// node that needs it; every backward read goes to the copy, so the forward original
// dies at its last forward use. The copies run the same kernels on the same inputs,
// so gradients are bitwise unchanged.
//
// The copies equal their originals, so CSE would merge them back: run CSE before
// this pass and not after it (dead-code elimination is fine). The budget is checked
// against cost.Simulate's peak, the number the report prints, not saved bytes.

// RecomputeConfig configures InsertRecompute.
type RecomputeConfig struct {
	// Policy is one of:
	//   "none"      keep every activation;
	//   "selective" keep matmul and attention outputs (attention's lse included),
	//               recompute pointwise ops, norms, softmax and data movement;
	//   "layers"    keep only the input of every transformer layer (PyTorch's
	//               per-layer checkpointing; layers are found from "layers.N" or
	//               "blocks.N" node names, else from the residual adds, a layer
	//               being the residual blocks from one attention to the next) and
	//               recompute the rest;
	//   "sublayers" keep every residual block's input;
	//   "layers+offload", "sublayers+offload"
	//               that policy, with the kept values offloaded to pinned host
	//               memory between the forward and the backward (offload.go);
	//   "auto"      (or "") search none, selective, layers, sublayers; of those
	//               whose peak fits BudgetBytes, apply the one with the least
	//               recomputed FLOPs (within 2% of the step's FLOPs, the smaller
	//               peak). When none fits, layers+offload, then sublayers+offload
	//               (the first that fits: host memory and copies for the device
	//               memory). When none fits, a knapsack: from the smallest
	//               in-device plan, drop kept values, largest first, while the peak
	//               falls, until it fits; else an error (*RecomputeError) giving
	//               the smallest peak found.
	Policy string
	// BudgetBytes bounds Peak(f). Zero or less means no bound: auto then
	// chooses none.
	BudgetBytes int64
	// Peak is the memory model the budget is checked against: the per-GPU peak
	// of a step (the driver's: codegen's arena, optimizer state and fixed
	// costs). Nil means cost.Simulate's peak.
	Peak func(*ir.Func) int64
	// Hints are the flags that would lower the peak, which auto's refusal
	// names (the driver's, from the compile's options); nil names the usual ones.
	Hints []string
	// Memory, when set, is the memory model as a whole: the per-GPU peak and the
	// pinned host bytes of the offloaded values (the driver's: codegen's arena and
	// host block, in storage dtypes). It replaces Peak; nil means Peak and
	// cost.Simulate's host bytes.
	Memory func(*ir.Func) (peak, host int64)
	// HostBudgetBytes bounds the pinned host bytes auto may offload: what the
	// host budget leaves beside the model and the other pinned buffers. Zero or
	// less means no bound.
	HostBudgetBytes int64
	// FLOPsPerSec and LinkBytesPerSec (the IR's bytes per second over the host
	// link, each direction) time the offload copies against the compute they
	// overlap (cost.OffloadCopies); auto takes no offload whose copies do not
	// hide and recomputes instead. Either zero skips the check.
	FLOPsPerSec, LinkBytesPerSec float64
}

// PolicyNames lists the policies RecomputeConfig.Policy takes, for errors and
// help.
const PolicyNames = "auto, none, selective, sublayers, layers, sublayers+offload or layers+offload"

// RecomputeStats says what InsertRecompute did, for the report.
type RecomputeStats struct {
	// Policy is the policy applied: none, selective, sublayers, layers or
	// knapsack.
	Policy string `json:"policy"`
	// RecomputedOps is the number of forward nodes duplicated into the backward.
	RecomputedOps int `json:"recomputed_ops"`
	// RecomputedFLOPs is their work (cost.NodeFLOPs), the cost auto minimises.
	RecomputedFLOPs int64 `json:"recomputed_flops"`
	// SavedBytes is the reduction of the peak (PeakBefore − PeakAfter).
	SavedBytes int64 `json:"saved_bytes"`
	// PeakBefore and PeakAfter are the memory model's peaks without and with it.
	PeakBefore int64 `json:"peak_before_bytes"`
	PeakAfter  int64 `json:"peak_after_bytes"`
	// Tried lists the plans auto evaluated, in order ("policy=peak"); attempts
	// is the same list as values, for a refusal's summary.
	Tried    []string `json:"tried,omitempty"`
	attempts []attempt
	// Offloaded is the number of kept values offloaded to host memory, of
	// Offloadable (every kept value but the one the backward reads first);
	// OffloadedBytes their pinned host bytes (the memory model's).
	Offloaded      int   `json:"offloaded,omitempty"`
	Offloadable    int   `json:"offloadable,omitempty"`
	OffloadedBytes int64 `json:"offloaded_bytes,omitempty"`
	// Copies times the offload copies against compute (auto's plans with a
	// link rate; nil otherwise).
	Copies *cost.Copies `json:"copies,omitempty"`
}

// RecomputeError is auto's refusal: no plan searched fits the budget.
type RecomputeError struct {
	BudgetBytes int64
	// Smallest is the plan with the smallest peak found (applied to f, so
	// that the report shows the closest plan); NoneBytes is the peak without
	// checkpointing.
	Smallest  RecomputeStats
	NoneBytes int64
	// Hints are the flags named as ways out.
	Hints []string
	// Offload is the offload plan with the fewest pinned bytes that fit the
	// GPU's budget but was refused, and Rejected why (the host budget, or
	// copies that do not hide); nil when no offload plan fit the GPU.
	Offload  *RecomputeStats
	Rejected string
	// Plans are the whole plans auto evaluated: the in-device fixed policies
	// and each "+offload" policy with every value offloaded (for estimates of
	// what would fit at other sizes).
	Plans []RecomputeStats
}

func (e *RecomputeError) Error() string {
	hints := e.Hints
	if len(hints) == 0 {
		hints = []string{"a larger --memory-budget", "more GPUs (--ranks)", "--attention=dilated",
			"--precision=bf16", "a shorter --seq-len"}
	}
	var off string
	if e.Offload != nil {
		off = fmt.Sprintf("; %s would fit the GPU at %s offloading %d of %d values (%s pinned), but %s",
			e.Offload.Policy, gib(e.Offload.PeakAfter), e.Offload.Offloaded, e.Offload.Offloadable,
			gib(e.Offload.OffloadedBytes), e.Rejected)
	}
	return fmt.Sprintf("activations do not fit the memory budget: budget %s per GPU, smallest planned "+
		"peak %s (policy %s; without checkpointing %s; tried %s)%s; try %s",
		gib(e.BudgetBytes), gib(e.Smallest.PeakAfter), e.Smallest.Policy, gib(e.NoneBytes),
		briefTried(e.Smallest.attempts), off, strings.Join(hints, ", "))
}

// attempt is one plan auto evaluated: its name as Tried writes it (a partial
// offload's carries its counts, "layers+offload(6/12)"), what kind of plan it
// is, and its peak.
type attempt struct {
	name string
	kind attemptKind
	peak int64
}

// attemptKind groups attempts for a refusal's summary.
type attemptKind uint8

const (
	attemptFixed    attemptKind = iota // a fixed policy, named each
	attemptPartial                     // a partial offload, counted
	attemptKnapsack                    // one of the knapsack's plans, counted
)

func (a attempt) String() string { return a.name + "=" + shortBytes(a.peak) }

// briefTried is a plan's attempts for a message: the fixed policies each
// ("policy=peak"), the partial offloads and the knapsack's plans each as a
// count and their smallest peak, in the order their kinds first came; the
// report's JSON keeps them all (RecomputeStats.Tried).
func briefTried(tried []attempt) string {
	type group struct {
		n    int
		best int64
	}
	var out []string
	groups := map[attemptKind]*group{}
	var order []attemptKind
	for _, a := range tried {
		if a.kind == attemptFixed {
			out = append(out, a.String())
			continue
		}
		g := groups[a.kind]
		if g == nil {
			g = &group{best: a.peak}
			groups[a.kind] = g
			order = append(order, a.kind)
		}
		g.n++
		g.best = min(g.best, a.peak)
	}
	for _, k := range order {
		what := map[attemptKind]string{attemptPartial: "partial offloads", attemptKnapsack: "knapsack plans"}[k]
		out = append(out, fmt.Sprintf("%d %s (smallest %s)", groups[k].n, what, shortBytes(groups[k].best)))
	}
	return strings.Join(out, " ")
}

// shortBytes renders a byte count in GiB, or bytes when small.
func shortBytes(b int64) string {
	if b < 1<<30 {
		return fmt.Sprintf("%dB", b)
	}
	return fmt.Sprintf("%.2fGiB", float64(b)/(1<<30))
}

// gib renders a byte count as GiB with the exact count, or bytes when small.
func gib(b int64) string {
	if b < 1<<30 {
		return fmt.Sprintf("%d bytes", b)
	}
	return fmt.Sprintf("%.2f GiB (%d bytes)", float64(b)/(1<<30), b)
}

// InsertRecompute returns the insert-checkpoints pass for cfg.
func InsertRecompute(cfg RecomputeConfig) Pass {
	p, _ := InsertRecomputeWithStats(cfg)
	return p
}

// InsertRecomputeWithStats is InsertRecompute that also returns the statistics
// of the pass's latest run; they are overwritten by each run.
func InsertRecomputeWithStats(cfg RecomputeConfig) (Pass, *RecomputeStats) {
	stats := &RecomputeStats{}
	return Pass{Name: "insert-checkpoints",
		Doc: "recompute forward activations in the backward to fit the memory budget",
		Run: func(f *ir.Func) error {
			s, err := Recompute(f, cfg)
			*stats = s
			return err
		}}, stats
}

// The registry's instance (for `lcc passes` and --print-ir-after): auto without a
// budget, which changes nothing.
var _ = RegisterConfigurable(InsertRecompute(RecomputeConfig{Policy: "auto"}),
	func(a *Args) (Pass, error) {
		return InsertRecompute(RecomputeConfig{Policy: a.String("policy", "auto"),
			BudgetBytes: a.Int("budget", 0)}), nil
	})

// maxKnapsackTrials bounds the memory evaluations of the knapsack (each builds
// the step's memory plan once: about 0.3 s for the flagship at 1M tokens).
const maxKnapsackTrials = 24

// Recompute applies cfg to f, a function made by autodiff, in place.
func Recompute(f *ir.Func, cfg RecomputeConfig) (RecomputeStats, error) {
	measure := cfg.Memory
	if measure == nil {
		peakOf := cfg.Peak
		if peakOf == nil {
			peakOf = func(g *ir.Func) int64 { return cost.Simulate(g).PeakBytes }
		}
		measure = func(g *ir.Func) (int64, int64) { return peakOf(g), cost.Simulate(g).HostBytes }
	}
	start := cost.BackwardStart(f)
	before, _ := measure(f)
	st := RecomputeStats{Policy: "none", PeakBefore: before, PeakAfter: before}
	var tried []attempt
	// try plans policy: recompute what recompute selects, then offload the last
	// off of the kept values (offloadAll: every one; 0: none).
	try := func(policy string, recompute func(*ir.Node) bool, off int) (*ir.Func, RecomputeStats) {
		g := f.Clone()
		n, flops := rematerialize(g, start, func(i int) bool { return recompute(f.Body[i]) })
		var done, can int
		if off != 0 {
			done, can = offloadKept(g, start, off)
		}
		peak, host := measure(g)
		a := attempt{name: policy, peak: peak}
		switch {
		case off > 0:
			a.name, a.kind = fmt.Sprintf("%s(%d/%d)", policy, done, can), attemptPartial
		case policy == "knapsack":
			a.kind = attemptKnapsack
		}
		tried = append(tried, a)
		s := RecomputeStats{Policy: policy, RecomputedOps: n, RecomputedFLOPs: flops,
			SavedBytes: before - peak, PeakBefore: before, PeakAfter: peak, Offloaded: done,
			Offloadable: can}
		if done > 0 {
			s.OffloadedBytes = host
			if cfg.FLOPsPerSec > 0 && cfg.LinkBytesPerSec > 0 {
				c := cost.OffloadCopies(g, cfg.FLOPsPerSec, cfg.LinkBytesPerSec)
				s.Copies = &c
			}
		}
		return g, s
	}
	apply := func(g *ir.Func, s RecomputeStats) (RecomputeStats, error) {
		*f = *g
		return s, nil
	}
	fits := func(s RecomputeStats) bool { return s.PeakAfter <= cfg.BudgetBytes }
	switch cfg.Policy {
	case "none":
		return st, nil
	case "selective":
		return apply(try("selective", selectiveRecompute, 0))
	case "layers":
		return apply(try("layers", keepOnly(f, layerInputs(f, start)), 0))
	case "sublayers":
		return apply(try("sublayers", keepOnly(f, blockBoundaries(f, start)), 0))
	case "layers" + offloadPolicy:
		return apply(try(cfg.Policy, keepOnly(f, layerInputs(f, start)), offloadAll))
	case "sublayers" + offloadPolicy:
		return apply(try(cfg.Policy, keepOnly(f, blockBoundaries(f, start)), offloadAll))
	case "auto", "":
	default:
		return st, fmt.Errorf("--checkpoint %q: want %s", cfg.Policy, PolicyNames)
	}
	if cfg.BudgetBytes <= 0 || before <= cfg.BudgetBytes {
		return st, nil
	}
	// Every candidate is evaluated with the memory model; of those that fit, the
	// one with the least recomputed work wins; ties go to the earlier.
	type cand struct {
		g *ir.Func
		s RecomputeStats
	}
	var all []cand
	for _, c := range []struct {
		name string
		rec  func(*ir.Node) bool
	}{
		{"selective", selectiveRecompute},
		{"sublayers", keepOnly(f, blockBoundaries(f, start))},
		{"layers", keepOnly(f, layerInputs(f, start))},
	} {
		g, s := try(c.name, c.rec, 0)
		all = append(all, cand{g, s})
	}
	// Recompute within 2% of the step's work counts as equal (it is not worth
	// gigabytes): then the fewer bytes over the host link win, then the smaller
	// peak. For the flagship at 1M tokens, per-layer recomputes the output
	// projections that sublayers keeps (1.8% of the step) and peaks 9 GiB lower.
	var work int64
	for _, n := range f.Body {
		work += cost.NodeFLOPs(n)
	}
	tol := work / 50
	better := func(a, b RecomputeStats) bool {
		if d := a.RecomputedFLOPs - b.RecomputedFLOPs; d < -tol || d > tol {
			return d < 0
		}
		if a.OffloadedBytes != b.OffloadedBytes {
			return a.OffloadedBytes < b.OffloadedBytes
		}
		return a.PeakAfter < b.PeakAfter
	}
	best := -1
	for i, c := range all {
		if fits(c.s) && (best < 0 || better(c.s, all[best].s)) {
			best = i
		}
	}
	if best >= 0 {
		return apply(all[best].g, withTried(all[best].s, tried))
	}
	// Offload, only what the GPU cannot hold: of the kept values of layers,
	// then sublayers, the fewest (needed last first) that bring the peak within
	// the budget, if their pinned bytes fit the host's budget and their copies
	// hide behind compute.
	var off []cand
	var whole []RecomputeStats // the fixed plans and full offloads, for a refusal's estimates
	for _, c := range all {
		whole = append(whole, c.s)
	}
	var refused *RecomputeStats
	var why string
	best = -1
	for _, c := range []struct {
		name string
		keep map[*ir.Node]bool
	}{
		{"layers" + offloadPolicy, layerInputs(f, start)},
		{"sublayers" + offloadPolicy, blockBoundaries(f, start)},
	} {
		g, s, full := partialOffload(c.name, keepOnly(f, c.keep), fits, try)
		off = append(off, cand{g, s})
		whole = append(whole, full)
		if !fits(s) {
			continue
		}
		if r := offloadRefusal(s, cfg); r != "" {
			if refused == nil || s.OffloadedBytes < refused.OffloadedBytes {
				refused, why = &s, r
			}
			continue
		}
		if best < 0 || better(s, off[best].s) {
			best = len(off) - 1
		}
	}
	if best >= 0 {
		return apply(off[best].g, withTried(off[best].s, tried))
	}
	// Knapsack: from the in-device plan with the smallest peak, drop kept
	// values, largest first, while the peak falls, until it fits.
	smallest := 0
	for i, c := range all {
		if c.s.PeakAfter < all[smallest].s.PeakAfter {
			smallest = i
		}
	}
	g, s := knapsackDrop(f, start, keptBy(f, start, all[smallest].g), cfg.BudgetBytes,
		func(p string, rec func(*ir.Node) bool) (*ir.Func, RecomputeStats) { return try(p, rec, 0) })
	if !fits(s) {
		if all[smallest].s.PeakAfter <= s.PeakAfter {
			g, s = all[smallest].g, all[smallest].s
		}
		for _, c := range off {
			if c.s.PeakAfter < s.PeakAfter && offloadRefusal(c.s, cfg) == "" {
				g, s = c.g, c.s
			}
		}
		s = withTried(s, tried)
		*f = *g // the smallest peak found, so the report shows the closest plan
		return s, &RecomputeError{BudgetBytes: cfg.BudgetBytes, Smallest: s, NoneBytes: before,
			Hints: cfg.Hints, Offload: refused, Rejected: why, Plans: whole}
	}
	return apply(g, withTried(s, tried))
}

// withTried is s with the attempts that led to it.
func withTried(s RecomputeStats, tried []attempt) RecomputeStats {
	s.attempts = slices.Clone(tried)
	s.Tried = make([]string, len(tried))
	for i, a := range tried {
		s.Tried[i] = a.String()
	}
	return s
}

// partialOffload plans policy (a "+offload" policy's kept set, recompute) with
// the fewest kept values offloaded that make the plan fit: every offloadable
// value first (when even that does not fit, that plan is returned), then a
// binary search on the count, the peak falling as more values wait on the
// host. It returns the smallest fitting plan it tried, and the plan with every
// value offloaded.
func partialOffload(policy string, recompute func(*ir.Node) bool, fits func(RecomputeStats) bool,
	try func(string, func(*ir.Node) bool, int) (*ir.Func, RecomputeStats)) (*ir.Func, RecomputeStats, RecomputeStats) {
	g, s := try(policy, recompute, offloadAll)
	full := s
	if !fits(s) || s.Offloaded <= 1 {
		return g, s, full
	}
	lo, hi := 0, s.Offloaded // hi fits; lo does not (0 is the in-device plan, which did not)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if g2, s2 := try(policy, recompute, mid); fits(s2) {
			g, s, hi = g2, s2, mid
		} else {
			lo = mid
		}
	}
	return g, s, full
}

// offloadRefusal says why auto may not take the offload plan s ("" when it
// may): its pinned bytes pass the host budget, or its copies do not hide.
func offloadRefusal(s RecomputeStats, cfg RecomputeConfig) string {
	if b := cfg.HostBudgetBytes; b > 0 && s.OffloadedBytes > b {
		return fmt.Sprintf("the host budget leaves %s for pinned activations", gib(b))
	}
	if c := s.Copies; c != nil && !c.Hidden() {
		return fmt.Sprintf("its copies (%.3f s on the host link) would stall compute %.3f s of %.3f s",
			c.CopySeconds, c.StallSeconds, c.ComputeSeconds)
	}
	return ""
}

// keepOnly recomputes every forward node except constants and keep.
func keepOnly(f *ir.Func, keep map[*ir.Node]bool) func(*ir.Node) bool {
	return func(n *ir.Node) bool { return !keep[n] && !isConstant(n.Op) }
}

// keptBy returns the forward nodes of f whose results the backward of g (f
// after rematerialize) still reads from the forward: the plan's kept set.
func keptBy(f *ir.Func, start int, g *ir.Func) map[*ir.Node]bool {
	keep := make(map[*ir.Node]bool)
	// g's forward is a clone of f's: nodes correspond by position.
	pos := make(map[*ir.Node]int, start)
	for i, n := range g.Body[:start] {
		pos[n] = i
	}
	for _, n := range g.Body[start:] {
		for _, a := range n.Args {
			if a.Def != nil {
				if i, ok := pos[a.Def]; ok {
					keep[f.Body[i]] = true
				}
			}
		}
	}
	return keep
}

// knapsackDrop shrinks a kept set that does not fit: kept values are dropped,
// largest first, while that lowers the peak, until the plan fits (a greedy
// knapsack; Checkmate's ILP would be optimal), within maxKnapsackTrials.
func knapsackDrop(f *ir.Func, start int, keep map[*ir.Node]bool, budget int64,
	try func(string, func(*ir.Node) bool) (*ir.Func, RecomputeStats)) (*ir.Func, RecomputeStats) {
	var cands []*ir.Node
	for _, n := range f.Body[:start] {
		if keep[n] && !isConstant(n.Op) {
			cands = append(cands, n)
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return resultBytes(cands[i]) > resultBytes(cands[j]) })
	g, s := try("knapsack", keepOnly(f, keep))
	for i, n := range cands {
		if s.PeakAfter <= budget || i >= maxKnapsackTrials {
			break
		}
		keep[n] = false
		g2, s2 := try("knapsack", keepOnly(f, keep))
		if s2.PeakAfter < s.PeakAfter {
			g, s = g2, s2
		} else {
			keep[n] = true
		}
	}
	return g, s
}

func resultBytes(n *ir.Node) int64 {
	var s int64
	for _, r := range n.Results {
		s += r.Type.Bytes()
	}
	return s
}

// rematerialize rewrites g's backward (the nodes from start on) to read, instead of
// each forward value whose node recompute(index) selects, a copy of it computed
// just before the first backward node that needs it. Copies are made once and
// recursively: a recomputed node's recomputed arguments are copied too, back to
// kept values and parameters. It returns the number of nodes copied and their
// FLOPs.
func rematerialize(g *ir.Func, start int, recompute func(i int) bool) (int, int64) {
	pos := make(map[*ir.Node]int, len(g.Body))
	for i, n := range g.Body {
		pos[n] = i
	}
	body := append([]*ir.Node(nil), g.Body[:start]...)
	copies := make(map[*ir.Value]*ir.Value)
	count := 0
	var flops int64
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
		flops += cost.NodeFLOPs(c)
		return copies[v]
	}
	for _, n := range g.Body[start:] {
		for i, a := range n.Args {
			n.Args[i] = ensure(a)
		}
		body = append(body, n)
	}
	g.Body = body
	return count, flops
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
	for _, r := range residualAdds(f, start) {
		out[r.add] = true
		if r.stream.Def != nil {
			out[r.stream.Def] = true
		}
	}
	return out
}

// residual is a residual add, add(x, f(x)): x is the stream entering the block.
type residual struct {
	add            *ir.Node
	stream, branch *ir.Value
}

// residualAdds lists f's forward residual adds in body order.
func residualAdds(f *ir.Func, start int) []residual {
	var out []residual
	for _, n := range f.Body[:start] {
		if n.Op != ir.OpAdd || !n.Args[0].Type.Equal(n.Args[1].Type) ||
			!n.Result().Type.Equal(n.Args[0].Type) {
			continue
		}
		x, y := n.Args[0], n.Args[1]
		if !dependsOn(y, x) {
			if x, y = y, x; !dependsOn(y, x) {
				continue
			}
		}
		out = append(out, residual{n, x, y})
	}
	return out
}

// layerInputs finds the forward nodes whose results enter each transformer
// layer, and the last layer's output: the values PyTorch's per-layer
// checkpointing keeps. Named layers ("layers.N") are blockBoundaries'. Without
// names, a layer starts at each residual block whose branch holds an attention
// (the attention block, then the MLP block of the same layer); a model without
// attention keeps every residual block's input.
func layerInputs(f *ir.Func, start int) map[*ir.Node]bool {
	for _, n := range f.Body[:start] {
		if layerName.MatchString(n.Name) {
			return blockBoundaries(f, start)
		}
	}
	pos := make(map[*ir.Node]int, start)
	for i, n := range f.Body[:start] {
		pos[n] = i
	}
	rs := residualAdds(f, start)
	out := make(map[*ir.Node]bool)
	for _, r := range rs {
		if r.stream.Def != nil && branchHasAttention(r.branch, r.stream, pos) {
			out[r.stream.Def] = true
		}
	}
	if len(out) == 0 {
		return blockBoundaries(f, start)
	}
	out[rs[len(rs)-1].add] = true
	return out
}

// branchHasAttention reports whether v, computed from stream, depends on an
// attention op computed after stream.
func branchHasAttention(v, stream *ir.Value, pos map[*ir.Node]int) bool {
	from := pos[stream.Def]
	seen := make(map[*ir.Node]bool)
	var walk func(v *ir.Value) bool
	walk = func(v *ir.Value) bool {
		n := v.Def
		if v == stream || n == nil || seen[n] || pos[n] < from {
			return false
		}
		seen[n] = true
		switch n.Op {
		case ir.OpAttention, ir.OpDilatedAttention, ir.OpRingAttention, ir.OpShardedDilatedAttention:
			return true
		}
		for _, a := range n.Args {
			if walk(a) {
				return true
			}
		}
		return false
	}
	return walk(v)
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
