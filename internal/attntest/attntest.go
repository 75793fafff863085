// Package attntest holds the sharded attention cases that two levels of lcc test:
// codegen/cuda compiles every kernel of each case's plans with NVRTC (as CI does,
// with no GPU), and runtime/exec runs the same cases on GPU 0, every rank sharing
// it, against the CPU interpreter's unsharded attention. One table, so that CI
// compiles exactly the variants the device runs and the two cannot drift apart.
// Only tests import it.
package attntest

import (
	"fmt"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Ring is one shape of a sharded attention test: Ranks ranks of L positions
// each, q [B, L, H, D] and k, v [B, L, Hkv, D] per rank, stored in Storage.
type Ring struct {
	Ranks           int
	B, L, H, Hkv, D int64
	Causal          bool
	Layout          string // ir.LayoutZigzag or ir.LayoutContiguous
	Storage         tensor.DType
}

func (c Ring) String() string {
	return fmt.Sprintf("ranks=%d/B=%d,L=%d,H=%d/%d,D=%d,causal=%v,%s,%v", c.Ranks, c.B, c.L, c.H, c.Hkv, c.D,
		c.Causal, c.Layout, c.Storage)
}

// Attrs are ring attention's attributes for c (causal, scale, ranks, layout).
func (c Ring) Attrs(scale float64) ir.Attrs {
	return ir.A("causal", c.Causal, "scale", scale, "ranks", c.Ranks, "layout", c.Layout)
}

// RingCases are ring attention's cases: both storages, both layouts, head dims
// on the tensor-core tier (64, 128 in bf16) and off it, grouped-query heads,
// non-causal, and 2 and 4 ranks.
var RingCases = []Ring{
	{2, 1, 64, 2, 2, 64, true, ir.LayoutZigzag, tensor.BF16},
	{4, 2, 64, 4, 2, 128, true, ir.LayoutZigzag, tensor.BF16},
	{2, 2, 48, 2, 1, 64, false, ir.LayoutContiguous, tensor.BF16},
	{2, 2, 24, 2, 1, 32, true, ir.LayoutZigzag, tensor.F32},
	{4, 1, 16, 4, 2, 16, true, ir.LayoutZigzag, tensor.F32},
	{4, 2, 12, 2, 2, 24, true, ir.LayoutContiguous, tensor.F32},
	{2, 1, 32, 2, 2, 32, true, ir.LayoutZigzag, tensor.BF16},
}

// Dilated is one case of LongNet's sharded dilated attention (contiguous layout).
type Dilated struct {
	Ring
	Segments, Dilations []int64
	Offsets             string // "paper" or "block"
}

func (c Dilated) String() string {
	return fmt.Sprintf("%v,w=%v,r=%v,%s", c.Ring, c.Segments, c.Dilations, c.Offsets)
}

// Attrs are dilated attention's attributes for c, without ranks (the unsharded
// op's); the sharded op's add ranks.
func (c Dilated) Attrs(scale float64) ir.Attrs {
	return ir.A("causal", c.Causal, "scale", scale, "segments", c.Segments, "dilations", c.Dilations,
		"offsets", c.Offsets)
}

// DilatedCases: local branches, far branches whose segment spans two ranks or
// the whole sequence (the sparse all-gather and the reduce-scatter of dk, dv),
// both tiers, both head-offset rules, and one non-causal case.
var DilatedCases = []Dilated{
	{Ring{2, 1, 64, 4, 2, 64, true, ir.LayoutContiguous, tensor.BF16}, []int64{32, 128}, []int64{1, 2}, "paper"},
	{Ring{4, 2, 32, 4, 4, 128, true, ir.LayoutContiguous, tensor.BF16}, []int64{16, 64, 128}, []int64{1, 2, 4},
		"block"},
	{Ring{2, 2, 16, 4, 2, 32, true, ir.LayoutContiguous, tensor.F32}, []int64{8, 64}, []int64{1, 2}, "paper"},
	{Ring{4, 1, 8, 4, 2, 16, true, ir.LayoutContiguous, tensor.F32}, []int64{4, 16, 32}, []int64{1, 2, 4}, "block"},
	{Ring{2, 1, 16, 2, 2, 16, false, ir.LayoutContiguous, tensor.F32}, []int64{8, 32}, []int64{2, 2}, "paper"},
}

// Func is attention op and its gradient grad (attributes attrs) on inputs q [B,
// L, H, D], k, v [B, L, Hkv, D] and the cotangent do, with outputs o, lse, dq,
// dk and dv: one rank's program for a sharded op, the whole sequence's for the
// unsharded one. It fails t on an error.
func Func(t testing.TB, op, grad ir.Op, attrs ir.Attrs, b, l, h, hkv, d int64) *ir.Func {
	t.Helper()
	bd := ir.NewBuilder(op.String())
	q := bd.Input("q", ir.T(tensor.F32, b, l, h, d))
	k := bd.Input("k", ir.T(tensor.F32, b, l, hkv, d))
	v := bd.Input("v", ir.T(tensor.F32, b, l, hkv, d))
	do := bd.Input("do", ir.T(tensor.F32, b, l, h, d))
	r := bd.Apply(op, attrs, q, k, v)
	gr := bd.Apply(grad, attrs, q, k, v, r[0], r[1], do)
	for i, name := range []string{"o", "lse", "dq", "dk", "dv"} {
		bd.Output(name, append(r, gr...)[i])
	}
	f, err := bd.Build()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// RankFunc is one rank's program of c: ring attention and its gradient.
func (c Ring) RankFunc(t testing.TB, scale float64) *ir.Func {
	t.Helper()
	return Func(t, ir.OpRingAttention, ir.OpRingAttentionGrad, c.Attrs(scale), c.B, c.L, c.H, c.Hkv, c.D)
}

// RankFunc is one rank's program of c: sharded dilated attention and its gradient.
func (c Dilated) RankFunc(t testing.TB, scale float64) *ir.Func {
	t.Helper()
	return Func(t, ir.OpShardedDilatedAttention, ir.OpShardedDilatedAttentionGrad,
		c.Attrs(scale).With("ranks", c.Ranks), c.B, c.L, c.H, c.Hkv, c.D)
}
