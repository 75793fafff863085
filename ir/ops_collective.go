package ir

import (
	"fmt"

	"github.com/lcc-dev/lcc/tensor"
)

// Collective ops and sequence-parallel attention (docs/design.md §3).
//
// A sharded function is one SPMD program: every rank runs the same body on its
// own part of the data, and collectives are the only places where ranks meet. The
// rank itself never appears in the IR except through shard_positions and the
// kernels of the ops below, which ask their communicator.
//
//	%y = all_gather(%x) {axis=1, ranks=4}              every rank's x, concatenated in rank order
//	%y = reduce_scatter(%x) {axis=1, ranks=4}          Σ_ranks x, rank r keeps block r of axis
//	%y = all_reduce(%x) {op="sum", ranks=4}            Σ_ranks x (op: sum, max, min)
//	%y = all_to_all(%x) {concat_axis=1, ranks=4, split_axis=2}
//	                                                    block j of split_axis goes to rank j;
//	                                                    received blocks concatenate in rank order
//	%y = ring_shift(%x) {ranks=4, shift=1}             send x to rank r+shift, return rank r−shift's
//	%p = shard_positions() {inner=1, layout="zigzag", outer=1, ranks=4, total=64} : i64[16]
//	                                                    the global positions this rank holds
//
// Gradients assume the objective of a sharded program is the sum over ranks of
// each rank's local objective (a loss sharded into per-rank partial sums, or
// Σ out ⊙ dy over each rank's block of out). Under that convention a replicated
// value's cotangent on one rank is a partial sum, and:
//
//	all_gather ↔ reduce_scatter (same axis), all_reduce(sum) ↔ all_reduce(sum),
//	all_to_all ↔ all_to_all with split_axis and concat_axis swapped,
//	ring_shift(shift) ↔ ring_shift(−shift).
//
// Sequence layouts: "contiguous" gives rank r positions [r·L, (r+1)·L) of a sequence
// of T = N·L; "zigzag" cuts T into 2N chunks of c = T/2N and gives rank r chunks r and
// 2N−1−r, so that under causal attention every rank does the same work (Brandon et
// al., "Striped Attention", arXiv 2311.09431, and the zigzag of ring-flash-attention).
// shard_positions returns them, expanded to an axis of outer·T·inner elements
// (a sequence axis merged with outer and inner dims by a reshape): element
// (o, t, i) of the local axis holds (o·T + pos(t))·inner + i.
//
// Sequence-parallel attention ops are SPMD: their kernels run the communication.
//
//	%o, %lse = ring_attention(%q, %k, %v) {causal, layout="zigzag", ranks=4, scale=0.25}
//
// is attention over the whole sequence for this rank's queries: q, k, v are the
// rank's [B, L, H, D] blocks in the layout; k and v travel the ring for N steps and
// each step's block (o_b, lse_b) is merged by the overflow-free rule
// o ← o − σ(lse_b − lse)·(o − o_b), lse ← lse − log σ(lse − lse_b) (Liu et al., "Ring
// Attention with Blockwise Transformers", arXiv 2310.01889). Its gradient op
//
//	%dq, %dk, %dv = ring_attention_grad(%q, %k, %v, %o, %lse, %do) {…same attrs}
//
// runs the same ring with the merged o and lse, while dk and dv travel with k and v
// and take one more step to come home.
//
//	%o, %lse = sharded_dilated_attention(%q, %k, %v) {causal, dilations, offsets, ranks,
//	               scale, segments}
//
// is dilated_attention over the contiguous layout (LongNet §3.1, arXiv 2307.02486):
// a branch whose segments tile a rank's block (L mod w = 0) runs locally; any other
// branch sparsifies k and v to the rows its heads select, all-gathers them, and
// attends with the local queries. sharded_dilated_attention_grad reduce-scatters
// the gathered rows' dk and dv back to their owners.

// Sequence layouts of shard_positions and ring_attention.
const (
	LayoutContiguous = "contiguous"
	LayoutZigzag     = "zigzag"
)

