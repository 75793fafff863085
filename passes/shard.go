package passes

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lcc-dev/lcc/ir"
)

// shard-sequence: sequence parallelism as a compiler pass (docs/design.md §3).
//
// The pass turns a forward function over whole sequences into one SPMD program
// that each of N ranks runs on its share of every position-indexed tensor. It runs
// before autodiff: the collectives it inserts have VJP rules, so the backward of
// the sharded program is the autodiff of the sharded forward.
//
// Layouts: ring attention uses the zigzag layout (rank r holds chunks r and
// 2N−1−r of 2N, so that causal work is balanced; needs T mod 2N = 0); Ulysses and
// dilated attention use the contiguous layout (needs T mod N = 0).
//
// The rewrite is a forward dataflow over a sequence-axis state per value:
//   - replicated: every rank holds the same whole value (weights, constants);
//   - sharded(axis, outer, inner): the axis holds outer·T·inner elements globally
//     (a sequence axis, possibly merged with neighbours by a reshape) and
//     outer·L·inner locally, in the layout's position order;
//   - partial: the true value is the sum over ranks (a loss's local share).
//
// Ops that never mix positions keep the state (elementwise, matmul with weights,
// norms over features, gathers by sharded indices, reshapes that keep the sequence
// factor whole). Where a replicated value meets a sharded one along the sequence
// axis (RoPE tables, positional embeddings, position-id ranges) the replicated
// value is localized: each rank gathers its own positions (shard_positions),
// pushed back through elementwise ops and gathers to the constant or range at its
// root, so every rank computes only its own positions. Ops that mix positions are
// rewritten: attention to ring_attention (or Ulysses all-to-alls around a local
// attention), dilated attention to sharded_dilated_attention, reductions over the
// sequence to partial sums, mean losses to Σ local loss / all_reduce(count).
// Anything else that would mix positions is an error naming the node.
//
// Objective convention: the sharded program's objective is the sum over ranks of
// each rank's local objective. An output that is partial becomes its all-reduce
// (what the model computes, identical on every rank) plus an output
// "<name>.local" holding this rank's share, which is what autodiff must seed
// (ShardResult.Partial). Parameter gradients are then partial sums over ranks;
// AllReduceGradients sums them.

// ShardLocalSuffix names the per-rank share of a partial output.
const ShardLocalSuffix = ".local"

// Shard modes (the --attention values that shard).
const (
	ShardRing    = "ring"
	ShardUlysses = "ulysses"
	ShardDilated = "dilated"
)

// ShardConfig configures shard-sequence.
type ShardConfig struct {
	// Ranks is the number of ranks N (≥ 1).
	Ranks int
	// Mode is ring (default), ulysses or dilated.
	Mode string
	// SeqLen is the global sequence length T; 0 takes axis 1 of the inputs.
	SeqLen int64
	// Result, when not nil, receives how the program is sharded.
	Result *ShardResult
}

// SeqAxis says which axis of a tensor holds the sequence: Axis has Outer·T·Inner
// elements globally and Outer·(T/N)·Inner on each rank. Axis < 0: not sharded.
type SeqAxis struct {
	Axis         int
	Outer, Inner int64
}

// ShardResult describes a sharded program, for running it and for gathering its
// results.
type ShardResult struct {
	Ranks  int
	Mode   string
	Layout string // ir.LayoutZigzag or ir.LayoutContiguous
	SeqLen int64
	// Inputs and Outputs map the sharded parameters and outputs to their axes.
	Inputs, Outputs map[string]SeqAxis
	// Partial maps an output that is the all-reduce of per-rank partial sums to the
	// output holding this rank's share (the objective to differentiate).
	Partial map[string]string
}

// Positions returns the global positions rank holds along a sharded axis a, in
// local order (len Outer·L·Inner): element i of the local axis is element
// Positions(...)[i] of the global axis.
func (r *ShardResult) Positions(a SeqAxis, rank int) []int64 {
	pos := ir.LayoutPositions(r.Layout, r.SeqLen, int64(r.Ranks), int64(rank))
	out := make([]int64, 0, a.Outer*int64(len(pos))*a.Inner)
	for o := range a.Outer {
		for _, p := range pos {
			for k := range a.Inner {
				out = append(out, (o*r.SeqLen+p)*a.Inner+k)
			}
		}
	}
	return out
}

// LayoutFor returns the sequence layout of a shard mode.
func LayoutFor(mode string) (string, error) {
	switch mode {
	case "", ShardRing:
		return ir.LayoutZigzag, nil
	case ShardUlysses, ShardDilated:
		return ir.LayoutContiguous, nil
	}
	return "", fmt.Errorf("--attention %q: sharding needs ring, ulysses or dilated", mode)
}

// ShardSequence returns the shard-sequence pass.
func ShardSequence(cfg ShardConfig) Pass {
	return Pass{Name: "shard-sequence",
		Doc: "split the sequence over ranks: one SPMD program with ring/Ulysses/dilated attention",
		Run: func(f *ir.Func) error {
			res, err := Shard(f, cfg)
			if err == nil && cfg.Result != nil {
				*cfg.Result = *res
			}
			return err
		}}
}

