package passes

import (
	"fmt"
	"sort"
	"strings"

	"github.com/lcc-dev/lcc/ir"
)

// all-reduce-gradients: the gradient all-reduce of a sharded (or data-parallel)
// step, bucketed as PyTorch's DistributedDataParallel buckets it (Li et al.,
// "PyTorch Distributed", VLDB 2020, §3.2.3).
//
// In a sharded program each rank's weight gradient is its share of the sum over
// ranks. Instead of one all_reduce per gradient (a collective launch and a
// latency per parameter), gradients are packed, in the order the backward
// produces them, into buckets of at most BucketBytes per dtype: each bucket is
// flattened, concatenated, all-reduced once and split back. Each bucket's
// all_reduce is placed right after the node that completes it, and its split at
// the end of the step, so that an executor with a communication stream overlaps
// it with the rest of the backward (the last layers' gradients are ready first).
//
// Bucketing never changes a bit: every element is summed over the ranks in rank
// order whether it travels alone or in a bucket.

// DefaultGradientBucketBytes is the bucket cap (DDP's bucket_cap_mb = 25).
const DefaultGradientBucketBytes = 25 << 20

// AllReduceGradientsConfig configures all-reduce-gradients.
type AllReduceGradientsConfig struct {
	Ranks int
	// Prefix marks gradient outputs: "<Prefix><weight>".
	Prefix string
	// BucketBytes caps a bucket; 0 all-reduces every gradient on its own. A
	// gradient larger than the cap travels alone.
	BucketBytes int64
}

// AllReduceGradientsPass returns the all-reduce-gradients pass of a program
// sharded over ranks, with the default buckets.
func AllReduceGradientsPass(ranks int, prefix string) Pass {
	return AllReduceGradientsWithPass(AllReduceGradientsConfig{Ranks: ranks, Prefix: prefix,
		BucketBytes: DefaultGradientBucketBytes})
}

// AllReduceGradientsWithPass returns the all-reduce-gradients pass of cfg.
func AllReduceGradientsWithPass(cfg AllReduceGradientsConfig) Pass {
	config := fmt.Sprintf("ranks=%d", cfg.Ranks)
	if cfg.BucketBytes != DefaultGradientBucketBytes {
		config += fmt.Sprintf(" bucket=%d", cfg.BucketBytes)
	}
	return Pass{Name: "all-reduce-gradients", Config: config,
		Doc: "sum each rank's share of the weight gradients over the ranks, in buckets (sharded steps)",
		Run: func(f *ir.Func) error { return AllReduceGradientsWith(f, cfg) }}
}

var _ = RegisterConfigurable(AllReduceGradientsPass(8, "grad."), func(a *Args) (Pass, error) {
	return AllReduceGradientsWithPass(AllReduceGradientsConfig{Ranks: int(a.Int("ranks", 8)),
		Prefix: a.String("prefix", "grad."), BucketBytes: a.Int("bucket", DefaultGradientBucketBytes)}), nil
})

// AllReduceGradients sums every gradient output "<prefix><weight>" over ranks, in
// buckets of DefaultGradientBucketBytes. Run it after autodiff of a program that
// shard-sequence produced.
func AllReduceGradients(f *ir.Func, ranks int, prefix string) error {
	return AllReduceGradientsWith(f, AllReduceGradientsConfig{Ranks: ranks, Prefix: prefix,
		BucketBytes: DefaultGradientBucketBytes})
}

// gradOut is one gradient output to reduce.
type gradOut struct {
	out int // index in f.Outputs
	v   *ir.Value
	def int // index in f.Body of the node defining v (−1: a parameter)
}

