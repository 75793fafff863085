package driver

import (
	"sort"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/targets"
)

// Communication is the traffic of one training step, per GPU: the bytes each GPU
// sends, in total and per op (collective ops by name; sequence-parallel attention
// ops count the k/v blocks they pass around the ring or all-gather). Collectives
// are costed as NCCL's ring algorithms: all_gather (N−1)·in, reduce_scatter and
// all_to_all (N−1)/N·in, all_reduce 2(N−1)/N·in.
type Communication struct {
	BytesPerStepPerGPU int64            `json:"bytes_per_step_per_gpu"`
	ByOp               map[string]int64 `json:"by_op"`
}

// ShardPlan is the plan of a sequence-sharded training (or inference) step on one
// of Ranks GPUs.
type ShardPlan struct {
	Ranks       int    `json:"ranks"`
	Mode        string `json:"mode"`
	Layout      string `json:"layout"`
	SeqLen      int64  `json:"seq_len"`
	LocalSeqLen int64  `json:"local_seq_len"`
	// Memory is the per-GPU memory of the sharded step (same model as the report's).
	Memory        report.Memory `json:"memory"`
	Communication Communication `json:"communication"`
	// Report is the whole compile report of one rank's program.
	Report *report.Report `json:"-"`
	// Func is one rank's program (forward, backward, all-reduced gradients).
	Func *ir.Func `json:"-"`
}

// DefaultShard says whether a compile for t should be sharded by default: on a
// multi-GPU target when the unsharded plan does not fit one GPU. It returns the
// shard options (all the target's GPUs, and the mode that matches the --attention
// flag: dilated for LongNet attention, ring otherwise).
func DefaultShard(unsharded *report.Report, t targets.Target, attention string) (ShardOptions, bool) {
	if t.GPUs <= 1 || unsharded == nil || unsharded.Memory.FitsTarget {
		return ShardOptions{}, false
	}
	_, mode, err := ShardModes(attention)
	if err != nil {
		return ShardOptions{}, false
	}
	return ShardOptions{Ranks: t.GPUs, Mode: mode}, true
}

// PlanSharded compiles a copy of f as Compile does, with shard-sequence for
// so.Ranks ranks before autodiff and the gradients all-reduced after it, and
// returns the per-GPU memory and communication of one step. f is not modified.
func PlanSharded(f *ir.Func, opts CompileOptions, so ShardOptions) (*ShardPlan, error) {
	opts.Ranks, opts.ShardMode = so.Ranks, so.Mode
	res, p, err := compileOne(f.Clone(), opts)
	if err != nil {
		return nil, err
	}
	sres := p.shard
	return &ShardPlan{Ranks: so.Ranks, Mode: sres.Mode, Layout: sres.Layout, SeqLen: sres.SeqLen,
		LocalSeqLen: sres.SeqLen / int64(so.Ranks), Memory: res.Report.Memory,
		Communication: CommunicationOf(res.Func), Report: res.Report, Func: res.Func}, nil
}

// CommunicationOf sums the bytes each GPU sends in one run of a sharded program.
func CommunicationOf(f *ir.Func) Communication {
	c := Communication{ByOp: map[string]int64{}}
	for _, n := range f.Body {
		if b := NodeCommBytes(n); b > 0 {
			c.ByOp[n.Op.String()] += b
			c.BytesPerStepPerGPU += b
		}
	}
	return c
}

// NodeCommBytes is the number of bytes one GPU sends for node n (0 for ops that
// do not communicate).
func NodeCommBytes(n *ir.Node) int64 {
	r := int64(ir.Ranks(n))
	if r <= 1 {
		return 0
	}
	in := func(i int) int64 { return n.Args[i].Type.Bytes() }
	switch n.Op {
	case ir.OpAllGather:
		return (r - 1) * in(0)
	case ir.OpReduceScatter, ir.OpAllToAll:
		return (r - 1) * in(0) / r
	case ir.OpAllReduce:
		return 2 * (r - 1) * in(0) / r
	case ir.OpRingShift:
		return in(0)
	case ir.OpRingAttention:
		return (r - 1) * (in(1) + in(2))
	case ir.OpRingAttentionGrad:
		// k, v for N−1 steps, dk, dv for N (the last brings them home).
		return (r-1)*(in(1)+in(2)) + r*(in(1)+in(2))
	case ir.OpShardedDilatedAttention:
		return (r - 1) * dilatedGathered(n, r)
	case ir.OpShardedDilatedAttentionGrad:
		// The gather again, then the gathered rows' dk, dv back to their owners.
		return 2 * (r - 1) * dilatedGathered(n, r)
	}
	return 0
}

// dilatedGathered is the bytes of k and v one rank contributes to the all-gathers
// of a sharded dilated attention: for each branch whose segments do not tile a
// rank's block, the rows each kv head's offsets select, ≈ L/r per offset.
func dilatedGathered(n *ir.Node, ranks int64) int64 {
	q, k := n.Args[0].Type, n.Args[1].Type
	b, l, hq, hkv, d := k.Shape[0], k.Shape[1], q.Shape[2], k.Shape[2], k.Shape[3]
	segs, dils := n.AttrInts("segments"), n.AttrInts("dilations")
	offsets := n.AttrString("offsets")
	var rows int64
	for i := range segs {
		w, r := segs[i], dils[i]
		if w < l*ranks && l%w == 0 {
			continue // local branch
		}
		for hk := range hkv {
			offs := map[int64]bool{}
			g := hq / hkv
			for h := hk * g; h < (hk+1)*g; h++ {
				offs[ir.HeadOffset(offsets, h, hq, r)] = true
			}
			rows += int64(len(offs)) * ((l + r - 1) / r)
		}
	}
	return 2 * b * rows * d * int64(k.DType.Size())
}

// SortedOps lists the ops of c.ByOp by decreasing bytes, for printing.
func (c Communication) SortedOps() []string {
	var ops []string
	for op := range c.ByOp {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool {
		if c.ByOp[ops[i]] != c.ByOp[ops[j]] {
			return c.ByOp[ops[i]] > c.ByOp[ops[j]]
		}
		return ops[i] < ops[j]
	})
	return ops
}
