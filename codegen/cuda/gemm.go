package cuda

import (
	"fmt"
	"slices"

	"github.com/lcc-dev/lcc/ir"
)

// lowerMatMul plans a matmul as cuBLASLt GEMMs: one strided-batched GEMM when
// each operand's batch dims are either all present or all broadcast (a weight),
// folding the batch into M when B is shared and A is not transposed; otherwise
// one GEMM per output matrix.
func lowerMatMul(g *gen, n *ir.Node) error {
	a, b, c := n.Args[0], n.Args[1], n.Result()
	ta, tb := n.AttrBool("transpose_a"), n.AttrBool("transpose_b")
	batch, m, k, nn, err := ir.MatMulDims(a.Type, b.Type, ta, tb)
	if err != nil {
		return err
	}
	// cuBLASLt's matmul descriptor takes one input type; mixed storage would need a
	// cast kernel, which the pipeline is expected to have inserted already.
	if g.storageOf(a) != g.storageOf(b) {
		return fmt.Errorf("operands stored as %v and %v", g.storageOf(a), g.storageOf(b))
	}
	// cuBLASLt rejects zero-sized problems; an empty result needs no work at all.
	if c.Type.Numel() == 0 {
		return nil
	}
	// Batch dims broadcast numpy-style, so pad both to the output's batch rank first.
	aBatch := padBatch(a.Type.Shape[:a.Type.Rank()-2], len(batch))
	bBatch := padBatch(b.Type.Shape[:b.Type.Rank()-2], len(batch))
	nb := prod(batch)
	base := Gemm{TransA: ta, TransB: tb, M: m, N: nn, K: k, Batch: 1, DType: g.storageOf(a).String(),
		Alpha: 1}
	// Every GEMM reads and writes whole buffers by id; offsets and strides in gm
	// select the matrices, so no views or copies are planned for them.
	step := func(gm Gemm) {
		g.prog.Plan.Steps = append(g.prog.Plan.Steps, Step{Kind: "gemm", Node: g.node, Op: "matmul",
			Args: []int{g.ids[a], g.ids[b], g.ids[c]}, Gemm: &gm})
	}
	full := func(s []int64) bool { return slices.Equal(s, batch) }
	ones := func(s []int64) bool { return prod(s) == 1 }
	switch {
	case nb == 1:
		step(base)
	case full(aBatch) && ones(bBatch) && !ta:
		// A's rows of every batch are contiguous: one GEMM with M·batch rows.
		base.M = m * nb
		step(base)
	// A stride of 0 (the default) repeats a broadcast operand across the batch.
	case (full(aBatch) || ones(aBatch)) && (full(bBatch) || ones(bBatch)):
		base.Batch = nb
		if full(aBatch) {
			base.StrideA = m * k
		}
		if full(bBatch) {
			base.StrideB = k * nn
		}
		base.StrideC = m * nn
		step(base)
	default:
		// Partial broadcasting: one GEMM per output matrix.
		// Strides in whole matrices: 0 along a dim the operand broadcasts.
		ast, bst := bcastStrides(aBatch, batch), bcastStrides(bBatch, batch)
		for i := range nb {
			rem := i
			var oa, ob int64
			// Unravel i into batch coordinates, last dim fastest, as the output is laid out.
			for d := len(batch) - 1; d >= 0; d-- {
				cd := rem % batch[d]
				rem /= batch[d]
				oa += cd * ast[d]
				ob += cd * bst[d]
			}
			gm := base
			gm.OffA, gm.OffB, gm.OffC = oa*m*k, ob*k*nn, i*m*nn
			step(gm)
		}
	}
	return nil
}

// padBatch left-pads batch dims with ones to rank r.
func padBatch(s []int64, r int) []int64 {
	out := make([]int64, r)
	for i := range out {
		out[i] = 1
	}
	copy(out[r-len(s):], s)
	return out
}