var _ = RegisterConfigurable(ShardSequence(ShardConfig{Ranks: 8, Mode: ShardRing}),
	func(a *Args) (Pass, error) {
		return ShardSequence(ShardConfig{Ranks: int(a.Int("ranks", 8)),
			Mode: a.String("mode", ShardRing), SeqLen: a.Int("seq-len", 0)}), nil
	})

// state is a value's sequence-axis state.
type state struct {
	SeqAxis
	partial bool
}

var replicated = state{SeqAxis: SeqAxis{Axis: -1}}

func (s state) sharded() bool { return s.Axis >= 0 }

type locKey struct {
	v            *ir.Value
	axis         int
	outer, inner int64
}

type sharder struct {
	cfg    ShardConfig
	n      int64 // ranks
	t, l   int64 // global and local sequence lengths
	layout string
	b      *ir.Builder
	nv     map[*ir.Value]*ir.Value
	st     map[*ir.Value]state
	loc    map[locKey]*ir.Value
	pos    map[[2]int64]*ir.Value
	node   *ir.Node // the node being rewritten, for errors
}

// Shard rewrites f in place into the SPMD program of cfg and describes it.
func Shard(f *ir.Func, cfg ShardConfig) (*ShardResult, error) {
	if cfg.Ranks < 1 {
		return nil, fmt.Errorf("--ranks %d: want at least 1", cfg.Ranks)
	}
	layout, err := LayoutFor(cfg.Mode)
	if err != nil {
		return nil, err
	}
	if cfg.Mode == "" {
		cfg.Mode = ShardRing
	}
	t := cfg.SeqLen
	if t == 0 {
		t = detectSeqLen(f)
	}
	if t <= 0 {
		return nil, errors.New("shard-sequence: no input is [batch, seq, ...]; cannot find the sequence")
	}
	n := int64(cfg.Ranks)
	if _, err := ir.LayoutLocal(layout, t, n); err != nil {
		return nil, layoutError(cfg.Mode, layout, t, n)
	}
	s := &sharder{cfg: cfg, n: n, t: t, l: t / n, layout: layout, nv: map[*ir.Value]*ir.Value{},
		st: map[*ir.Value]state{}, loc: map[locKey]*ir.Value{}, pos: map[[2]int64]*ir.Value{}}
	res := &ShardResult{Ranks: cfg.Ranks, Mode: cfg.Mode, Layout: layout, SeqLen: t,
		Inputs: map[string]SeqAxis{}, Outputs: map[string]SeqAxis{}, Partial: map[string]string{}}
	g := &ir.Func{Name: f.Name}
	for _, p := range f.Params {
		old := p.Value
		nv := &ir.Value{Type: old.Type, Param: p}
		s.st[old] = replicated
		if (p.Role == ir.RoleInput || p.Role == ir.RoleLabel) && old.Type.Rank() >= 2 &&
			old.Type.Shape[1] == t {
			nv.Type = withShape(old.Type, 1, s.l)
			nv.Type.Labels = old.Type.Labels
			s.st[old] = state{SeqAxis: SeqAxis{Axis: 1, Outer: 1, Inner: 1}}
			res.Inputs[p.Name] = SeqAxis{Axis: 1, Outer: 1, Inner: 1}
		}
		p.Value = nv
		s.nv[old] = nv
		g.Params = append(g.Params, p)
	}
	s.b = ir.Edit(g)
	for _, nd := range f.Body {
		s.node = nd
		s.b.SetName(nd.Name)
		if err := s.rewrite(nd); err != nil {
			return nil, fmt.Errorf("shard-sequence: %s: %w", nd.Where(), err)
		}
		if err := s.b.Err(); err != nil {
			return nil, fmt.Errorf("shard-sequence: %s: %w", nd.Where(), err)
		}
	}
	s.b.SetName("lcc.shard")
	for _, o := range f.Outputs {
		v, st := s.nv[o.Value], s.st[o.Value]
		switch {
		case st.partial:
			local := o.Name + ShardLocalSuffix
			g.Outputs = append(g.Outputs, ir.Output{Name: o.Name, Value: s.allReduce(v, "sum")},
				ir.Output{Name: local, Value: v})
			res.Partial[o.Name] = local
		case st.sharded():
			res.Outputs[o.Name] = st.SeqAxis
			g.Outputs = append(g.Outputs, ir.Output{Name: o.Name, Value: v})
		default:
			g.Outputs = append(g.Outputs, ir.Output{Name: o.Name, Value: v})
		}
	}
	if err := s.b.Err(); err != nil {
		return nil, fmt.Errorf("shard-sequence: %w", err)
	}
	f.Params, f.Body, f.Outputs = g.Params, g.Body, g.Outputs
	DeadCode(f)
	return res, ir.Verify(f)
}

// detectSeqLen is dim 1 of the first [batch, seq, ...] input, preferring one whose
// dim carries a label.
func detectSeqLen(f *ir.Func) int64 {
	var first int64
	for _, p := range f.Params {
		t := p.Value.Type
		if (p.Role != ir.RoleInput && p.Role != ir.RoleLabel) || t.Rank() < 2 {
			continue
		}
		if t.Labels != nil && t.Labels[1] != "" {
			return t.Shape[1]
		}
		if first == 0 {
			first = t.Shape[1]
		}
	}
	return first
}

