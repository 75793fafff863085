package cuda

import (
	"fmt"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Collectives on the GPU. A collective op lowers to a "collective" step that the
// executor runs on its NCCL communicator (runtime/comm/nccl: its own stream,
// ordered against the compute stream by events), with generated copy kernels
// around it where the op's axis is not the outermost: NCCL gathers, scatters
// and exchanges rank-major blocks, so a block along an inner axis is first
// swapped outward ([P,Q,R] → [Q,P,R]) and swapped back afterwards. The layout of
// every op is one collLayout, which a CPU test replays against the CPU
// interpreter's collectives on several ranks.
//
// A collective step only queues the communication; a "wait" step (same Node and
// Args) joins it into the compute stream right before the first step that reads
// its result, or at the end. Between the two, compute overlaps communication
// (a bucket's gradient all-reduce with the rest of the backward); naming the
// collective's buffers in the wait step keeps them alive in the arena plan until
// then, so no kernel reuses their memory while NCCL works on it.
//
// shard_positions needs the rank: it lowers to a kernel with this rank's
// positions in closed form (Options.Rank), which makes the program a
// rank-specific build.

// Collective is one communication step (Step.Kind "collective"), from
// Step.Args[0] to Step.Args[1].
type Collective struct {
	// Op is NCCL's: all_reduce, all_gather, reduce_scatter, all_to_all or
	// send_recv.
	Op string `json:"op"`
	// Reduce is sum, max or min (all_reduce, reduce_scatter).
	Reduce string `json:"reduce,omitempty"`
	// Count is elements: all of them (all_reduce, send_recv), each rank's
	// contribution (all_gather), each rank's result (reduce_scatter), or the block
	// sent to each rank (all_to_all).
	Count int64  `json:"count"`
	DType string `json:"dtype"`
	// Shift: send_recv sends to rank+Shift and receives from rank−Shift (mod N).
	Shift int64 `json:"shift,omitempty"`
}

// swap3 views a buffer as [P, Q, R] and writes it as [Q, P, R].
type swap3 struct{ P, Q, R int64 }

// collLayout is how a collective node runs: an optional swap of its input, the
// NCCL call, an optional swap of the call's result into the node's result.
type collLayout struct {
	pre  *swap3
	coll Collective
	post *swap3
}

// prodOf is the product of dims.
func prodOf(dims []int64) int64 {
	p := int64(1)
	for _, d := range dims {
		p *= d
	}
	return p
}

// layoutOf returns the layout of collective node n over its ranks.
func layoutOf(n *ir.Node) (collLayout, error) {
	x, y := n.Args[0].Type, n.Result().Type
	r := int64(ir.Ranks(n))
	axis := func(name string) int {
		a, _ := ir.AxisIndex(n.AttrInt(name), x.Rank())
		return a
	}
	switch n.Op {
	case ir.OpAllReduce:
		return collLayout{coll: Collective{Op: "all_reduce", Reduce: n.AttrString("op"),
			Count: x.Numel()}}, nil
	case ir.OpRingShift:
		return collLayout{coll: Collective{Op: "send_recv", Count: x.Numel(),
			Shift: ((n.AttrInt("shift") % r) + r) % r}}, nil
	case ir.OpAllGather:
		// x [A, size, inner] from each rank → y [A, N·size, inner].
		a := axis("axis")
		outer, m := prodOf(x.Shape[:a]), prodOf(x.Shape[a:])
		l := collLayout{coll: Collective{Op: "all_gather", Count: x.Numel()}}
		if outer > 1 {
			l.post = &swap3{P: r, Q: outer, R: m}
		}
		return l, nil
	case ir.OpReduceScatter:
		// x [A, N·m, inner] → y [A, m, inner]: block d of every rank sums on rank d.
		a := axis("axis")
		outer, m := prodOf(y.Shape[:a]), prodOf(y.Shape[a:])
		l := collLayout{coll: Collective{Op: "reduce_scatter", Reduce: "sum", Count: y.Numel()}}
		if outer > 1 {
			l.pre = &swap3{P: outer, Q: r, R: m}
		}
		return l, nil
	case ir.OpAllToAll:
		// Block d along split_axis goes to rank d; the blocks received are
		// concatenated along concat_axis in source order.
		sa, ca := axis("split_axis"), axis("concat_axis")
		a := prodOf(x.Shape[:sa])
		blk := x.Numel() / r
		l := collLayout{coll: Collective{Op: "all_to_all", Count: blk}}
		if a > 1 {
			l.pre = &swap3{P: a, Q: r, R: blk / a}
		}
		bshape := append([]int64{}, x.Shape...)
		bshape[sa] /= r
		c := prodOf(bshape[:ca])
		if c > 1 {
			l.post = &swap3{P: r, Q: c, R: blk / c}
		}
		return l, nil
	}
	return collLayout{}, fmt.Errorf("lcc: BUG: %s is not a collective", n.Op)
}

// lowerCollective emits the swaps and the collective step of n.
func lowerCollective(g *gen, n *ir.Node) error {
	l, err := layoutOf(n)
	if err != nil {
		return err
	}
	x, y := n.Args[0], n.Result()
	dt := g.storageOf(y)
	if g.storageOf(x) != dt {
		return fmt.Errorf("input stored as %v, result as %v", g.storageOf(x), dt)
	}
	l.coll.DType = dt.String()
	in, out := g.ids[x], g.ids[y]
	if l.pre != nil {
		t := g.temp(dt, l.pre.Q, l.pre.P, l.pre.R)
		g.swap(dt, *l.pre, in, t)
		in = t
	}
	if l.post != nil {
		out = g.temp(dt, l.post.P, l.post.Q, l.post.R)
	}
	g.prog.Plan.Steps = append(g.prog.Plan.Steps, Step{Kind: "collective", Node: g.node,
		Op: n.Op.String(), Args: []int{in, out}, Coll: &l.coll})
	if l.post != nil {
		g.swap(dt, *l.post, out, g.ids[y])
	}
	return nil
}

// swap emits a copy kernel from buffer src viewed as [P, Q, R] to dst as [Q, P, R].
func (g *gen) swap(dt tensor.DType, s swap3, src, dst int) {
	n := s.P * s.Q * s.R
	it := idxType(n)
	ct := storageC[dt]
	body := fmt.Sprintf("    const %[1]s r = i %% %[2]d, t = i / %[2]d, p = t %% %[3]d, q = t / %[3]d;\n"+
		"    y[i] = x[(p * %[4]d + q) * %[2]d + r];\n", it, s.R, s.P, s.Q)
	g.flatKernel("swap", fmt.Sprintf("swap %v [%d,%d,%d] -> [%d,%d,%d]", dt, s.P, s.Q, s.R, s.Q, s.P, s.R),
		n, []Param{{Name: "y", CType: ct, Out: true}, {Name: "x", CType: ct}}, []int{dst, src}, body)
}

// lowerShardPositions writes this rank's global positions (ir.LayoutPositions,
// expanded over the outer and inner factors) in closed form.
func lowerShardPositions(g *gen, n *ir.Node) error {
	y := n.Result()
	ranks := int64(ir.Ranks(n))
	if g.opts.Rank < 0 || int64(g.opts.Rank) >= ranks {
		return fmt.Errorf("built for rank %d, but the program has %d ranks", g.opts.Rank, ranks)
	}
	total := n.AttrInt("total")
	inner := n.AttrInt("inner")
	layout := n.AttrString("layout")
	chunks := ir.LayoutChunks(layout, total, ranks, int64(g.opts.Rank))
	local := int64(0)
	for _, c := range chunks {
		local += c[1]
	}
	// pos(j) over the chunks in local order, as nested conditionals.
	pos, base := "", int64(0)
	for i, c := range chunks {
		term := fmt.Sprintf("(%d + (j - %d))", c[0], base)
		if i == len(chunks)-1 {
			pos += term
		} else {
			pos += fmt.Sprintf("j < %d ? %s : ", base+c[1], term)
		}
		base += c[1]
	}
	it := idxType(y.Type.Numel())
	body := fmt.Sprintf("    const %[1]s k = i %% %[2]d, t = i / %[2]d, j = t %% %[3]d, o = t / %[3]d;\n"+
		"    const long long p = %[4]s;\n"+
		"    y[i] = %[5]s;\n", it, inner, local, pos,
		store(g.storageOf(y), fmt.Sprintf("(%s)(((long long)o * %d + p) * %d + k)", accC(y.Type.DType), total, inner)))
	g.flatKernel("shard_positions", fmt.Sprintf("shard_positions %v, rank %d of %d, %s", y.Type,
		g.opts.Rank, ranks, layout), y.Type.Numel(), []Param{g.param("y", y, true)}, []int{g.ids[y]}, body)
	return nil
}

// unshardedOp is what a sequence-parallel attention op computes on one rank.
var unshardedOp = map[ir.Op]ir.Op{
	ir.OpRingAttention:               ir.OpAttention,
	ir.OpRingAttentionGrad:           ir.OpAttentionGrad,
	ir.OpShardedDilatedAttention:     ir.OpDilatedAttention,
	ir.OpShardedDilatedAttentionGrad: ir.OpDilatedAttentionGrad,
}

// lowerShardedAttention lowers a sequence-parallel attention op. On more than
// one rank: ring attention's blocks and k/v transfers (ring.go), LongNet's
// sparse all-gather and branch kernels (dilated_shard.go). On one rank the op
// is the attention it is there (ring attention over one rank's zigzag layout is
// causal attention in order; the sharded dilated op is dilated attention), so
// a one-rank sharded step runs as the single-GPU step does.
func lowerShardedAttention(g *gen, n *ir.Node) error {
	base := unshardedOp[n.Op]
	if r := ir.Ranks(n); r != 1 {
		switch n.Op {
		case ir.OpRingAttention:
			return lowerRingAttention(g, n)
		case ir.OpRingAttentionGrad:
			return lowerRingAttentionGrad(g, n)
		case ir.OpShardedDilatedAttention:
			return lowerShardedDilated(g, n)
		}
		return lowerShardedDilatedGrad(g, n)
	}
	m := *n
	m.Op = base
	if base == ir.OpAttentionGrad || base == ir.OpDilatedAttentionGrad {
		return lowerAttentionGrad(g, &m)
	}
	return lowerAttention(g, &m)
}

// deferWaits inserts a wait step for every asynchronous step: after a collective
// or an h2d copy, before the first later step that reads its result (through an
// alias too); after a d2h copy, before the next d2h or h2d step (offload.go).
// Either is at the end of the plan when no such step comes.
func deferWaits(pl *LaunchPlan) {
	owner := func(id int) int {
		if b := pl.Buffers[id]; b.Kind == "alias" {
			return b.AliasOf
		}
		return id
	}
	reads := func(s Step, id int) bool {
		for _, a := range s.Args {
			if owner(a) == id {
				return true
			}
		}
		return false
	}
	waitBefore := map[int][]Step{} // step index → waits to insert before it
	var atEnd []Step
	for i, s := range pl.Steps {
		var joins func(Step) bool
		switch s.Kind {
		case "collective", "h2d":
			out := owner(s.Args[1])
			joins = func(t Step) bool { return reads(t, out) }
		case "d2h":
			joins = func(t Step) bool { return t.Kind == "d2h" || t.Kind == "h2d" }
		default:
			continue
		}
		w := Step{Kind: "wait", Node: s.Node, Op: s.Op, Args: s.Args, Coll: s.Coll}
		at := -1
		for j := i + 1; j < len(pl.Steps) && at < 0; j++ {
			if joins(pl.Steps[j]) {
				at = j
			}
		}
		if at < 0 {
			atEnd = append(atEnd, w)
		} else {
			waitBefore[at] = append(waitBefore[at], w)
		}
	}
	if len(waitBefore) == 0 && len(atEnd) == 0 {
		return
	}
	var steps []Step
	for i, s := range pl.Steps {
		steps = append(steps, waitBefore[i]...)
		steps = append(steps, s)
	}
	pl.Steps = append(steps, atEnd...)
}