var (
	ranksAttr = AttrSpec{"ranks", AttrInt}
	ringAttrs = []AttrSpec{{"causal", AttrBool}, {"scale", AttrFloat}, ranksAttr, {"layout", AttrString},
		{"docs", AttrBool}}
	shardDilAtt = []AttrSpec{{"segments", AttrInts}, {"dilations", AttrInts}, {"offsets", AttrString},
		{"causal", AttrBool}, {"scale", AttrFloat}, ranksAttr}
	ringDefaults = A("layout", LayoutZigzag)
)

func init() {
	def(OpAllGather, OpInfo{Name: "all_gather", MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{"axis", AttrInt}, ranksAttr}, Infer: inferAllGather})
	def(OpReduceScatter, OpInfo{Name: "reduce_scatter", MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{"axis", AttrInt}, ranksAttr}, Infer: inferReduceScatter})
	def(OpAllReduce, OpInfo{Name: "all_reduce", MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{"op", AttrString}, ranksAttr}, Defaults: A("op", "sum"),
		Infer: inferAllReduce})
	def(OpAllToAll, OpInfo{Name: "all_to_all", MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{"split_axis", AttrInt}, {"concat_axis", AttrInt}, ranksAttr},
		Infer: inferAllToAll})
	def(OpRingShift, OpInfo{Name: "ring_shift", MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{"shift", AttrInt}, ranksAttr}, Defaults: A("shift", 1),
		Infer: inferRingShift})
	def(OpShardPositions, OpInfo{Name: "shard_positions",
		Attrs: []AttrSpec{{"total", AttrInt}, ranksAttr, {"layout", AttrString}, {"outer", AttrInt},
			{"inner", AttrInt}}, Defaults: A("layout", LayoutContiguous, "outer", 1, "inner", 1),
		Infer: inferShardPositions, NoGrad: true})
	def(OpRingAttention, OpInfo{Name: "ring_attention", MinArgs: 3, MaxArgs: 4, Attrs: ringAttrs,
		Defaults: ringDefaults, Infer: inferRingAttention})
	def(OpRingAttentionGrad, OpInfo{Name: "ring_attention_grad", MinArgs: 6, MaxArgs: 7,
		Attrs: ringAttrs, Defaults: ringDefaults, Infer: inferRingAttentionGrad, NoGrad: true})
	def(OpShardedDilatedAttention, OpInfo{Name: "sharded_dilated_attention", MinArgs: 3, MaxArgs: 3,
		Attrs: shardDilAtt, Defaults: dilatedDefs, Infer: inferShardedDilated})
	def(OpShardedDilatedAttentionGrad, OpInfo{Name: "sharded_dilated_attention_grad", MinArgs: 6,
		MaxArgs: 6, Attrs: shardDilAtt, Defaults: dilatedDefs, Infer: inferShardedDilatedGrad,
		NoGrad: true})
}

// Ranks returns the ranks attribute of a node (0 when absent or not a collective).
func Ranks(n *Node) int {
	v, _ := n.Attrs.Get("ranks") // any node: 0 for ops that are not collectives
	r, _ := v.(int64)
	return int(r)
}

func checkRanks(n *Node) (int64, error) {
	r := n.AttrInt("ranks")
	if r < 1 {
		return 0, fmt.Errorf("needs ranks >= 1, got %d", r)
	}
	return r, nil
}

func inferAllGather(n *Node) ([]Type, error) {
	r, err := checkRanks(n)
	if err != nil {
		return nil, err
	}
	x := n.Args[0].Type
	ax, err := AxisIndex(n.AttrInt("axis"), x.Rank())
	if err != nil {
		return nil, err
	}
	shape := append([]int64{}, x.Shape...)
	shape[ax] *= r
	if _, err := ShapeNumel(shape); err != nil {
		return nil, err
	}
	return one(T(x.DType, shape...)), nil
}

func inferReduceScatter(n *Node) ([]Type, error) {
	r, err := checkRanks(n)
	if err != nil {
		return nil, err
	}
	x := n.Args[0].Type
	ax, err := AxisIndex(n.AttrInt("axis"), x.Rank())
	if err != nil {
		return nil, err
	}
	if x.Shape[ax]%r != 0 {
		return nil, fmt.Errorf("axis %d of %v is not divisible by %d ranks", ax, x, r)
	}
	shape := append([]int64{}, x.Shape...)
	shape[ax] /= r
	return one(T(x.DType, shape...)), nil
}

