package attention

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// keyBlock is keys [lo, hi) of k or v, for every batch element.
func keyBlock(x []float64, d Dims, lo, hi int) []float64 {
	var out []float64
	row := d.Hkv * d.D
	for b := range d.B {
		out = append(out, x[(b*d.S+lo)*row:(b*d.S+hi)*row]...)
	}
	return out
}

// putKeyBlock is keyBlock's inverse: it copies block into keys [lo, hi) of x.
func putKeyBlock(x, block []float64, d Dims, lo, hi int) {
	row := d.Hkv * d.D
	for b := range d.B {
		copy(x[(b*d.S+lo)*row:(b*d.S+hi)*row], block[b*(hi-lo)*row:])
	}
}

// Ring attention's view: dense attention over key blocks, merged with MergeInto in
// any order, is dense attention over all keys. Causal blocks past a query give rows
// with lse −Inf on either side of the merge.
func TestMergeIntoKeyBlocks(t *testing.T) {
	d := Dims{B: 2, T: 12, S: 12, Hq: 4, Hkv: 2, D: 3}
	q, k, v, do := inputs(d, 12)
	cuts := []int{0, 3, 4, 9, 12}
	for _, causal := range []bool{true, false} {
		for _, reverse := range []bool{false, true} {
			name := fmt.Sprintf("causal=%v reverse=%v ", causal, reverse)
			wo, wlse := Dense(q, k, v, d, causal, 0.8)
			o := make([]float64, len(wo))
			lse := slices.Repeat([]float64{math.Inf(-1)}, len(wlse))
			blocks := make([]int, len(cuts)-1)
			for i := range blocks {
				blocks[i] = i
			}
			if reverse {
				slices.Reverse(blocks)
			}
			dq, dk, dv := make([]float64, len(q)), make([]float64, len(k)), make([]float64, len(v))
			for _, i := range blocks {
				bd := d
				bd.S = cuts[i+1] - cuts[i]
				kb, vb := keyBlock(k, d, cuts[i], cuts[i+1]), keyBlock(v, d, cuts[i], cuts[i+1])
				ob, lseb := DenseAt(q, kb, vb, bd, 0, cuts[i], causal, 0.8)
				MergeInto(o, lse, ob, lseb, bd)
				// Backward: each block uses the global o and lse; dq adds up, dk/dv are
				// the block's share of the full gradient.
				bq, bk, bv := DenseAtBackward(q, kb, vb, wo, wlse, do, bd, 0, cuts[i], causal, 0.8)
				for j := range bq {
					dq[j] += bq[j]
				}
				putKeyBlock(dk, bk, d, cuts[i], cuts[i+1])
				putKeyBlock(dv, bv, d, cuts[i], cuts[i+1])
			}
			checkClose(t, name+"o", o, wo, 1e-12)
			checkClose(t, name+"lse", lse, wlse, 1e-12)
			wdq, wdk, wdv := DenseBackward(q, k, v, wo, wlse, do, d, causal, 0.8)
			checkClose(t, name+"dq", dq, wdq, 1e-12)
			checkClose(t, name+"dk", dk, wdk, 1e-12)
			checkClose(t, name+"dv", dv, wdv, 1e-12)
		}
	}
}

// Row-level cases: −Inf on either or both sides, and lse gaps that would overflow a
// naive exp.
func TestMergeRowExtremes(t *testing.T) {
	inf := math.Inf(-1)
	for _, c := range []struct {
		l, lb      float64
		o, ob      []float64
		wantL      float64
		wantO      []float64
		tolL, tolO float64
	}{
		{inf, inf, []float64{0, 0}, []float64{0, 0}, inf, []float64{0, 0}, 0, 0},
		{inf, 2, []float64{0, 0}, []float64{1, -1}, 2, []float64{1, -1}, 0, 0},
		{2, inf, []float64{1, -1}, []float64{0, 0}, 2, []float64{1, -1}, 0, 0},
		{0, 0, []float64{1, 3}, []float64{3, 1}, math.Ln2, []float64{2, 2}, 1e-15, 1e-15},
		{-1000, 1000, []float64{5, 5}, []float64{1, 2}, 1000, []float64{1, 2}, 0, 1e-15},
		{1000, -1000, []float64{1, 2}, []float64{5, 5}, 1000, []float64{1, 2}, 0, 1e-15},
		{1e300, 1e300, []float64{1, 2}, []float64{3, 4}, 1e300, []float64{2, 3}, 0, 1e-15},
	} {
		o := slices.Clone(c.o)
		l := mergeRow(o, c.l, c.ob, c.lb)
		if math.IsNaN(l) || math.Abs(l-c.wantL) > c.tolL && l != c.wantL {
			t.Errorf("merge(%v, %v): lse %v, want %v", c.l, c.lb, l, c.wantL)
		}
		for i := range o {
			if math.IsNaN(o[i]) || math.Abs(o[i]-c.wantO[i]) > c.tolO {
				t.Errorf("merge(%v, %v): o %v, want %v", c.l, c.lb, o, c.wantO)
				break
			}
		}
	}
}
