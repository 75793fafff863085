package attention

import "math"

// kvHead is one kv head of one batch element: key j's vector is
// k[base+j·stride : base+j·stride+d]. dk and dv are nil in the forward pass.
type kvHead struct {
	k, v, dk, dv []float64
	base, stride int
	d            int
}

// row is key (or value) j of head h in x, capped at D elements so that an
// append to it cannot write into the next row.
func (h kvHead) row(x []float64, j int) []float64 {
	o := h.base + j*h.stride
	return x[o : o+h.d : o+h.d]
}

// keySet is the arithmetic progression of key positions lo, lo+step, ... < hi.
// Dense rows use step 1; a dilated branch uses step r.
type keySet struct {
	lo, step, hi int
	// aligned: the kernels' key tiles are multiples of the tile from key 0, not
	// from lo (a dense row cut below by its document or window starts mid-tile).
	aligned bool
}

// count is the number of keys in the set (0 when empty).
func (ks keySet) count() int {
	if ks.hi <= ks.lo {
		return 0
	}
	return (ks.hi - ks.lo + ks.step - 1) / ks.step
}

// dot is a·b summed in index order, the fixed order every score uses.
func dot(a, b []float64) float64 {
	s := 0.0
	for i, x := range a {
		s += x * b[i]
	}
	return s
}

// rowForward attends query row q to the keys in ks of kv head kv and writes the
// normalised output to o, returning the row's lse. bias, when non-nil, is added to
// key j's score (bias[j]); −Inf hides the key. scores needs room for ks.count().
// A row that sees no key gets o = 0 and lse = −Inf.
func rowForward(q []float64, kv kvHead, ks keySet, bias []float64, scale float64,
	scores, o []float64) float64 {
	clear(o)
	n := ks.count()
	m := negInf
	for c := range n {
		j := ks.lo + c*ks.step
		s := scale * dot(q, kv.row(kv.k, j))
		if bias != nil {
			s += bias[j]
		}
		scores[c] = s
		m = max(m, s)
	}
	if n == 0 || math.IsInf(m, -1) {
		return negInf
	}
	// Subtracting the row maximum keeps every exp ≤ 1 and the sum ≥ 1.
	sum := 0.0
	for c := range n {
		e := math.Exp(scores[c] - m)
		sum += e
		for i, x := range kv.row(kv.v, ks.lo+c*ks.step) {
			o[i] += e * x
		}
	}
	for i := range o {
		o[i] /= sum
	}
	return m + math.Log(sum)
}

// rowBackward adds query row q's contribution over the keys in ks to dq, kv.dk and
// kv.dv (FlashAttention-2): P = exp(s·q·k + bias − lse), dV += P·dO,
// dS = P·(dO·v − delta), dQ += s·dS·k, dK += s·dS·q. lse and delta = dO·O belong to
// the whole row, which is what makes a per-branch call exact for a merged softmax.
func rowBackward(q, dq []float64, kv kvHead, ks keySet, bias []float64, scale, lse,
	delta float64, do []float64) {
	n := ks.count()
	for c := range n {
		j := ks.lo + c*ks.step
		k := kv.row(kv.k, j)
		s := scale * dot(q, k)
		if bias != nil {
			s += bias[j]
		}
		p := math.Exp(s - lse)
		if p == 0 {
			continue // a masked or negligible key contributes nothing
		}
		v, dk, dv := kv.row(kv.v, j), kv.row(kv.dk, j), kv.row(kv.dv, j)
		dp := 0.0
		for i, g := range do {
			dv[i] += p * g
			dp += g * v[i]
		}
		ds := scale * p * (dp - delta)
		for i := range dq {
			dq[i] += ds * k[i]
			dk[i] += ds * q[i]
		}
	}
}
