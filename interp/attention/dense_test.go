package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

var denseCases = []struct {
	d      Dims
	causal bool
}{
	{Dims{B: 1, T: 7, S: 7, Hq: 2, Hkv: 2, D: 3}, true},
	{Dims{B: 1, T: 7, S: 7, Hq: 2, Hkv: 2, D: 3}, false},
	{Dims{B: 2, T: 9, S: 9, Hq: 4, Hkv: 2, D: 5}, true},  // grouped-query
	{Dims{B: 2, T: 9, S: 9, Hq: 6, Hkv: 1, D: 4}, false}, // multi-query
	{Dims{B: 1, T: 5, S: 11, Hq: 2, Hkv: 1, D: 3}, true}, // S > T, top-left
	{Dims{B: 1, T: 11, S: 4, Hq: 3, Hkv: 3, D: 2}, true}, // S < T
	{Dims{B: 1, T: 1, S: 1, Hq: 1, Hkv: 1, D: 1}, true},
}

func TestDenseMatchesNaive(t *testing.T) {
	for i, c := range denseCases {
		t.Run(fmt.Sprintf("%d/%+v/causal=%v", i, c.d, c.causal), func(t *testing.T) {
			q, k, v, _ := inputs(c.d, uint64(i))
			scale := 1 / math.Sqrt(float64(c.d.D))
			o, lse := Dense(q, k, v, c.d, c.causal, scale)
			wo, wlse := naiveDense(q, k, v, c.d, 0, 0, c.causal, nil, scale)
			checkClose(t, "o", o, wo, 1e-12)
			checkClose(t, "lse", lse, wlse, 1e-12)
		})
	}
}

// Blocks of a longer sequence, including rows that see no key of the block.
func TestDenseAtMatchesNaive(t *testing.T) {
	d := Dims{B: 2, T: 6, S: 5, Hq: 4, Hkv: 2, D: 3}
	q, k, v, _ := inputs(d, 11)
	for _, pos := range [][2]int{{0, 0}, {10, 3}, {3, 10}, {0, 4}, {6, 0}, {1, 5}} {
		o, lse := DenseAt(q, k, v, d, pos[0], pos[1], true, 0.7)
		wo, wlse := naiveDense(q, k, v, d, pos[0], pos[1], true, nil, 0.7)
		checkClose(t, fmt.Sprint("o", pos), o, wo, 1e-12)
		checkClose(t, fmt.Sprint("lse", pos), lse, wlse, 1e-12)
	}
	// With queries far before the keys nothing is visible: o = 0, lse = −Inf.
	o, lse := DenseAt(q, k, v, d, 0, 100, true, 0.7)
	if slices.ContainsFunc(o, func(x float64) bool { return x != 0 }) ||
		slices.ContainsFunc(lse, func(x float64) bool { return !math.IsInf(x, -1) }) {
		t.Errorf("fully masked block: want o = 0 and lse = −Inf")
	}
}

// randomMask hides each key with probability 1/3 and row 2 entirely.
func randomMask(d Dims, seed uint64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 3))
	vis := make([]bool, d.T*d.S)
	for i := range vis {
		vis[i] = rng.IntN(3) != 0 && i/d.S != 2
	}
	m := MaskFromBool(vis)
	m[1] = -0.75 // additive values other than 0 and −Inf count too
	return m
}

func TestDenseMaskedMatchesNaive(t *testing.T) {
	d := Dims{B: 2, T: 8, S: 6, Hq: 4, Hkv: 2, D: 3}
	q, k, v, _ := inputs(d, 5)
	mask := randomMask(d, 1)
	o, lse := DenseMasked(q, k, v, d, mask, 0.6)
	wo, wlse := naiveDense(q, k, v, d, 0, 0, false, mask, 0.6)
	checkClose(t, "o", o, wo, 1e-12)
	checkClose(t, "lse", lse, wlse, 1e-12)
	if !math.IsInf(lse[2], -1) || o[d.qAt(0, 2, 0)] != 0 {
		t.Errorf("fully masked row 2: lse = %v, o = %v; want −Inf and 0", lse[2], o[d.qAt(0, 2, 0)])
	}

	// A causal boolean mask reproduces Dense(causal) exactly.
	vis := make([]bool, d.T*d.S)
	for i := range vis {
		vis[i] = i%d.S <= i/d.S
	}
	o, lse = DenseMasked(q, k, v, d, MaskFromBool(vis), 0.6)
	wo, wlse = Dense(q, k, v, d, true, 0.6)
	checkClose(t, "causal o", o, wo, 0)
	checkClose(t, "causal lse", lse, wlse, 0)
}

