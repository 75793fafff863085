package flash

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSplitFloatDQSumIsExact holds tier 2's split-float dQ sum (fa_red2f,
// dqConvertSrc) to its claim, in the kernel's fp32 arithmetic: for the count of
// adds dqLowBits allows and parts whose magnitudes sum to the bound, every
// partial sum of each word is exact, so any order gives the same bits, and the
// result is the exact sum of the rounded parts.
func TestSplitFloatDQSumIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range []int64{128, 1000, 8192, 131072, 1 << 20} {
		d := Desc{Tier: 2, B: 1, T: s, S: s, Hq: 1, Hkv: 1, D: 128, Causal: true}.Defaults()
		k := d.dqLowBits()
		n := int((s + int64(d.BwdBc) - 1) / int64(d.BwdBc))
		if n > 4096 {
			n = 4096 // the sum's words see n adds; more only shrinks K further
		}
		const bound = 3.0 // |Σ parts| ≤ Σ|parts| < bound < 2^e, e = 2
		mul := float32(math.Ldexp(1, 22+k-2))
		parts := make([]float32, n)
		var w float64
		for i := range parts {
			parts[i] = float32(math.Abs(rng.NormFloat64())) // one sign: the partial sums grow the most
			w += math.Abs(float64(parts[i]))
		}
		for i := range parts {
			parts[i] = float32(float64(parts[i]) * bound / w * 0.999) // Σ|parts| just under the bound
		}
		sum := func(order []int) (float32, float32, int64) {
			var hi, lo float32
			var exact int64
			for _, i := range order {
				v := float32(math.RoundToEven(float64(parts[i] * mul)))
				h := float32(math.RoundToEven(float64(v * float32(math.Ldexp(1, -k)))))
				l := float32(math.FMA(float64(-h), math.Ldexp(1, k), float64(v)))
				if math.Abs(float64(l)) > math.Ldexp(1, k-1) {
					t.Fatalf("S=%d: lo %g past 2^(K−1)", s, l)
				}
				hi, lo = hi+h, lo+l
				if math.Abs(float64(hi)) >= 1<<24 || math.Abs(float64(lo)) >= 1<<24 {
					t.Fatalf("S=%d K=%d: a word reached 2^24 (hi %g, lo %g)", s, k, hi, lo)
				}
				exact += int64(v)
			}
			return hi, lo, exact
		}
		fwd := make([]int, n)
		for i := range fwd {
			fwd[i] = i
		}
		h0, l0, e0 := sum(fwd)
		got := int64(h0)<<k + int64(l0)
		if got != e0 {
			t.Errorf("S=%d K=%d: hi·2^K+lo = %d, exact %d", s, k, got, e0)
		}
		for r := 0; r < 5; r++ {
			perm := rng.Perm(n)
			h, l, _ := sum(perm)
			if h != h0 || l != l0 {
				t.Errorf("S=%d: another order gave (%g, %g), not (%g, %g)", s, h, l, h0, l0)
			}
		}
		// The converted value is within one unit a part of the true sum.
		var ref float64
		for _, p := range parts {
			ref += float64(p)
		}
		if d := math.Abs(float64(got)/float64(mul) - ref); d > float64(n)/float64(mul) {
			t.Errorf("S=%d: converted sum off by %g", s, d)
		}
	}
}