// layoutError says which constraint failed and which lengths and rank counts work.
func layoutError(mode, layout string, t, n int64) error {
	m := n
	if layout == ir.LayoutZigzag {
		m = 2 * n
	}
	lo, hi := t/m*m, (t/m+1)*m
	var ranks []string
	for r := int64(1); r <= min(t, 64); r++ {
		if _, err := ir.LayoutLocal(layout, t, r); err == nil {
			ranks = append(ranks, fmt.Sprint(r))
		}
	}
	what := fmt.Sprintf("divisible by --ranks=%d", n)
	if layout == ir.LayoutZigzag {
		what = fmt.Sprintf("divisible by 2·ranks = %d (zigzag layout: 2N chunks)", m)
	}
	lengths := fmt.Sprint(hi)
	if lo > 0 {
		lengths = fmt.Sprintf("%d or %d", lo, hi)
	}
	return fmt.Errorf("--attention=%s with --ranks=%d needs the sequence length %s; got %d. "+
		"Lengths that work: %s (any multiple of %d); rank counts that work for %d: %s",
		mode, n, what, t, lengths, m, t, strings.Join(ranks, ", "))
}

func withShape(t ir.Type, axis int, size int64) ir.Type {
	s := append([]int64{}, t.Shape...)
	s[axis] = size
	return ir.T(t.DType, s...)
}

// apply emits op on new values and records the results' states.
func (s *sharder) apply(op ir.Op, attrs ir.Attrs, st []state, args ...*ir.Value) []*ir.Value {
	rs := s.b.Apply(op, attrs, args...)
	for i, r := range s.node.Results {
		if i < len(rs) {
			s.nv[r] = rs[i]
			if i < len(st) {
				s.st[r] = st[i]
			} else {
				s.st[r] = st[0]
			}
		}
	}
	return rs
}

func (s *sharder) allReduce(v *ir.Value, op string) *ir.Value {
	return s.b.Apply1(ir.OpAllReduce, ir.A("op", op, "ranks", s.n), v)
}

// global is the element count of a sharded axis over the whole sequence.
func (s *sharder) global(a SeqAxis) int64 { return a.Outer * s.t * a.Inner }

// local is its per-rank count.
func (s *sharder) local(a SeqAxis) int64 { return a.Outer * s.l * a.Inner }

// positions returns this rank's shard_positions for a merged axis.
func (s *sharder) positions(outer, inner int64) *ir.Value {
	k := [2]int64{outer, inner}
	if p := s.pos[k]; p != nil {
		return p
	}
	p := s.b.Apply1(ir.OpShardPositions, ir.A("total", s.t, "ranks", s.n, "layout", s.layout,
		"outer", outer, "inner", inner))
	s.pos[k] = p
	return p
}

// localize returns this rank's part of the replicated (old) value v along axis,
// which holds outer·T·inner elements. Elementwise ops, transposes and gathers are
// localized through, so constants and ranges are cut at their root.
func (s *sharder) localize(v *ir.Value, axis int, outer, inner int64) *ir.Value {
	key := locKey{v, axis, outer, inner}
	if r := s.loc[key]; r != nil {
		return r
	}
	r := s.localizeNew(v, axis, outer, inner)
	s.loc[key] = r
	return r
}

func (s *sharder) localizeNew(v *ir.Value, axis int, outer, inner int64) *ir.Value {
	size := v.Type.Shape[axis]
	d := v.Def
	if d != nil && len(d.Results) == 1 {
		switch {
		case d.Op == ir.OpFull:
			sh := append([]int64{}, v.Type.Shape...)
			sh[axis] = size / s.t * s.l
			return s.b.Apply1(ir.OpFull, d.Attrs.With("shape", sh))
		case d.Op.Info().Elementwise:
			r := v.Type.Rank()
			args := make([]*ir.Value, len(d.Args))
			for i, a := range d.Args {
				p := axis - (r - a.Type.Rank())
				if p >= 0 && a.Type.Shape[p] == size {
					args[i] = s.localize(a, p, outer, inner)
				} else {
					args[i] = s.nv[a]
				}
			}
			return s.b.Apply1(d.Op, d.Attrs.Clone(), args...)
		case d.Op == ir.OpTranspose:
			perm := d.AttrInts("perm")
			return s.b.Apply1(ir.OpTranspose, d.Attrs.Clone(), s.localize(d.Args[0], int(perm[axis]),
				outer, inner))
		case d.Op == ir.OpGather:
			data, idx := d.Args[0], d.Args[1]
			gax, _ := ir.AxisIndex(d.AttrInt("axis"), data.Type.Rank())
			if axis >= gax && axis < gax+idx.Type.Rank() {
				return s.b.Apply1(ir.OpGather, d.Attrs.Clone(), s.nv[data],
					s.localize(idx, axis-gax, outer, inner))
			}
		}
	}
	return s.b.Apply1(ir.OpGather, ir.A("axis", int64(axis)), s.nv[v], s.positions(outer, inner))
}

// materialize turns a partial value into its all-reduce.
func (s *sharder) materialize(a *ir.Value) *ir.Value {
	if s.st[a].partial {
		return s.allReduce(s.nv[a], "sum")
	}
	return s.nv[a]
}

