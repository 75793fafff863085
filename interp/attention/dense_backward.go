package attention

// DenseBackward is the exact gradient of Dense: given its inputs, its outputs o and
// lse, and the output gradient do, it returns dq, dk and dv in the layouts of q, k
// and v. For grouped-query attention dk and dv sum over the query heads of a group.
func DenseBackward(q, k, v, o, lse, do []float64, d Dims, causal bool,
	scale float64) (dq, dk, dv []float64) {
	return DenseAtBackward(q, k, v, o, lse, do, d, 0, 0, causal, scale)
}

// DenseAtBackward is the exact gradient of DenseAt with the same positions. For a
// ring block, pass the global o and lse of the merged result: each block's share of
// the gradient is then exact, and the shares add up to the full gradient.
func DenseAtBackward(q, k, v, o, lse, do []float64, d Dims, qPos, kPos int, causal bool,
	scale float64) (dq, dk, dv []float64) {
	d.mustMatch("attention.DenseAtBackward", "q", q, "k", k, "v", v, "o", o, "lse", lse,
		"do", do)
	return denseBackward(q, k, v, o, lse, do, d,
		func(_, t int) keySet { return denseKeys(d, t, qPos, kPos, causal) }, nil, scale, Rounding{})
}

// DenseBackwardRounded is DenseBackward as the tensor-core kernels compute it, with
// the roundings r models (the zero Rounding gives DenseBackward).
func DenseBackwardRounded(q, k, v, o, lse, do []float64, d Dims, causal bool, scale float64,
	r Rounding) (dq, dk, dv []float64) {
	d.mustMatch("attention.DenseBackwardRounded", "q", q, "k", k, "v", v, "o", o, "lse", lse,
		"do", do)
	return denseBackward(q, k, v, o, lse, do, d,
		func(_, t int) keySet { return denseKeys(d, t, 0, 0, causal) }, nil, scale, r)
}

// DenseMaskedBackward is the exact gradient of DenseMasked with respect to q, k and v
// (the mask is a constant).
func DenseMaskedBackward(q, k, v, o, lse, do []float64, d Dims, mask []float64,
	scale float64) (dq, dk, dv []float64) {
	d.mustMatch("attention.DenseMaskedBackward", "q", q, "k", k, "v", v, "o", o,
		"lse", lse, "do", do)
	mustMask("attention.DenseMaskedBackward", d, mask)
	all := keySet{lo: 0, step: 1, hi: d.S}
	return denseBackward(q, k, v, o, lse, do, d, func(int, int) keySet { return all }, mask, scale,
		Rounding{})
}

// denseBackward runs one goroutine per (batch, kv head): it owns dk and dv of that
// head and dq of the query heads in its group, visited in increasing order.
func denseBackward(q, k, v, o, lse, do []float64, d Dims, keys func(b, t int) keySet,
	mask []float64, scale float64, rd Rounding) (dq, dk, dv []float64) {
	dq = make([]float64, len(q))
	dk = make([]float64, len(k))
	dv = make([]float64, len(v))
	g := d.group()
	parallelFor(d.B*d.Hkv, func(task int) {
		b, hk := task/d.Hkv, task%d.Hkv
		kv := d.head(b, hk, k, v, dk, dv)
		for h := hk * g; h < (hk+1)*g; h++ {
			for t := range d.T {
				l := lse[d.lseAt(b, h, t)]
				if l == negInf {
					continue // the row saw no key: o is constant 0
				}
				r := d.qAt(b, t, h)
				qRow, dqRow, oRow, doRow := q[r:r+d.D], dq[r:r+d.D], o[r:r+d.D], do[r:r+d.D]
				backwardRow(qRow, dqRow, kv, keys(b, t), maskRow(mask, d, t), scale, l,
					dot(doRow, oRow), rd, doRow)
			}
		}
	})
	return dq, dk, dv
}