// Scores of ±1e4 would overflow exp without the max subtraction.
func TestDenseLargeScores(t *testing.T) {
	d := Dims{B: 1, T: 16, S: 16, Hq: 2, Hkv: 1, D: 4}
	q, k, v, do := inputs(d, 2)
	o, lse := Dense(q, k, v, d, true, 1e4)
	checkFinite(t, "o", o)
	checkFinite(t, "lse", lse)
	dq, dk, dv := DenseBackward(q, k, v, o, lse, do, d, true, 1e4)
	checkFinite(t, "dq", dq)
	checkFinite(t, "dk", dk)
	checkFinite(t, "dv", dv)
}

func TestDenseBackwardFiniteDifference(t *testing.T) {
	for i, c := range denseCases {
		t.Run(fmt.Sprintf("%d/%+v/causal=%v", i, c.d, c.causal), func(t *testing.T) {
			q, k, v, do := inputs(c.d, uint64(100+i))
			const scale = 0.8
			o, lse := Dense(q, k, v, c.d, c.causal, scale)
			dq, dk, dv := DenseBackward(q, k, v, o, lse, do, c.d, c.causal, scale)
			checkGrad(t, q, k, v, do, func() []float64 {
				o, _ := Dense(q, k, v, c.d, c.causal, scale)
				return o
			}, dq, dk, dv)
		})
	}
}

func TestDenseAtBackwardFiniteDifference(t *testing.T) {
	d := Dims{B: 1, T: 6, S: 5, Hq: 4, Hkv: 2, D: 3}
	q, k, v, do := inputs(d, 21)
	o, lse := DenseAt(q, k, v, d, 2, 4, true, 0.9) // rows 0 and 1 see no key
	dq, dk, dv := DenseAtBackward(q, k, v, o, lse, do, d, 2, 4, true, 0.9)
	checkGrad(t, q, k, v, do, func() []float64 {
		o, _ := DenseAt(q, k, v, d, 2, 4, true, 0.9)
		return o
	}, dq, dk, dv)
}

func TestDenseMaskedBackwardFiniteDifference(t *testing.T) {
	d := Dims{B: 2, T: 7, S: 6, Hq: 4, Hkv: 2, D: 3}
	q, k, v, do := inputs(d, 31)
	mask := randomMask(d, 9)
	o, lse := DenseMasked(q, k, v, d, mask, 0.9)
	dq, dk, dv := DenseMaskedBackward(q, k, v, o, lse, do, d, mask, 0.9)
	checkFinite(t, "dq", dq)
	checkGrad(t, q, k, v, do, func() []float64 {
		o, _ := DenseMasked(q, k, v, d, mask, 0.9)
		return o
	}, dq, dk, dv)
}

// Results must not depend on how goroutines are scheduled.
func TestDenseDeterministic(t *testing.T) {
	d := Dims{B: 3, T: 20, S: 20, Hq: 8, Hkv: 2, D: 4}
	q, k, v, do := inputs(d, 8)
	o, lse := Dense(q, k, v, d, true, 0.5)
	dq, dk, dv := DenseBackward(q, k, v, o, lse, do, d, true, 0.5)
	for range 3 {
		o2, lse2 := Dense(q, k, v, d, true, 0.5)
		dq2, dk2, dv2 := DenseBackward(q, k, v, o, lse, do, d, true, 0.5)
		if !slices.Equal(o, o2) || !slices.Equal(lse, lse2) || !slices.Equal(dq, dq2) ||
			!slices.Equal(dk, dk2) || !slices.Equal(dv, dv2) {
			t.Fatal("results differ between identical runs")
		}
	}
}

func TestDimsValidate(t *testing.T) {
	for _, c := range []struct {
		d  Dims
		ok bool
	}{
		{Dims{B: 1, T: 2, S: 2, Hq: 4, Hkv: 2, D: 3}, true},
		{Dims{B: 1, T: 2, S: 2, Hq: 3, Hkv: 2, D: 3}, false},
		{Dims{B: 1, T: 2, S: 2, Hq: 2, Hkv: 0, D: 3}, false},
		{Dims{B: -1, T: 2, S: 2, Hq: 2, Hkv: 1, D: 3}, false},
	} {
		if err := c.d.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v.Validate() = %v, want ok=%v", c.d, err, c.ok)
		}
	}
}