// rewrite emits the sharded form of one node.
func (s *sharder) rewrite(n *ir.Node) error {
	anySharded, anyPartial := false, false
	for _, a := range n.Args {
		anySharded = anySharded || s.st[a].sharded()
		anyPartial = anyPartial || s.st[a].partial
	}
	if !anySharded && !anyPartial {
		args := make([]*ir.Value, len(n.Args))
		for i, a := range n.Args {
			args[i] = s.nv[a]
		}
		s.apply(n.Op, n.Attrs.Clone(), []state{replicated}, args...)
		return nil
	}
	if anyPartial && !anySharded {
		if ok := s.linearOfPartial(n); ok {
			return nil
		}
	}
	if n.Op.Info().Elementwise {
		return s.elementwise(n)
	}
	if rule := shardRules[n.Op]; rule != nil {
		return rule(s, n)
	}
	return fmt.Errorf("%s mixes sequence positions in a way shard-sequence cannot split "+
		"(its argument is sharded along the sequence)", n.Op)
}

// shardRules is the sequence-sharding column of the op table, kept here because
// its rules use the sharder: how an op whose argument is split along the sequence
// runs on one rank's share. Elementwise ops (ir.OpInfo.Elementwise) all follow
// s.elementwise. An op with neither a rule nor a reason in unshardable is a bug
// that TestShardRulesCoverEveryOp reports.
var shardRules = map[ir.Op]func(s *sharder, n *ir.Node) error{
	ir.OpReshape:   (*sharder).reshape,
	ir.OpTranspose: (*sharder).transpose,
	ir.OpExpand:    (*sharder).expand,
	// Ops along another axis keep the sequence axis where it is.
	ir.OpSlice: (*sharder).keepAxis, ir.OpSplit: (*sharder).keepAxis, ir.OpCumSum: (*sharder).keepAxis,
	ir.OpSoftmax: (*sharder).keepAxis, ir.OpLogSoftmax: (*sharder).keepAxis,
	ir.OpTile: (*sharder).keepAxis, ir.OpTrilu: (*sharder).keepAxis,
	ir.OpLayerNorm: (*sharder).keepAxis, ir.OpRMSNorm: (*sharder).keepAxis,
	ir.OpConcat:    (*sharder).concat,
	ir.OpReduceSum: (*sharder).reduce, ir.OpReduceMean: (*sharder).reduce,
	ir.OpReduceMax: (*sharder).reduce, ir.OpReduceMin: (*sharder).reduce,
	ir.OpMatMul:              (*sharder).matmul,
	ir.OpGather:              (*sharder).gather,
	ir.OpAttention:           (*sharder).attention,
	ir.OpDilatedAttention:    (*sharder).dilatedOrDocs,
	ir.OpSoftmaxCrossEntropy: (*sharder).loss, ir.OpNLLLoss: (*sharder).loss,
	ir.OpFusedLinearCrossEntropy: (*sharder).loss,
}

// transpose moves the sequence axis with the permutation.
func (s *sharder) transpose(n *ir.Node) error {
	st := s.st[n.Args[0]]
	perm := n.AttrInts("perm")
	st.Axis = slices.Index(perm, int64(st.Axis))
	s.apply(n.Op, n.Attrs.Clone(), []state{st}, s.materialize(n.Args[0]))
	return nil
}

// expand broadcasts to the local length along the sequence axis.
func (s *sharder) expand(n *ir.Node) error {
	st := s.st[n.Args[0]]
	x := s.materialize(n.Args[0])
	r := n.Results[0].Type.Rank()
	st.Axis += r - n.Args[0].Type.Rank()
	sh := append([]int64{}, n.AttrInts("shape")...)
	sh[st.Axis] = s.local(st.SeqAxis)
	s.apply(n.Op, n.Attrs.With("shape", sh), []state{st}, x)
	return nil
}

// linearOfPartial keeps a partial sum partial through ops linear in it (the other
// arguments replicated): reshapes, transposes, negation, casts, products and
// quotients by replicated values, sums of partials, sum and mean reductions.
func (s *sharder) linearOfPartial(n *ir.Node) bool {
	partial := func(i int) bool { return i < len(n.Args) && s.st[n.Args[i]].partial }
	ok := false
	switch n.Op {
	case ir.OpReshape, ir.OpTranspose, ir.OpNeg, ir.OpCast, ir.OpReduceSum, ir.OpReduceMean,
		ir.OpExpand, ir.OpSlice:
		ok = true
	case ir.OpMul:
		ok = partial(0) != partial(1)
	case ir.OpDiv:
		ok = partial(0) && !partial(1)
	case ir.OpAdd, ir.OpSub:
		ok = partial(0) && partial(1)
	}
	if !ok {
		return false
	}
	args := make([]*ir.Value, len(n.Args))
	for i, a := range n.Args {
		args[i] = s.nv[a]
	}
	s.apply(n.Op, n.Attrs.Clone(), []state{{SeqAxis: SeqAxis{Axis: -1}, partial: true}}, args...)
	return true
}

