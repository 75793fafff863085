package attention

import (
	"math"
	"math/rand/v2"
	"testing"
)

// This file holds brute-force references written straight from docs/design.md §3, with
// their own index arithmetic, and the helpers the tests share.

// naiveKey is one entry of a row's key list: kv position j and an additive bias.
type naiveKey struct {
	j    int
	bias float64
}

// naiveAttend is softmax attention of query (b, t, h) over an explicit key list,
// duplicates counted as often as they appear. It returns the output row and lse.
func naiveAttend(q, k, v []float64, d Dims, b, t, h int, keys []naiveKey,
	scale float64) ([]float64, float64) {
	hk := h / (d.Hq / d.Hkv)
	qv := q[((b*d.T+t)*d.Hq+h)*d.D:][:d.D]
	kAt := func(x []float64, j int) []float64 { return x[((b*d.S+j)*d.Hkv+hk)*d.D:][:d.D] }
	s := make([]float64, len(keys))
	m := math.Inf(-1)
	for n, key := range keys {
		for i := range d.D {
			s[n] += qv[i] * kAt(k, key.j)[i]
		}
		s[n] = s[n]*scale + key.bias
		m = math.Max(m, s[n])
	}
	out := make([]float64, d.D)
	if math.IsInf(m, -1) {
		return out, math.Inf(-1)
	}
	z := 0.0
	for n := range keys {
		z += math.Exp(s[n] - m)
	}
	for n, key := range keys {
		p := math.Exp(s[n]-m) / z
		for i := range d.D {
			out[i] += p * kAt(v, key.j)[i]
		}
	}
	return out, m + math.Log(z)
}

// naiveRun fills o and lse from keysOf(b, t, h).
func naiveRun(q, k, v []float64, d Dims, scale float64,
	keysOf func(b, t, h int) []naiveKey) (o, lse []float64) {
	o = make([]float64, d.B*d.T*d.Hq*d.D)
	lse = make([]float64, d.B*d.Hq*d.T)
	for b := range d.B {
		for t := range d.T {
			for h := range d.Hq {
				row, l := naiveAttend(q, k, v, d, b, t, h, keysOf(b, t, h), scale)
				copy(o[((b*d.T+t)*d.Hq+h)*d.D:], row)
				lse[(b*d.Hq+h)*d.T+t] = l
			}
		}
	}
	return o, lse
}

// naiveDense: query t at qPos+t sees every key j at kPos+j, or those with
// kPos+j ≤ qPos+t when causal; mask (if any) is added to the score.
func naiveDense(q, k, v []float64, d Dims, qPos, kPos int, causal bool, mask []float64,
	scale float64) (o, lse []float64) {
	return naiveRun(q, k, v, d, scale, func(b, t, h int) []naiveKey {
		var keys []naiveKey
		for j := range d.S {
			if causal && kPos+j > qPos+t {
				continue
			}
			bias := 0.0
			if mask != nil {
				bias = mask[t*d.S+j]
			}
			keys = append(keys, naiveKey{j: j, bias: bias})
		}
		return keys
	})
}

// naiveOffset is o(h) from the definition, with ⌈H/r⌉ computed in floating point.
func naiveOffset(off Offsets, h, heads, r int) int {
	if off == Paper {
		return h % r
	}
	return int(math.Min(math.Floor(float64(h)/math.Ceil(float64(heads)/float64(r))),
		float64(r-1)))
}

// naiveDilated concatenates, for every branch that selects (t, h), that branch's key
// set found by testing every j against the definition, and takes one softmax over the
// concatenation. only ≥ 0 restricts it to that branch (DilatedBranch).
func naiveDilated(q, k, v []float64, d Dims, cfg DilatedConfig, only int,
	scale float64) (o, lse []float64) {
	return naiveRun(q, k, v, d, scale, func(b, p, h int) []naiveKey {
		var keys []naiveKey
		for i, br := range cfg.Branches {
			if only >= 0 && i != only {
				continue
			}
			w, r := br.Segment, br.Dilation
			off := naiveOffset(cfg.Offsets, h, d.Hq, r)
			if (p%w)%r != off {
				continue
			}
			for j := range d.T {
				if j/w == p/w && (j%w)%r == off && (!cfg.Causal || j <= p) {
					keys = append(keys, naiveKey{j: j})
				}
			}
		}
		return keys
	})
}

// inputs returns random q, k, v and do for d, seeded by seed.
func inputs(d Dims, seed uint64) (q, k, v, do []float64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	r := func(n int, amp float64) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = amp * (2*rng.Float64() - 1)
		}
		return x
	}
	nq, nk := d.B*d.T*d.Hq*d.D, d.B*d.S*d.Hkv*d.D
	return r(nq, 1.5), r(nk, 1.5), r(nk, 1), r(nq, 1)
}

// checkClose fails unless got and want agree within tol elementwise, treating two
// −Inf as equal and any NaN as a failure.
func checkClose(t *testing.T, name string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: len %d, want %d", name, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if math.IsNaN(g) || math.IsNaN(w) {
			t.Fatalf("%s[%d]: got %v, want %v (NaN)", name, i, g, w)
		}
		if math.IsInf(g, 0) || math.IsInf(w, 0) {
			if g != w {
				t.Fatalf("%s[%d]: got %v, want %v", name, i, g, w)
			}
			continue
		}
		if math.Abs(g-w) > tol {
			t.Fatalf("%s[%d]: got %.17g, want %.17g (|diff| %.3g > %.0e)", name, i, g, w,
				math.Abs(g-w), tol)
		}
	}
}

// checkFinite fails if x holds a NaN or ±Inf.
func checkFinite(t *testing.T, name string, x []float64) {
	t.Helper()
	for i, e := range x {
		if math.IsNaN(e) || math.IsInf(e, 0) {
			t.Fatalf("%s[%d] = %v", name, i, e)
		}
	}
}

// checkGrad compares analytic gradients with central differences of
// loss = Σ do ⊙ fwd(q, k, v), perturbing q, k and v in place (h = 1e-6). The error
// ‖analytic − fd‖ / ‖fd‖ must be ≤ 1e-6 for each of dq, dk, dv.
func checkGrad(t *testing.T, q, k, v, do []float64, fwd func() []float64,
	dq, dk, dv []float64) {
	t.Helper()
	const h = 1e-6
	loss := func() float64 {
		s := 0.0
		for i, o := range fwd() {
			s += do[i] * o
		}
		return s
	}
	for _, c := range []struct {
		name   string
		x, got []float64
	}{{"dq", q, dq}, {"dk", k, dk}, {"dv", v, dv}} {
		var num, den float64
		for i := range c.x {
			x0 := c.x[i]
			c.x[i] = x0 + h
			lp := loss()
			c.x[i] = x0 - h
			lm := loss()
			c.x[i] = x0
			fd := (lp - lm) / (2 * h)
			num += (c.got[i] - fd) * (c.got[i] - fd)
			den += fd * fd
		}
		rel := math.Sqrt(num / math.Max(den, 1e-300))
		if den == 0 && num == 0 {
			rel = 0
		}
		if rel > 1e-6 || math.IsNaN(rel) {
			t.Errorf("%s: relative error %.3g vs finite differences (‖fd‖ = %.3g)", c.name, rel,
				math.Sqrt(den))
		}
	}
}