func inferAllReduce(n *Node) ([]Type, error) {
	if _, err := checkRanks(n); err != nil {
		return nil, err
	}
	switch o := n.AttrString("op"); o {
	case "sum", "max", "min":
	default:
		return nil, fmt.Errorf("op %q: want sum, max or min", o)
	}
	return inferSame(n)
}

func inferAllToAll(n *Node) ([]Type, error) {
	r, err := checkRanks(n)
	if err != nil {
		return nil, err
	}
	x := n.Args[0].Type
	sa, err := AxisIndex(n.AttrInt("split_axis"), x.Rank())
	if err != nil {
		return nil, err
	}
	ca, err := AxisIndex(n.AttrInt("concat_axis"), x.Rank())
	if err != nil {
		return nil, err
	}
	if x.Shape[sa]%r != 0 {
		return nil, fmt.Errorf("split axis %d of %v is not divisible by %d ranks", sa, x, r)
	}
	shape := append([]int64{}, x.Shape...)
	shape[sa] /= r
	shape[ca] *= r
	return one(T(x.DType, shape...)), nil
}

func inferRingShift(n *Node) ([]Type, error) {
	if _, err := checkRanks(n); err != nil {
		return nil, err
	}
	return inferSame(n)
}

// LayoutLocal checks that a sequence of total positions splits over ranks in
// layout and returns each rank's share.
func LayoutLocal(layout string, total, ranks int64) (int64, error) {
	switch layout {
	case LayoutContiguous:
		if ranks < 1 || total%ranks != 0 {
			return 0, fmt.Errorf("contiguous layout: sequence length %d is not divisible by %d ranks",
				total, ranks)
		}
	case LayoutZigzag:
		if ranks < 1 || total%(2*ranks) != 0 {
			return 0, fmt.Errorf("zigzag layout: sequence length %d is not divisible by 2·ranks = %d",
				total, 2*ranks)
		}
	default:
		return 0, fmt.Errorf("layout %q: want contiguous or zigzag", layout)
	}
	return total / ranks, nil
}

// LayoutChunks returns the global [start, start+len) chunks that rank holds, in
// local order.
func LayoutChunks(layout string, total, ranks, rank int64) [][2]int64 {
	if layout == LayoutZigzag {
		c := total / (2 * ranks)
		return [][2]int64{{rank * c, c}, {(2*ranks - 1 - rank) * c, c}}
	}
	l := total / ranks
	return [][2]int64{{rank * l, l}}
}

// LayoutPositions lists the global positions rank holds, in local order.
func LayoutPositions(layout string, total, ranks, rank int64) []int64 {
	var out []int64
	for _, c := range LayoutChunks(layout, total, ranks, rank) {
		for p := c[0]; p < c[0]+c[1]; p++ {
			out = append(out, p)
		}
	}
	return out
}

func inferShardPositions(n *Node) ([]Type, error) {
	r, err := checkRanks(n)
	if err != nil {
		return nil, err
	}
	total := n.AttrInt("total")
	l, err := LayoutLocal(n.AttrString("layout"), total, r)
	if err != nil {
		return nil, err
	}
	outer, inner := n.AttrInt("outer"), n.AttrInt("inner")
	if outer < 1 || inner < 1 {
		return nil, fmt.Errorf("outer %d and inner %d must be >= 1", outer, inner)
	}
	return one(T(tensor.I64, outer*l*inner)), nil
}

func inferRingAttention(n *Node) ([]Type, error) {
	r, err := checkRanks(n)
	if err != nil {
		return nil, err
	}
	ts, err := attentionTypes(n)
	if err != nil {
		return nil, err
	}
	q, k := n.Args[0].Type, n.Args[1].Type
	if q.Shape[1] != k.Shape[1] {
		return nil, fmt.Errorf("ring attention is self-attention: q has %d positions, k %d",
			q.Shape[1], k.Shape[1])
	}
	if _, err := LayoutLocal(n.AttrString("layout"), q.Shape[1]*r, r); err != nil {
		return nil, err
	}
	if len(n.Args) == 4 && !HasDocs(n) {
		return nil, fmt.Errorf("a fourth operand is doc starts and needs docs")
	}
	return ts, checkDocs(n, 4)
}

