package attention

// DilatedBackward is the exact gradient of Dilated: given its inputs, its merged
// outputs o and lse, and the output gradient do, it returns dq, dk and dv. Because
// the merge is one softmax over the union of the branches' key sets, every branch
// runs the FlashAttention-2 backward with the global lse and delta = dO·O of the
// merged output; a key that several branches share is visited once per branch, which
// is its multiplicity in the union. Rows that no branch selects get dq = 0.
func DilatedBackward(q, k, v, o, lse, do []float64, d Dims, cfg DilatedConfig,
	scale float64) (dq, dk, dv []float64) {
	return DilatedBackwardRounded(q, k, v, o, lse, do, d, cfg, scale, Rounding{})
}

// DilatedDocsBackward is the exact gradient of DilatedDocs.
func DilatedDocsBackward(q, k, v, o, lse, do []float64, d Dims, cfg DilatedConfig,
	starts []int64, scale float64, rd Rounding) (dq, dk, dv []float64) {
	mustDocs("attention.DilatedDocsBackward", d, starts, cfg.Causal)
	return dilatedBackward(q, k, v, o, lse, do, d, cfg, starts, scale, rd)
}

// DilatedBackwardRounded is DilatedBackward as the tensor-core kernels compute it,
// with the roundings r models in every branch (the zero Rounding gives
// DilatedBackward).
func DilatedBackwardRounded(q, k, v, o, lse, do []float64, d Dims, cfg DilatedConfig,
	scale float64, rd Rounding) (dq, dk, dv []float64) {
	return dilatedBackward(q, k, v, o, lse, do, d, cfg, nil, scale, rd)
}

// dilatedBackward is DilatedBackwardRounded over the documents starts (nil: one).
func dilatedBackward(q, k, v, o, lse, do []float64, d Dims, cfg DilatedConfig, starts []int64,
	scale float64, rd Rounding) (dq, dk, dv []float64) {
	d.mustMatch("attention.DilatedBackward", "q", q, "k", k, "v", v, "o", o, "lse", lse,
		"do", do)
	dilatedCheck("attention.DilatedBackward", d, cfg)
	dq = make([]float64, len(q))
	dk = make([]float64, len(k))
	dv = make([]float64, len(v))
	g := d.group()
	// One goroutine per (batch, kv head) owns that head's dk, dv and the dq of its
	// query heads, visited in increasing order: deterministic without locks.
	parallelFor(d.B*d.Hkv, func(task int) {
		b, hk := task/d.Hkv, task%d.Hkv
		kv := d.head(b, hk, k, v, dk, dv)
		for h := hk * g; h < (hk+1)*g; h++ {
			offs := cfg.offsets(h, d.Hq)
			for p := range d.T {
				l := lse[d.lseAt(b, h, p)]
				if l == negInf {
					continue // selected by no branch: o is constant 0
				}
				r := d.qAt(b, p, h)
				qRow, dqRow, oRow, doRow := q[r:r+d.D], dq[r:r+d.D], o[r:r+d.D], do[r:r+d.D]
				delta := dot(doRow, oRow)
				for i, br := range cfg.Branches {
					if ks, ok := branchKeys(p, br, offs[i], d.T, docStart(starts, d, b, p), cfg.Causal); ok {
						backwardRow(qRow, dqRow, kv, ks, nil, scale, l, delta, rd, doRow)
					}
				}
			}
		}
	})
	return dq, dk, dv
}