// elementwise: every sharded argument must agree on the (broadcast) sequence axis;
// replicated arguments that span the sequence there are localized.
func (s *sharder) elementwise(n *ir.Node) error {
	r := n.Results[0].Type.Rank()
	out := replicated
	for _, a := range n.Args {
		st := s.st[a]
		if !st.sharded() {
			continue
		}
		ax := st.SeqAxis
		ax.Axis += r - a.Type.Rank()
		if out.sharded() && out.SeqAxis != ax {
			return fmt.Errorf("arguments are sharded along different axes (%v and %v)", out.SeqAxis, ax)
		}
		out.SeqAxis = ax
	}
	args := make([]*ir.Value, len(n.Args))
	for i, a := range n.Args {
		st := s.st[a]
		p := out.Axis - (r - a.Type.Rank())
		switch {
		case st.sharded():
			args[i] = s.nv[a]
		case p >= 0 && a.Type.Shape[p] == s.global(out.SeqAxis):
			args[i] = s.localize(a, p, out.Outer, out.Inner)
		default:
			args[i] = s.materialize(a)
		}
	}
	s.apply(n.Op, n.Attrs.Clone(), []state{out}, args...)
	return nil
}

// reshape keeps the sequence factor whole: it must land inside one output axis.
func (s *sharder) reshape(n *ir.Node) error {
	in, st := n.Args[0].Type, s.st[n.Args[0]]
	out := n.Results[0].Type
	stride := st.Inner
	for _, d := range in.Shape[st.Axis+1:] {
		stride *= d
	}
	// The sequence index has element stride `stride` in both shapes (row-major
	// order is what reshape keeps); find the output axis whose range contains it.
	ostride := int64(1)
	for k := out.Rank() - 1; k >= 0; k-- {
		span := ostride * out.Shape[k]
		if stride%ostride == 0 && span%(stride*s.t) == 0 {
			ax := SeqAxis{Axis: k, Inner: stride / ostride, Outer: span / (stride * s.t)}
			sh := append([]int64{}, out.Shape...)
			sh[k] = s.local(ax)
			s.apply(n.Op, n.Attrs.With("shape", sh), []state{{SeqAxis: ax}}, s.nv[n.Args[0]])
			return nil
		}
		ostride = span
	}
	return fmt.Errorf("reshape %v → %v splits the sequence dim (%d) across axes", in, out, s.t)
}

// keepAxis handles ops that act on other axes only; the sequence axis must not be
// among those they act on.
func (s *sharder) keepAxis(n *ir.Node) error {
	x := n.Args[0]
	st := s.st[x]
	r := x.Type.Rank()
	var touched []int
	switch n.Op {
	case ir.OpSlice:
		for i, a := range n.AttrInts("axes") {
			ax, _ := ir.AxisIndex(a, r)
			full := n.AttrInts("starts")[i] == 0 && n.AttrInts("ends")[i] == x.Type.Shape[ax] &&
				n.AttrInts("steps")[i] == 1
			if !full {
				touched = append(touched, ax)
			}
		}
	case ir.OpSplit, ir.OpCumSum, ir.OpSoftmax, ir.OpLogSoftmax:
		ax, _ := ir.AxisIndex(n.AttrInt("axis"), r) // the op's default axis from its row
		touched = append(touched, ax)
	case ir.OpTile:
		for i, rep := range n.AttrInts("repeats") {
			if rep != 1 {
				touched = append(touched, i)
			}
		}
	case ir.OpTrilu:
		touched = append(touched, r-2, r-1)
	case ir.OpLayerNorm, ir.OpRMSNorm:
		ax, _ := ir.AxisIndex(n.AttrInt("axis"), r)
		for i := ax; i < r; i++ {
			touched = append(touched, i)
		}
		for _, p := range n.Args[1:] {
			if s.st[p].sharded() {
				return fmt.Errorf("scale or bias is sharded along the sequence")
			}
		}
	}
	if slices.Contains(touched, st.Axis) {
		return fmt.Errorf("%s acts along the sequence axis %d of %v; it cannot run on a rank's share "+
			"(not supported by shard-sequence)", n.Op, st.Axis, x.Type)
	}
	args := []*ir.Value{s.nv[x]}
	for _, a := range n.Args[1:] {
		args = append(args, s.materialize(a))
	}
	if n.Op == ir.OpSlice || n.Op == ir.OpSplit {
		// Full-range slices of the sequence axis keep their bounds in local terms.
		at := n.Attrs.Clone()
		if n.Op == ir.OpSlice {
			ends := append([]int64{}, n.AttrInts("ends")...)
			for i, a := range n.AttrInts("axes") {
				if ax, _ := ir.AxisIndex(a, r); ax == st.Axis {
					ends[i] = s.local(st.SeqAxis)
				}
			}
			at = at.With("ends", ends)
		}
		s.apply(n.Op, at, []state{st}, args...)
		return nil
	}
	s.apply(n.Op, n.Attrs.Clone(), []state{st}, args...)
	return nil
}