func inferRingAttentionGrad(n *Node) ([]Type, error) {
	if _, err := inferRingAttention(&Node{Op: OpRingAttention, Args: ringFwdArgs(n), Attrs: n.Attrs}); err != nil {
		return nil, err
	}
	return inferAttentionGrad(n)
}

// ringFwdArgs is the forward's operands of a ring_attention_grad: q, k, v and the doc
// starts when it has them.
func ringFwdArgs(n *Node) []*Value {
	if HasDocs(n) && len(n.Args) == 7 {
		return []*Value{n.Args[0], n.Args[1], n.Args[2], n.Args[6]}
	}
	return n.Args[:3]
}

func inferShardedDilated(n *Node) ([]Type, error) {
	if _, err := checkRanks(n); err != nil {
		return nil, err
	}
	ts, err := inferDilatedAttention(n)
	if err != nil {
		return nil, err
	}
	if q, k := n.Args[0].Type, n.Args[1].Type; q.Shape[1] != k.Shape[1] {
		return nil, fmt.Errorf("dilated attention is self-attention: q has %d positions, k %d",
			q.Shape[1], k.Shape[1])
	}
	return ts, nil
}

func inferShardedDilatedGrad(n *Node) ([]Type, error) {
	if _, err := inferShardedDilated(&Node{Op: OpShardedDilatedAttention, Args: n.Args[:3],
		Attrs: n.Attrs}); err != nil {
		return nil, err
	}
	return inferAttentionGrad(n)
}

// all_gather(axis): the cotangents of the gathered copies are partial sums, so
// dx = reduce_scatter(dy) along the same axis.
func gradAllGather(b *Builder, n *Node, dys []*Value) []*Value {
	return []*Value{b.Apply1(OpReduceScatter, n.Attrs.Clone(), dys[0])}
}

// reduce_scatter(axis): dx = all_gather(dy) along the same axis.
func gradReduceScatter(b *Builder, n *Node, dys []*Value) []*Value {
	return []*Value{b.Apply1(OpAllGather, n.Attrs.Clone(), dys[0])}
}

// all_reduce(sum): every rank's x feeds every rank's y, so dx = all_reduce(dy).
// max and min have no gradient here (no pass differentiates through them).
func gradAllReduce(b *Builder, n *Node, dys []*Value) []*Value {
	if o := n.AttrString("op"); o != "sum" {
		b.Fail(fmt.Errorf("%s: all_reduce(%s) has no gradient", n.Where(), o))
		return []*Value{poison}
	}
	return []*Value{b.Apply1(OpAllReduce, n.Attrs.Clone(), dys[0])}
}

// all_to_all is a permutation of blocks across ranks; its inverse swaps the axes.
func gradAllToAll(b *Builder, n *Node, dys []*Value) []*Value {
	at := A("split_axis", n.AttrInt("concat_axis"), "concat_axis", n.AttrInt("split_axis"),
		"ranks", n.AttrInt("ranks"))
	return []*Value{b.Apply1(OpAllToAll, at, dys[0])}
}

// ring_shift(s): dx = ring_shift(dy) by −s.
func gradRingShift(b *Builder, n *Node, dys []*Value) []*Value {
	at := n.Attrs.With("shift", -n.AttrInt("shift"))
	return []*Value{b.Apply1(OpRingShift, at, dys[0])}
}

// ring_attention: ring_attention_grad with the merged o and lse; a cotangent of
// lse folds in exactly as for attention (see attentionGrad).
func gradRingAttention(b *Builder, n *Node, dys []*Value) []*Value {
	d := b.attentionGrad(OpRingAttentionGrad, n, dys, DocStarts(n))
	return append(d, make([]*Value, len(n.Args)-3)...)
}

// sharded_dilated_attention: its gradient op, exact including the merge weights.
func gradShardedDilated(b *Builder, n *Node, dys []*Value) []*Value {
	return b.attentionGrad(OpShardedDilatedAttentionGrad, n, dys, nil)
}
