package attention

import "fmt"

// Packed documents (docs/design.md §3): starts [B,T] holds, for each query, the global
// position of the first token of its document. Documents are contiguous runs, so with
// causality a query at global position p sees exactly the keys in [starts[p], p]. The
// key side needs no ids, which is what lets a ring block decide the mask from global
// positions alone.

// DenseDocs is causal DenseAt over packed documents: query t (global position qPos+t)
// sees key j (global kPos+j) iff starts[b,t] ≤ kPos+j ≤ qPos+t. A row that sees no key
// of the block gets o = 0 and lse = −Inf, which MergeInto absorbs.
func DenseDocs(q, k, v []float64, d Dims, starts []int64, qPos, kPos int, scale float64,
	r Rounding) (o, lse []float64) {
	d.mustMatch("attention.DenseDocs", "q", q, "k", k, "v", v)
	mustDocs("attention.DenseDocs", d, starts, true)
	return denseForward(q, k, v, d, docKeys(d, starts, qPos, kPos), nil, scale, r)
}

// DenseDocsBackward is the exact gradient of DenseDocs with the same positions; for a
// ring block, o and lse are the merged ones (see DenseAtBackward).
func DenseDocsBackward(q, k, v, o, lse, do []float64, d Dims, starts []int64, qPos, kPos int,
	scale float64, r Rounding) (dq, dk, dv []float64) {
	d.mustMatch("attention.DenseDocsBackward", "q", q, "k", k, "v", v, "o", o, "lse", lse,
		"do", do)
	mustDocs("attention.DenseDocsBackward", d, starts, true)
	return denseBackward(q, k, v, o, lse, do, d, docKeys(d, starts, qPos, kPos), nil, scale, r)
}

// docKeys is the key range of row (b, t): the causal prefix cut below at its
// document's start, in the block's key coordinates.
func docKeys(d Dims, starts []int64, qPos, kPos int) func(b, t int) keySet {
	return func(b, t int) keySet {
		ks := denseKeys(d, t, qPos, kPos, true)
		ks.lo = min(max(int(starts[b*d.T+t])-kPos, 0), d.S)
		ks.aligned = true
		return ks
	}
}

// mustDocs panics unless starts has one entry per query and the call is causal.
func mustDocs(fn string, d Dims, starts []int64, causal bool) {
	if len(starts) != d.B*d.T {
		panic(fmt.Sprintf("lcc: BUG: %s: len(starts) = %d, want B·T = %d", fn, len(starts), d.B*d.T))
	}
	if !causal {
		panic(fmt.Sprintf("lcc: BUG: %s: a document mask needs causal attention", fn))
	}
}

// DocStarts returns the document starts of one row of ids (len T) split after each
// separator sep, at global positions from pos: the form the attention ops take. It is
// for tests and references; the data loader computes the same from its packing.
func DocStarts(ids []int64, sep int64, pos int) []int64 {
	starts := make([]int64, len(ids))
	cur := int64(pos)
	for i, id := range ids {
		starts[i] = cur
		if id == sep {
			cur = int64(pos + i + 1)
		}
	}
	return starts
}
