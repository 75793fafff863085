package attention

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

func TestOffsets(t *testing.T) {
	for _, c := range []struct {
		off      Offsets
		heads, r int
		want     []int
	}{
		{Paper, 4, 2, []int{0, 1, 0, 1}},
		{Paper, 3, 4, []int{0, 1, 2}},
		{Paper, 5, 1, []int{0, 0, 0, 0, 0}},
		{Block, 4, 2, []int{0, 0, 1, 1}},
		{Block, 4, 4, []int{0, 1, 2, 3}},
		{Block, 3, 2, []int{0, 0, 1}},             // ⌈3/2⌉ = 2
		{Block, 5, 2, []int{0, 0, 0, 1, 1}},       // ⌈5/2⌉ = 3
		{Block, 6, 4, []int{0, 0, 1, 1, 2, 2}},    // ⌈6/4⌉ = 2: residue 3 unused
		{Block, 2, 4, []int{0, 1}},                // r > H
		{Block, 7, 3, []int{0, 0, 0, 1, 1, 1, 2}}, // ⌈7/3⌉ = 3
	} {
		got := make([]int, c.heads)
		for h := range got {
			got[h] = c.off.Offset(h, c.heads, c.r)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%v offsets, H=%d r=%d: got %v, want %v", c.off, c.heads, c.r, got, c.want)
		}
	}
}

func TestDilatedConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg DilatedConfig
		ok  bool
	}{
		{DilatedConfig{Branches: []Branch{{4, 1}, {8, 2}}, Causal: true}, true},
		{DilatedConfig{}, false},
		{DilatedConfig{Branches: []Branch{{0, 1}}}, false},
		{DilatedConfig{Branches: []Branch{{4, 0}}}, false},
		{DilatedConfig{Branches: []Branch{{4, 1}}, Offsets: 7}, false},
	} {
		if err := c.cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v.Validate() = %v, want ok=%v", c.cfg, err, c.ok)
		}
	}
}

var (
	longnet3 = []Branch{{4, 1}, {8, 2}, {16, 4}}
	// dilatedCases cover ragged last segments (T=13), w > T, H not divisible by r,
	// grouped-query heads, both offsets and non-causal attention.
	dilatedCases = []struct {
		d   Dims
		cfg DilatedConfig
	}{
		{Dims{B: 1, T: 13, S: 13, Hq: 4, Hkv: 4, D: 3}, DilatedConfig{longnet3, Paper, true}},
		{Dims{B: 1, T: 13, S: 13, Hq: 4, Hkv: 4, D: 3}, DilatedConfig{longnet3, Block, true}},
		{Dims{B: 1, T: 13, S: 13, Hq: 4, Hkv: 2, D: 3}, DilatedConfig{longnet3, Paper, false}},
		{Dims{B: 2, T: 13, S: 13, Hq: 4, Hkv: 1, D: 3}, DilatedConfig{longnet3, Block, false}},
		{Dims{B: 1, T: 13, S: 13, Hq: 3, Hkv: 3, D: 2},
			DilatedConfig{[]Branch{{5, 2}, {13, 4}}, Block, true}},
		{Dims{B: 1, T: 13, S: 13, Hq: 3, Hkv: 1, D: 2},
			DilatedConfig{[]Branch{{5, 2}, {13, 4}}, Paper, true}},
		{Dims{B: 1, T: 10, S: 10, Hq: 5, Hkv: 5, D: 2},
			DilatedConfig{[]Branch{{3, 3}, {100, 2}, {4, 1}}, Block, true}},
		// The same branch twice: its keys count twice in the merged softmax.
		{Dims{B: 1, T: 9, S: 9, Hq: 2, Hkv: 1, D: 3},
			DilatedConfig{[]Branch{{4, 2}, {4, 2}, {2, 1}}, Paper, true}},
		// Rows of odd in-segment position are selected by no branch for head 0.
		{Dims{B: 1, T: 11, S: 11, Hq: 2, Hkv: 2, D: 3},
			DilatedConfig{[]Branch{{4, 2}, {8, 2}}, Paper, true}},
	}
)

func TestDilatedMatchesNaive(t *testing.T) {
	for n, c := range dilatedCases {
		t.Run(fmt.Sprintf("%d/%+v", n, c.cfg), func(t *testing.T) {
			q, k, v, _ := inputs(c.d, uint64(n))
			scale := 1 / math.Sqrt(float64(c.d.D))
			o, lse := Dilated(q, k, v, c.d, c.cfg, scale)
			wo, wlse := naiveDilated(q, k, v, c.d, c.cfg, -1, scale)
			checkClose(t, "o", o, wo, 1e-12)
			checkClose(t, "lse", lse, wlse, 1e-12)

			// DilatedBranch is each branch alone, and MergeInto folds them into Dilated.
			mo, mlse := make([]float64, len(o)), slices.Repeat([]float64{math.Inf(-1)}, len(lse))
			for i := range c.cfg.Branches {
				bo, blse := DilatedBranch(q, k, v, c.d, c.cfg, i, scale)
				wo, wlse := naiveDilated(q, k, v, c.d, c.cfg, i, scale)
				checkClose(t, fmt.Sprint("branch o ", i), bo, wo, 1e-12)
				checkClose(t, fmt.Sprint("branch lse ", i), blse, wlse, 1e-12)
				MergeInto(mo, mlse, bo, blse, c.d)
			}
			checkClose(t, "merged o", mo, o, 1e-12)
			checkClose(t, "merged lse", mlse, lse, 1e-12)
		})
	}
}