// AllReduceGradientsWith is AllReduceGradients configured by cfg.
func AllReduceGradientsWith(f *ir.Func, cfg AllReduceGradientsConfig) error {
	if cfg.BucketBytes < 0 {
		return fmt.Errorf("all-reduce-gradients: bucket %d bytes: want >= 0", cfg.BucketBytes)
	}
	defs := map[*ir.Value]int{}
	for i, n := range f.Body {
		for _, r := range n.Results {
			defs[r] = i
		}
	}
	var grads []gradOut
	for i, o := range f.Outputs {
		name, ok := strings.CutPrefix(o.Name, cfg.Prefix)
		if !ok {
			continue
		}
		if p := f.Param(name); p == nil || p.Role != ir.RoleWeight {
			continue
		}
		d, ok := defs[o.Value]
		if !ok {
			d = -1
		}
		grads = append(grads, gradOut{out: i, v: o.Value, def: d})
	}
	// The order the backward completes them in (ties: output order).
	sort.SliceStable(grads, func(i, j int) bool { return grads[i].def < grads[j].def })
	buckets := bucketGrads(grads, cfg.BucketBytes)
	// Insert from the last bucket back, so that earlier insertion points hold.
	b := ir.Edit(f)
	b.SetName("lcc.shard.grad")
	attrs := ir.A("op", "sum", "ranks", int64(cfg.Ranks))
	sums := make([]*ir.Value, len(buckets)) // each bucket's all_reduce
	for k := len(buckets) - 1; k >= 0; k-- {
		bk := buckets[k]
		b.SetInsertPoint(bk[len(bk)-1].def + 1)
		if len(bk) == 1 {
			f.Outputs[bk[0].out].Value = b.Apply1(ir.OpAllReduce, attrs, bk[0].v)
			continue
		}
		flat := make([]*ir.Value, len(bk))
		sizes := make([]int64, len(bk))
		for i, g := range bk {
			sizes[i] = g.v.Type.Numel()
			flat[i] = g.v
			if g.v.Type.Rank() != 1 {
				flat[i] = b.Reshape(g.v, sizes[i])
			}
		}
		sums[k] = b.Apply1(ir.OpAllReduce, attrs, b.Apply1(ir.OpConcat, ir.A("axis", int64(0)), flat...))
	}
	// Unpack at the end of the step: nothing reads a bucket before then, so an
	// executor need not wait for its all_reduce until the backward is done.
	b.SetInsertPoint(len(f.Body))
	for k, bk := range buckets {
		if sums[k] == nil {
			continue
		}
		sizes := make([]int64, len(bk))
		for i, g := range bk {
			sizes[i] = g.v.Type.Numel()
		}
		parts := b.Apply(ir.OpSplit, ir.A("axis", int64(0), "sizes", sizes), sums[k])
		for i, g := range bk {
			v := parts[i]
			if g.v.Type.Rank() != 1 {
				v = b.Reshape(v, g.v.Type.Shape...)
			}
			f.Outputs[g.out].Value = v
		}
	}
	if err := b.Err(); err != nil {
		return err
	}
	return ir.Verify(f)
}

// bucketGrads packs grads (in completion order) into buckets of one dtype and at
// most capBytes each; capBytes 0 gives one bucket per gradient.
func bucketGrads(grads []gradOut, capBytes int64) [][]gradOut {
	var out [][]gradOut
	open := map[string]int{} // dtype → index in out of its open bucket
	bytes := map[string]int64{}
	for _, g := range grads {
		dt, sz := g.v.Type.DType.String(), g.v.Type.Bytes()
		k, ok := open[dt]
		if !ok || capBytes == 0 || bytes[dt]+sz > capBytes {
			out = append(out, nil)
			k, open[dt], bytes[dt] = len(out)-1, len(out)-1, 0
		}
		out[k] = append(out[k], g)
		bytes[dt] += sz
	}
	// A bucket completes with its last gradient: order buckets by that, so that
	// insertion points go back to front.
	sort.SliceStable(out, func(i, j int) bool {
		return out[i][len(out[i])-1].def < out[j][len(out[j])-1].def
	})
	return out
}
