package perf

import (
	"math"
	"testing"
)

// TestFwdFLOPs: causal attention counts T²/2 pairs, packed documents their own
// lengths, and a window W the T·W − W²/2 pairs it attends to (all when W ≥ T).
func TestFwdFLOPs(t *testing.T) {
	const unit = 4 * 2 * 8 * 128 // 4·B·H·D
	for _, c := range []struct {
		s     AttentionShape
		pairs float64
	}{
		{AttentionShape{B: 2, T: 1000, H: 8, D: 128, Causal: true}, 1000 * 1000 / 2},
		{AttentionShape{B: 2, T: 1000, H: 8, D: 128}, 1000 * 1000},
		{AttentionShape{B: 2, T: 1000, H: 8, D: 128, Causal: true, Docs: 4}, 4 * 250 * 250 / 2},
		{AttentionShape{B: 2, T: 1000, H: 8, D: 128, Causal: true, Window: 100}, 1000*100 - 100*100/2},
		{AttentionShape{B: 2, T: 1000, H: 8, D: 128, Causal: true, Window: 4000}, 1000 * 1000 / 2},
	} {
		if got, want := c.s.FwdFLOPs(), unit*c.pairs; math.Abs(got-want) > 1e-9*want {
			t.Errorf("%+v: %g FLOPs, want %g", c.s, got, want)
		}
	}
}