// One branch with w ≥ T and r = 1 is dense attention, forward and backward.
func TestDilatedOneBranchIsDense(t *testing.T) {
	d := Dims{B: 2, T: 13, S: 13, Hq: 4, Hkv: 2, D: 3}
	q, k, v, do := inputs(d, 4)
	for _, w := range []int{13, 14, 1 << 40} {
		for _, causal := range []bool{true, false} {
			cfg := DilatedConfig{Branches: []Branch{{w, 1}}, Causal: causal}
			name := fmt.Sprintf("w=%d causal=%v ", w, causal)
			o, lse := Dilated(q, k, v, d, cfg, 0.7)
			wo, wlse := Dense(q, k, v, d, causal, 0.7)
			checkClose(t, name+"o", o, wo, 1e-12)
			checkClose(t, name+"lse", lse, wlse, 1e-12)
			dq, dk, dv := DilatedBackward(q, k, v, o, lse, do, d, cfg, 0.7)
			wdq, wdk, wdv := DenseBackward(q, k, v, wo, wlse, do, d, causal, 0.7)
			checkClose(t, name+"dq", dq, wdq, 1e-12)
			checkClose(t, name+"dk", dk, wdk, 1e-12)
			checkClose(t, name+"dv", dv, wdv, 1e-12)
		}
	}
}

// A row no branch selects outputs 0 with lse −Inf, gets dq = 0, and nothing is NaN.
func TestDilatedUnselectedRows(t *testing.T) {
	d := Dims{B: 1, T: 11, S: 11, Hq: 2, Hkv: 1, D: 3}
	cfg := DilatedConfig{Branches: []Branch{{4, 2}, {8, 2}}, Offsets: Paper, Causal: true}
	q, k, v, do := inputs(d, 6)
	o, lse := Dilated(q, k, v, d, cfg, 0.5)
	dq, dk, dv := DilatedBackward(q, k, v, o, lse, do, d, cfg, 0.5)
	checkFinite(t, "o", o)
	checkFinite(t, "dq", dq)
	checkFinite(t, "dk", dk)
	checkFinite(t, "dv", dv)
	for h := range d.Hq {
		for p := range d.T {
			selected := (p%4)%2 == h // both branches select the same rows
			r, l := d.qAt(0, p, h), lse[d.lseAt(0, h, p)]
			zero := !slices.ContainsFunc(o[r:r+d.D], func(x float64) bool { return x != 0 })
			dqZero := !slices.ContainsFunc(dq[r:r+d.D], func(x float64) bool { return x != 0 })
			if selected == math.IsInf(l, -1) || selected == zero || !selected && !dqZero {
				t.Errorf("h=%d p=%d selected=%v: lse %v, o %v, dq %v", h, p, selected, l,
					o[r:r+d.D], dq[r:r+d.D])
			}
		}
	}
}

func TestDilatedBackwardFiniteDifference(t *testing.T) {
	for n, c := range dilatedCases {
		t.Run(fmt.Sprintf("%d/%+v", n, c.cfg), func(t *testing.T) {
			q, k, v, do := inputs(c.d, uint64(200+n))
			const scale = 0.9
			o, lse := Dilated(q, k, v, c.d, c.cfg, scale)
			dq, dk, dv := DilatedBackward(q, k, v, o, lse, do, c.d, c.cfg, scale)
			checkGrad(t, q, k, v, do, func() []float64 {
				o, _ := Dilated(q, k, v, c.d, c.cfg, scale)
				return o
			}, dq, dk, dv)
		})
	}
}

// The attn_mha-like configuration stays finite and matches the definition.
func TestDilatedMHAConfig(t *testing.T) {
	d := Dims{B: 1, T: 64, S: 64, Hq: 4, Hkv: 4, D: 8}
	cfg := DilatedConfig{Branches: []Branch{{8, 1}, {16, 2}, {32, 4}}, Offsets: Paper,
		Causal: true}
	q, k, v, do := inputs(d, 64)
	scale := 1 / math.Sqrt(8)
	o, lse := Dilated(q, k, v, d, cfg, scale)
	checkFinite(t, "o", o)
	checkFinite(t, "lse", lse)
	wo, wlse := naiveDilated(q, k, v, d, cfg, -1, scale)
	checkClose(t, "o", o, wo, 1e-12)
	checkClose(t, "lse", lse, wlse, 1e-12)
	dq, dk, dv := DilatedBackward(q, k, v, o, lse, do, d, cfg, scale)
	checkFinite(t, "dq", dq)
	checkFinite(t, "dk", dk)
	checkFinite(t, "dv", dv)
}

// Results must not depend on how goroutines are scheduled, also under GQA where
// several query heads add into one dk/dv.
func TestDilatedDeterministic(t *testing.T) {
	d := Dims{B: 2, T: 40, S: 40, Hq: 8, Hkv: 2, D: 4}
	cfg := DilatedConfig{Branches: []Branch{{8, 1}, {16, 2}, {64, 4}}, Causal: true}
	q, k, v, do := inputs(d, 9)
	o, lse := Dilated(q, k, v, d, cfg, 0.5)
	dq, dk, dv := DilatedBackward(q, k, v, o, lse, do, d, cfg, 0.5)
	for range 3 {
		o2, lse2 := Dilated(q, k, v, d, cfg, 0.5)
		dq2, dk2, dv2 := DilatedBackward(q, k, v, o, lse, do, d, cfg, 0.5)
		if !slices.Equal(o, o2) || !slices.Equal(lse, lse2) || !slices.Equal(dq, dq2) ||
			!slices.Equal(dk, dk2) || !slices.Equal(dv, dv2) {
			t.Fatal("results differ between identical runs")
		}
	}
}
