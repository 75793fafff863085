package attention

import "fmt"

// Dense is scaled dot-product attention: o[b,t,h] = Σ_j softmax_j(scale·q·k_j)·v_j over
// kv head h/g. With causal, query t sees keys j ≤ t (top-left aligned, PyTorch's
// is_causal; identical to bottom-right when S == T, the common case); when S > T the
// last S−T keys are seen by no query of a causal call, and DenseAt gives other
// alignments. It returns o [B,T,Hq,D] and lse [B,Hq,T].
func Dense(q, k, v []float64, d Dims, causal bool, scale float64) (o, lse []float64) {
	return DenseAt(q, k, v, d, 0, 0, causal, scale)
}

// DenseAt is Dense for a block of a longer sequence: query t sits at global position
// qPos+t and key j at kPos+j, and causal means kPos+j ≤ qPos+t. Ring and zigzag
// attention compute their blocks with it; a row that sees no key of the block gets
// o = 0 and lse = −Inf, which MergeInto absorbs. DenseAt(…, S−T, 0, …) is PyTorch's
// bottom-right causal alignment.
func DenseAt(q, k, v []float64, d Dims, qPos, kPos int, causal bool,
	scale float64) (o, lse []float64) {
	d.mustMatch("attention.DenseAt", "q", q, "k", k, "v", v)
	return denseForward(q, k, v, d, func(_, t int) keySet { return denseKeys(d, t, qPos, kPos, causal) },
		nil, scale, Rounding{})
}

// DenseRounded is Dense as the tensor-core kernels compute it, with the roundings
// r models (the zero Rounding gives Dense).
func DenseRounded(q, k, v []float64, d Dims, causal bool, scale float64, r Rounding) (o, lse []float64) {
	d.mustMatch("attention.DenseRounded", "q", q, "k", k, "v", v)
	return denseForward(q, k, v, d, func(_, t int) keySet { return denseKeys(d, t, 0, 0, causal) },
		nil, scale, r)
}

// DenseMasked is non-causal Dense with an additive mask [T, S], broadcast over batch
// and heads: the score of (t, j) is scale·q_t·k_j + mask[t·S+j]. −Inf hides a key; a
// row hidden entirely gets o = 0 and lse = −Inf. MaskFromBool builds the mask from a
// boolean pattern.
func DenseMasked(q, k, v []float64, d Dims, mask []float64, scale float64) (o, lse []float64) {
	d.mustMatch("attention.DenseMasked", "q", q, "k", k, "v", v)
	mustMask("attention.DenseMasked", d, mask)
	all := keySet{lo: 0, step: 1, hi: d.S}
	return denseForward(q, k, v, d, func(int, int) keySet { return all }, mask, scale, Rounding{})
}

// MaskFromBool turns a boolean mask (true: the key is visible) into the additive mask
// DenseMasked takes: 0 where visible, −Inf where not.
func MaskFromBool(visible []bool) []float64 {
	m := make([]float64, len(visible))
	for i, ok := range visible {
		if !ok {
			m[i] = negInf
		}
	}
	return m
}

// mustMask panics when mask is not one [T,S] block: the callers in package
// interp build the blocks, so a wrong length is lcc's bug, not the user's.
func mustMask(fn string, d Dims, mask []float64) {
	if len(mask) != d.T*d.S {
		panic(fmt.Sprintf("lcc: BUG: %s: len(mask) = %d, want T·S = %d", fn, len(mask), d.T*d.S))
	}
}

// denseKeys is the key range row t sees: all S keys, or with causal the prefix up
// to global position qPos+t.
func denseKeys(d Dims, t, qPos, kPos int, causal bool) keySet {
	hi := d.S
	if causal {
		hi = min(max(qPos+t-kPos+1, 0), d.S)
	}
	return keySet{lo: 0, step: 1, hi: hi}
}

// maskRow is row t of an additive [T, S] mask, or nil without one.
func maskRow(mask []float64, d Dims, t int) []float64 {
	if mask == nil {
		return nil
	}
	return mask[t*d.S : (t+1)*d.S]
}

// denseForward runs one goroutine per (batch, query head); keys(b, t) is what row t of
// batch b sees.
func denseForward(q, k, v []float64, d Dims, keys func(b, t int) keySet, mask []float64,
	scale float64, rd Rounding) (o, lse []float64) {
	o = make([]float64, len(q))
	lse = make([]float64, d.B*d.Hq*d.T)
	parallelFor(d.B*d.Hq, func(task int) {
		b, h := task/d.Hq, task%d.Hq
		kv := d.head(b, h/d.group(), k, v, nil, nil)
		scores := make([]float64, d.S)
		for t := range d.T {
			r := d.qAt(b, t, h)
			lse[d.lseAt(b, h, t)] = forwardRow(q[r:r+d.D], kv, keys(b, t), maskRow(mask, d, t),
				scale, rd, scores, o[r:r+d.D])
		}
	})
	return o, lse
}