// concat along another axis: replicated arguments spanning the sequence are localized.
func (s *sharder) concat(n *ir.Node) error {
	r := n.Results[0].Type.Rank()
	ax, _ := ir.AxisIndex(n.AttrInt("axis"), r)
	out := replicated
	for _, a := range n.Args {
		if st := s.st[a]; st.sharded() {
			if out.sharded() && out.SeqAxis != st.SeqAxis {
				return fmt.Errorf("arguments are sharded along different axes")
			}
			out.SeqAxis = st.SeqAxis
		}
	}
	if out.Axis == ax {
		return fmt.Errorf("concatenation along the sequence axis is not supported by shard-sequence")
	}
	args := make([]*ir.Value, len(n.Args))
	for i, a := range n.Args {
		switch st := s.st[a]; {
		case st.sharded():
			args[i] = s.nv[a]
		case a.Type.Shape[out.Axis] == s.global(out.SeqAxis):
			args[i] = s.localize(a, out.Axis, out.Outer, out.Inner)
		default:
			args[i] = s.materialize(a)
		}
	}
	s.apply(n.Op, n.Attrs.Clone(), []state{out}, args...)
	return nil
}

// reduce: over other axes the state follows the axis; over the sequence a sum or
// mean becomes a partial sum, a max or min an all-reduce.
func (s *sharder) reduce(n *ir.Node) error {
	x, st := n.Args[0], s.st[n.Args[0]]
	r := x.Type.Rank()
	axes := n.AttrInts("axes")
	var idx []int
	if axes == nil {
		for i := range r {
			idx = append(idx, i)
		}
	}
	for _, a := range axes {
		i, _ := ir.AxisIndex(a, r)
		idx = append(idx, i)
	}
	keep := n.AttrBool("keepdims")
	if !slices.Contains(idx, st.Axis) {
		out := st
		if !keep {
			for _, i := range idx {
				if i < st.Axis {
					out.Axis--
				}
			}
		}
		s.apply(n.Op, n.Attrs.Clone(), []state{out}, s.nv[x])
		return nil
	}
	switch n.Op {
	case ir.OpReduceSum:
		s.apply(n.Op, n.Attrs.Clone(), []state{{SeqAxis: SeqAxis{Axis: -1}, partial: true}}, s.nv[x])
	case ir.OpReduceMean:
		count := int64(1)
		for _, i := range idx {
			count *= x.Type.Shape[i]
		}
		sum := s.b.Apply1(ir.OpReduceSum, n.Attrs.Clone(), s.nv[x])
		inv := s.b.Scalar(x.Type.DType, 1/float64(count))
		s.apply(ir.OpMul, nil, []state{{SeqAxis: SeqAxis{Axis: -1}, partial: true}}, sum, inv)
	default:
		y := s.b.Apply1(n.Op, n.Attrs.Clone(), s.nv[x])
		op := "max"
		if n.Op == ir.OpReduceMin {
			op = "min"
		}
		s.nv[n.Results[0]] = s.allReduce(y, op)
		s.st[n.Results[0]] = replicated
	}
	return nil
}

// matmul: the sequence may be a batch dim, the rows of a or the columns of b; when
// it is the contracted dim of both, the product is a partial sum.
func (s *sharder) matmul(n *ir.Node) error {
	a, bv := n.Args[0], n.Args[1]
	sa, sb := s.st[a], s.st[bv]
	ra, rb, r := a.Type.Rank(), bv.Type.Rank(), n.Results[0].Type.Rank()
	if ra < 2 || rb < 2 {
		return fmt.Errorf("matmul of rank-1 operands sharded along the sequence is not supported")
	}
	ta, tb := n.AttrBool("transpose_a"), n.AttrBool("transpose_b")
	mA, kA := ra-2, ra-1
	if ta {
		mA, kA = kA, mA
	}
	kB, nB := rb-2, rb-1
	if tb {
		kB, nB = nB, kB
	}
	role := func(st state, m, k, nn, rank int) (string, int) {
		switch {
		case !st.sharded():
			return "", -1
		case st.Axis == m:
			return "m", r - 2
		case st.Axis == k:
			return "k", -1
		case st.Axis == nn:
			return "n", r - 1
		}
		return "batch", st.Axis + r - rank
	}
	roleA, outA := role(sa, mA, kA, -1, ra)
	roleB, outB := role(sb, -1, kB, nB, rb)
	argA, argB := s.materialize(a), s.materialize(bv)
	// A replicated operand spanning the sequence where the other is sharded is
	// localized: contracted dims and broadcast batch dims.
	fit := func(v *ir.Value, st state, axis int, ax SeqAxis) *ir.Value {
		if axis >= 0 && !st.sharded() && v.Type.Shape[axis] == s.global(ax) {
			return s.localize(v, axis, ax.Outer, ax.Inner)
		}
		return s.nv[v]
	}
	switch {
	case roleA == "k" || roleB == "k":
		if sa.sharded() && sb.sharded() && (roleA != "k" || roleB != "k" || sa.SeqAxis != sb.SeqAxis) {
			return fmt.Errorf("operands are sharded along different dims")
		}
		if roleA == "k" {
			argB = fit(bv, sb, kB, sa.SeqAxis)
		} else {
			argA = fit(a, sa, kA, sb.SeqAxis)
		}
		s.apply(n.Op, n.Attrs.Clone(), []state{{SeqAxis: SeqAxis{Axis: -1}, partial: true}}, argA, argB)
		return nil
	case sa.sharded() && sb.sharded():
		if roleA != "batch" || roleB != "batch" || outA != outB || sa.SeqAxis != sb.SeqAxis {
			return fmt.Errorf("matmul of two operands sharded along the sequence mixes positions " +
				"(an unmatched attention score?)")
		}
		out := sa
		out.Axis = outA
		s.apply(n.Op, n.Attrs.Clone(), []state{out}, argA, argB)
		return nil
	case sa.sharded():
		out := sa
		out.Axis = outA
		if roleA == "batch" {
			argB = fit(bv, sb, outA-(r-rb), sa.SeqAxis)
		}
		s.apply(n.Op, n.Attrs.Clone(), []state{out}, argA, argB)
		return nil
	default:
		out := sb
		out.Axis = outB
		if roleB == "batch" {
			argA = fit(a, sa, outB-(r-ra), sb.SeqAxis)
		}
		s.apply(n.Op, n.Attrs.Clone(), []state{out}, argA, argB)
		return nil
	}
}

