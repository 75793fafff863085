package attention

import "math"

// Rounding models the roundings inside lcc's tensor-core attention kernels
// (codegen/cuda/flash, tiers 1 and 2 alike), so that the CPU can compute what they
// compute rather than the exact attention the other functions here give. The
// kernels keep scores, softmax statistics and accumulators in fp32, but feed the
// tensor cores bf16 operands made inside the kernel:
//
//   - forward: key tiles of KeyTile keys are visited in order with a running
//     row maximum m (the maximum over the tiles visited so far), and each tile's
//     P = exp(s − m) is rounded (Operand) before P·V, while the row sum adds the
//     unrounded P; earlier tiles are rescaled by exp(m_old − m_new) in fp32. Since
//     bf16 rounding is not invariant under that rescaling, the result depends on
//     the tile size, which is why KeyTile is part of the model;
//   - backward: P = exp(s − lse) and dS = P·(dP − delta) are computed unrounded,
//     then P is rounded before dV = Pᵀ·dO, and dS before dK = dSᵀ·Q and
//     dQ = dS·K. The fused backward sums dQ in 64-bit fixed point whose unit lies
//     62 bits below a bound on |dQ|, far below any rounding modelled here.
//
// Key tiles count the keys a row may see from the first of its sequence (dense,
// also when documents or a window start the row inside a tile) or of its
// segment's selected keys (a dilated branch), as the kernels number them. The zero Rounding is exact attention. Additively masked attention never
// runs on those kernels, so masks ignore it.
type Rounding struct {
	// KeyTile is the forward's key tile (the kernel descriptor's Bc).
	KeyTile int
	// Operand rounds a value to the tensor cores' operand type (bf16); nil means
	// exact arithmetic.
	Operand func(float64) float64
}

// on reports whether r models any rounding.
func (r Rounding) on() bool { return r.Operand != nil }

// rowForwardRounded is rowForward (without a bias) as the tensor-core forward
// computes it under r.
func rowForwardRounded(q []float64, kv kvHead, ks keySet, scale float64, r Rounding,
	scores, o []float64) float64 {
	clear(o)
	n := ks.count()
	for c := range n {
		scores[c] = scale * dot(q, kv.row(kv.k, ks.lo+c*ks.step))
	}
	tile := r.KeyTile
	if tile <= 0 {
		tile = max(n, 1)
	}
	// The first tile is shorter when the row's keys start inside one.
	first := tile
	if ks.aligned && ks.step == 1 {
		first = tile - ks.lo%tile
	}
	m, sum := negInf, 0.0
	for t0, t1 := 0, 0; t0 < n; t0 = t1 {
		t1 = min(t0+first, n)
		first = tile
		mt := m
		for c := t0; c < t1; c++ {
			mt = max(mt, scores[c])
		}
		if mt == negInf {
			continue // every key so far hidden: nothing to add
		}
		corr := math.Exp(m - mt) // 0 for the first tile (m = −Inf)
		sum *= corr
		for i := range o {
			o[i] *= corr
		}
		for c := t0; c < t1; c++ {
			e := math.Exp(scores[c] - mt)
			sum += e
			p := r.Operand(e)
			for i, x := range kv.row(kv.v, ks.lo+c*ks.step) {
				o[i] += p * x
			}
		}
		m = mt
	}
	if m == negInf {
		clear(o)
		return negInf
	}
	for i := range o {
		o[i] /= sum
	}
	return m + math.Log(sum)
}

// rowBackwardRounded is rowBackward (without a bias) as the tensor-core
// backward computes it under r.
func rowBackwardRounded(q, dq []float64, kv kvHead, ks keySet, scale, lse, delta float64,
	r Rounding, do []float64) {
	for c := range ks.count() {
		j := ks.lo + c*ks.step
		k := kv.row(kv.k, j)
		p := math.Exp(scale*dot(q, k) - lse)
		if p == 0 {
			continue
		}
		v, dk, dv := kv.row(kv.v, j), kv.row(kv.dk, j), kv.row(kv.dv, j)
		ds := r.Operand(p * (dot(do, v) - delta))
		pr := r.Operand(p)
		for i, g := range do {
			dv[i] += pr * g
		}
		ds *= scale
		for i := range dq {
			dq[i] += ds * k[i]
			dk[i] += ds * q[i]
		}
	}
}

// forwardRow is rowForward, or rowForwardRounded when r models roundings and
// there is no bias.
func forwardRow(q []float64, kv kvHead, ks keySet, bias []float64, scale float64, r Rounding,
	scores, o []float64) float64 {
	if r.on() && bias == nil {
		return rowForwardRounded(q, kv, ks, scale, r, scores, o)
	}
	return rowForward(q, kv, ks, bias, scale, scores, o)
}

// backwardRow is rowBackward, or rowBackwardRounded when r models roundings and
// there is no bias.
func backwardRow(q, dq []float64, kv kvHead, ks keySet, bias []float64, scale, lse,
	delta float64, r Rounding, do []float64) {
	if r.on() && bias == nil {
		rowBackwardRounded(q, dq, kv, ks, scale, lse, delta, r, do)
		return
	}
	rowBackward(q, dq, kv, ks, bias, scale, lse, delta, do)
}
