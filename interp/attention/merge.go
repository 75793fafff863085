package attention

import "math"

// MergeInto folds a partial attention result (oB, lseB) over another set of keys into
// (o, lse), in place, as ring attention does after each step (docs/design.md §3):
//
//	o   ← o − σ(lseB − lse)·(o − oB)
//	lse ← lse − log σ(lse − lseB)
//
// Afterwards (o, lse) is attention over the union of both key sets. o and oB are
// [B,T,Hq,D], lse and lseB are [B,Hq,T] (d.S is ignored). The sigmoid and log-sigmoid
// are evaluated so that nothing overflows, and a row whose lse or lseB is −Inf (it saw
// no key in that block) takes the other side unchanged; two −Inf rows stay o = 0,
// lse = −Inf. No NaN arises from finite or −Inf inputs.
func MergeInto(o, lse, oB, lseB []float64, d Dims) {
	d.S = 0
	d.mustMatch("attention.MergeInto", "o", o, "lse", lse, "oB", oB, "lseB", lseB)
	for b := range d.B {
		for t := range d.T {
			for h := range d.Hq {
				r, l := d.qAt(b, t, h), d.lseAt(b, h, t)
				lse[l] = mergeRow(o[r:r+d.D], lse[l], oB[r:r+d.D], lseB[l])
			}
		}
	}
}

// mergeRow merges row (ob, lb) into (o, l) and returns the new lse; o is updated in
// place.
func mergeRow(o []float64, l float64, ob []float64, lb float64) float64 {
	switch {
	case lb == negInf:
		return l
	case l == negInf:
		copy(o, ob)
		return lb
	}
	x := lb - l
	w := sigmoid(x)
	for i := range o {
		o[i] -= w * (o[i] - ob[i])
	}
	// −log σ(l − lb) = −log σ(−x) = softplus(x).
	return l + softplus(x)
}

// sigmoid is 1/(1+e^−x), evaluated with an exponent ≤ 0 so it never overflows.
func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

// softplus is log(1+e^x) = max(x, 0) + log1p(e^−|x|), exact for large |x|.
func softplus(x float64) float64 {
	return max(x, 0) + math.Log1p(math.Exp(-math.Abs(x)))
}