// gather: sharded indices (token ids) give a result sharded at their dims; a
// table sharded along another axis keeps it.
func (s *sharder) gather(n *ir.Node) error {
	data, idx := n.Args[0], n.Args[1]
	sd, si := s.st[data], s.st[idx]
	gax, _ := ir.AxisIndex(n.AttrInt("axis"), data.Type.Rank())
	switch {
	case sd.sharded() && si.sharded():
		return fmt.Errorf("gather from a sharded table by sharded indices mixes positions")
	case si.sharded():
		out := si
		out.Axis += gax
		s.apply(n.Op, n.Attrs.Clone(), []state{out}, s.materialize(data), s.nv[idx])
	case sd.Axis == gax:
		return fmt.Errorf("gather along the sequence axis reads other ranks' positions")
	default:
		out := sd
		if sd.Axis > gax {
			out.Axis += idx.Type.Rank() - 1
		}
		s.apply(n.Op, n.Attrs.Clone(), []state{out}, s.nv[data], s.nv[idx])
	}
	return nil
}

// qkv checks that q, k and v are sharded [B, L, H, D] blocks.
func (s *sharder) qkv(n *ir.Node) (q, k, v *ir.Value, err error) {
	for i, a := range n.Args[:3] {
		st := s.st[a]
		if st.Axis != 1 || st.Outer != 1 || st.Inner != 1 || st.partial {
			return nil, nil, nil, fmt.Errorf("argument %d of attention is not sharded along its "+
				"sequence axis 1 (state %+v)", i, st)
		}
	}
	return s.nv[n.Args[0]], s.nv[n.Args[1]], s.nv[n.Args[2]], nil
}

var seqOut = []state{{SeqAxis: SeqAxis{Axis: 1, Outer: 1, Inner: 1}},
	{SeqAxis: SeqAxis{Axis: 2, Outer: 1, Inner: 1}}}

// attention → ring_attention, or Ulysses: all-to-all to whole sequences with H/N
// heads, local attention, all-to-all back. A non-causal attention to replicated
// keys stays local. A sliding window (ir.Window) shards with Ulysses only, which
// keeps the op and its attributes on whole sequences: ring attention has no window.
func (s *sharder) attention(n *ir.Node) error {
	switch w := ir.Window(n); {
	case w > 0 && ir.HasDocs(n):
		return fmt.Errorf("sliding-window attention (window=%d) over packed documents does not shard "+
			"yet: ring attention has no window and Ulysses no documents; use --ranks=1", w)
	case w > 0 && s.cfg.Mode != ShardUlysses:
		return fmt.Errorf("sliding-window attention (window=%d) does not shard with --attention=%s: "+
			"ring attention has no window; use --attention=ulysses", w, s.cfg.Mode)
	}
	if docs := ir.DocStarts(n); docs != nil {
		return s.docsAttention(n, docs)
	}
	if len(n.Args) == 4 {
		return fmt.Errorf("attention with an explicit mask cannot be sharded (only causal or no mask)")
	}
	if s.st[n.Args[0]].sharded() && !s.st[n.Args[1]].sharded() && !s.st[n.Args[2]].sharded() &&
		!n.AttrBool("causal") {
		s.apply(n.Op, n.Attrs.Clone(), seqOut, s.nv[n.Args[0]], s.materialize(n.Args[1]),
			s.materialize(n.Args[2]))
		return nil
	}
	q, k, v, err := s.qkv(n)
	if err != nil {
		return err
	}
	if s.cfg.Mode != ShardUlysses {
		at := n.Attrs.With("ranks", s.n).With("layout", s.layout)
		s.apply(ir.OpRingAttention, at, seqOut, q, k, v)
		return nil
	}
	hq, hkv := q.Type.Shape[2], k.Type.Shape[2]
	if hq%s.n != 0 {
		var ok []string
		for r := int64(1); r <= hq; r++ {
			if hq%r == 0 && s.t%r == 0 {
				ok = append(ok, fmt.Sprint(r))
			}
		}
		return fmt.Errorf("--attention=ulysses needs the %d query heads divisible by --ranks=%d; "+
			"rank counts that work: %s (or use --attention=ring)", hq, s.n, strings.Join(ok, ", "))
	}
	if hkv%s.n != 0 {
		// Replicate the kv heads to one per query head, so they split like q's.
		g := hq / hkv
		rep := func(x *ir.Value) *ir.Value {
			sh := x.Type.Shape
			x = s.b.Reshape(x, sh[0], sh[1], hkv, 1, sh[3])
			x = s.b.Expand(x, sh[0], sh[1], hkv, g, sh[3])
			return s.b.Reshape(x, sh[0], sh[1], hq, sh[3])
		}
		k, v = rep(k), rep(v)
	}
	a2a := func(x *ir.Value, split, concat int64) *ir.Value {
		return s.b.Apply1(ir.OpAllToAll, ir.A("split_axis", split, "concat_axis", concat, "ranks", s.n), x)
	}
	rs := s.b.Apply(ir.OpAttention, n.Attrs.Clone(), a2a(q, 2, 1), a2a(k, 2, 1), a2a(v, 2, 1))
	o, lse := a2a(rs[0], 1, 2), a2a(rs[1], 2, 1)
	s.nv[n.Results[0]], s.nv[n.Results[1]] = o, lse
	s.st[n.Results[0]], s.st[n.Results[1]] = seqOut[0], seqOut[1]
	return nil
}

