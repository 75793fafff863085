package driver

import (
	"sort"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
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
	// Rank is the rank whose program Func, Program and Hash are (kernels are
	// rank-specific: ring blocks and layout chunks bake in the rank's positions).
	Rank int `json:"rank"`
	// Report is the whole compile report of one rank's program.
	Report *report.Report `json:"-"`
	// Func is one rank's program (forward, backward, all-reduced gradients).
	Func *ir.Func `json:"-"`
	// Program is Func's kernels and launch plan (nil as for Result.Program), and
	// Hash their program hash: what lcc train --ranks builds on rank Rank.
	Program *cudagen.Program `json:"-"`
	Hash    string           `json:"-"`
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
// returns the per-GPU memory and communication of one step, and the program of
// rank opts.Rank (the one CompileStep builds for that rank). f is not modified.
func PlanSharded(f *ir.Func, opts CompileOptions, so ShardOptions) (*ShardPlan, error) {
	opts.Ranks, opts.ShardMode = so.Ranks, so.Mode
	res, p, err := compileOne(f.Clone(), opts)
	if err != nil {
		return nil, err
	}
	sres := p.found.shard
	return &ShardPlan{Ranks: so.Ranks, Mode: sres.Mode, Layout: sres.Layout, SeqLen: sres.SeqLen,
		LocalSeqLen: sres.SeqLen / int64(so.Ranks), Memory: res.Report.Memory,
		Communication: CommunicationOf(res.Func), Rank: opts.Rank, Report: res.Report, Func: res.Func,
		Program: res.Program, Hash: res.Hash}, nil
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
// do not communicate): the communication column of n's op row (ir/comm.go).
func NodeCommBytes(n *ir.Node) int64 { return n.CommBytes() }

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
