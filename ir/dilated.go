package ir

// This file is the one home of LongNet's head offsets (docs/design.md §3): which
// residue modulo the dilation r the rows of head h select in a branch of
// dilated attention. The CPU interpreter, the communication model and the CUDA
// kernels all take o(h) from here.

// The values of the "offsets" attribute of the dilated attention ops.
const (
	// OffsetsPaper is LongNet's o(h) = h mod r (arXiv 2307.02486): neighbouring
	// heads cover neighbouring residues. It is the default.
	OffsetsPaper = "paper"
	// OffsetsBlock is torchscale's o(h) = min(⌊h / ⌈H/r⌉⌋, r − 1): the H heads are
	// split into r contiguous blocks, one per residue.
	OffsetsBlock = "block"
)

// HeadOffset is o(h) for query head h of heads in a branch of dilation r, under
// the offsets named by offsets (OffsetsBlock, else OffsetsPaper). Grouped-query
// attention passes the query head and H = Hq.
func HeadOffset(offsets string, h, heads, r int64) int64 {
	if offsets == OffsetsBlock {
		return min(h/((heads+r-1)/r), r-1)
	}
	return h % r
}

// The same o(h) as C expressions over h, heads and r, for generated kernels.
// They are valid Go too: a test evaluates them against HeadOffset.
const (
	headOffsetPaperExpr = `h % r`
	headOffsetBlockExpr = `min(h / ((heads + r - 1) / r), r - 1)`
)

// HeadOffsetCUDA defines the device function lcc_head_offset(h, heads, r, block),
// HeadOffset for kernels (block selects OffsetsBlock). Kernel sources include it
// rather than spell the formula out; it is guarded, so a source may include it
// twice (the prelude and a kernel family's own helpers).
const HeadOffsetCUDA = `// lcc_head_offset is LongNet's head offset o(h) (lcc ir.HeadOffset).
#ifndef LCC_HEAD_OFFSET
#define LCC_HEAD_OFFSET
__device__ __forceinline__ int lcc_head_offset(int h, int heads, int r, bool block) {
  return block ? ` + headOffsetBlockExpr + ` : ` + headOffsetPaperExpr + `;
}
#endif
`