// dilated → sharded_dilated_attention over the contiguous layout.
func (s *sharder) dilated(n *ir.Node) error {
	if s.layout != ir.LayoutContiguous {
		return fmt.Errorf("dilated attention shards over the contiguous layout: use --attention=dilated, "+
			"not --attention=%s", s.cfg.Mode)
	}
	q, k, v, err := s.qkv(n)
	if err != nil {
		return err
	}
	s.apply(ir.OpShardedDilatedAttention, n.Attrs.With("ranks", s.n), seqOut, q, k, v)
	return nil
}

// loss: rows sharded; sum and mean reductions become this rank's partial sum
// (the mean divided by the global count of rows not ignored).
func (s *sharder) loss(n *ir.Node) error {
	rowsArg, labelsArg := 0, 1
	if n.Op == ir.OpFusedLinearCrossEntropy {
		labelsArg = 2
		if s.st[n.Args[1]].sharded() {
			return fmt.Errorf("the projection weight is sharded along the sequence")
		}
	}
	x, lab := n.Args[rowsArg], n.Args[labelsArg]
	sx, sl := s.st[x], s.st[lab]
	if sx.Axis != 0 || (sl.sharded() && sl.SeqAxis != sx.SeqAxis) {
		return fmt.Errorf("loss rows and labels are not sharded alike along rows (%+v, %+v)", sx, sl)
	}
	args := make([]*ir.Value, len(n.Args))
	for i, a := range n.Args {
		args[i] = s.materialize(a)
	}
	if !sl.sharded() {
		args[labelsArg] = s.localize(lab, 0, sx.Outer, sx.Inner)
	}
	red := n.AttrString("reduction")
	if red == "none" {
		s.apply(n.Op, n.Attrs.Clone(), []state{{SeqAxis: sx.SeqAxis}}, args...)
		return nil
	}
	partial := []state{{SeqAxis: SeqAxis{Axis: -1}, partial: true}}
	sum := s.b.Apply1(n.Op, n.Attrs.With("reduction", "sum"), args...)
	if red == "sum" {
		s.nv[n.Results[0]], s.st[n.Results[0]] = sum, partial[0]
		return nil
	}
	dt := n.Results[0].Type.DType
	var count *ir.Value
	if _, ok := n.Attrs.Get("ignore_index"); ok {
		labels := args[labelsArg]
		ignore := s.b.Scalar(labels.Type.DType, float64(n.AttrInt("ignore_index")))
		kept := s.b.Cast(s.b.Unary(ir.OpNot, s.b.Apply1(ir.OpEq, nil, labels, ignore)), dt)
		count = s.allReduce(s.b.ReduceSum(kept, false), "sum")
	} else {
		count = s.b.Scalar(dt, float64(s.global(sx.SeqAxis)))
	}
	s.apply(ir.OpDiv, nil, partial, sum, count)
	return nil
}

// docsAttention shards attention over packed documents as ring attention whose query
// blocks carry their doc starts: the starts are global positions, sharded with the
// sequence like the tokens, so every block's mask (causal and key ≥ its query's
// document start) is decided on the rank that holds the queries, and no document ids
// travel with k and v.
func (s *sharder) docsAttention(n *ir.Node, docs *ir.Value) error {
	if s.cfg.Mode == ShardUlysses {
		return fmt.Errorf("packed documents (--doc-sep) shard with --attention=ring, not ulysses")
	}
	if st := s.st[docs]; st.Axis != 1 || st.Outer != 1 || st.Inner != 1 || st.partial {
		return fmt.Errorf("the doc starts are not sharded along the sequence (state %+v)", st)
	}
	q, k, v, err := s.qkv(n)
	if err != nil {
		return err
	}
	at := n.Attrs.With("ranks", s.n).With("layout", s.layout)
	s.apply(ir.OpRingAttention, at, seqOut, q, k, v, s.nv[docs])
	return nil
}

// dilatedOrDocs is dilated, which packed documents do not shard yet.
func (s *sharder) dilatedOrDocs(n *ir.Node) error {
	if ir.HasDocs(n) {
		return fmt.Errorf("dilated attention over packed documents (--doc-sep) is not sharded yet; " +
			"use --ranks=1 or --attention=ring")
	}
	return s.dilated(n)
}
