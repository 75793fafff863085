package interp

import (
	"math"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// naiveAttention is attention for one (b, h) row set with an explicit visibility
// test and additive bias, straight from the definition.
func naiveAttention(q, k, v *tensor.Tensor, scale float64, bias func(b, h, t, j int) float64) (o, lse []float64) {
	B, T, H, D := int(q.Shape[0]), int(q.Shape[1]), int(q.Shape[2]), int(q.Shape[3])
	S, Hk := int(k.Shape[1]), int(k.Shape[2])
	o = make([]float64, B*T*H*D)
	lse = make([]float64, B*H*T)
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			hk := h / (H / Hk)
			for t := 0; t < T; t++ {
				s := make([]float64, S)
				mx := math.Inf(-1)
				for j := 0; j < S; j++ {
					var dot float64
					for i := 0; i < D; i++ {
						dot += q.F[((b*T+t)*H+h)*D+i] * k.F[((b*S+j)*Hk+hk)*D+i]
					}
					s[j] = scale*dot + bias(b, h, t, j)
					mx = math.Max(mx, s[j])
				}
				if math.IsInf(mx, -1) {
					lse[(b*H+h)*T+t] = mx
					continue
				}
				var z float64
				for j := range s {
					z += math.Exp(s[j] - mx)
				}
				for j := range s {
					p := math.Exp(s[j]-mx) / z
					for i := 0; i < D; i++ {
						o[((b*T+t)*H+h)*D+i] += p * v.F[((b*S+j)*Hk+hk)*D+i]
					}
				}
				lse[(b*H+h)*T+t] = mx + math.Log(z)
			}
		}
	}
	return o, lse
}

func TestAttention(t *testing.T) {
	const B, T, S, H, Hk, D = 2, 3, 4, 4, 2, 2
	q := f64(sh(B, T, H, D), randF(1, B*T*H*D)...)
	k := f64(sh(B, S, Hk, D), randF(2, B*S*Hk*D)...)
	v := f64(sh(B, S, Hk, D), randF(3, B*S*Hk*D)...)
	none := func(b, h, t, j int) float64 { return 0 }
	hide := math.Inf(-1)
	causal := func(b, h, t, j int) float64 {
		if j > t {
			return hide
		}
		return 0
	}
	// Plain GQA, default scale 1/sqrt(D).
	res := eval(t, ir.OpAttention, nil, q, k, v)
	o, lse := naiveAttention(q, k, v, 1/math.Sqrt(D), none)
	wantF(t, "gqa o", res[0], sh(B, T, H, D), 1e-14, o...)
	wantF(t, "gqa lse", res[1], sh(B, H, T), 1e-14, lse...)
	if res[1].DType != tensor.F32 {
		t.Errorf("lse dtype %v, want f32", res[1].DType)
	}
	// Causal.
	res = eval(t, ir.OpAttention, ir.A("causal", true, "scale", 0.5), q, k, v)
	o, lse = naiveAttention(q, k, v, 0.5, causal)
	wantF(t, "causal o", res[0], sh(B, T, H, D), 1e-14, o...)
	wantF(t, "causal lse", res[1], sh(B, H, T), 1e-14, lse...)
	// A bool mask [T,S] shared by batch and heads, with one fully hidden row.
	mb := []int64{1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0}
	mask := boolT(sh(T, S), mb...)
	res = eval(t, ir.OpAttention, ir.A("scale", 0.5), q, k, v, mask)
	o, lse = naiveAttention(q, k, v, 0.5, func(b, h, tt, j int) float64 {
		if mb[tt*S+j] == 0 {
			return hide
		}
		return 0
	})
	wantF(t, "bool mask o", res[0], sh(B, T, H, D), 1e-14, o...)
	wantF(t, "bool mask lse", res[1], sh(B, H, T), 1e-14, lse...)
	if !math.IsInf(res[1].F[1], -1) || res[0].F[(1*H+0)*D] != 0 {
		t.Errorf("hidden row: lse %v, o %v; want -Inf, 0", res[1].F[1], res[0].F[(1*H)*D])
	}
	// A float mask per (batch, head) [B,H,1,S], combined with causal.
	fm := randF(9, B*H*S)
	res = eval(t, ir.OpAttention, ir.A("causal", true, "scale", 0.5), q, k, v, f64(sh(B, H, 1, S), fm...))
	o, lse = naiveAttention(q, k, v, 0.5, func(b, h, tt, j int) float64 {
		return causal(b, h, tt, j) + fm[(b*H+h)*S+j]
	})
	wantF(t, "float mask o", res[0], sh(B, T, H, D), 1e-14, o...)
	wantF(t, "float mask lse", res[1], sh(B, H, T), 1e-14, lse...)
	// A per-batch mask [B,1,T,S].
	pb := randF(10, B*T*S)
	res = eval(t, ir.OpAttention, nil, q, k, v, f64(sh(B, 1, T, S), pb...))
	o, _ = naiveAttention(q, k, v, 1/math.Sqrt(D), func(b, h, tt, j int) float64 { return pb[(b*T+tt)*S+j] })
	wantF(t, "batch mask o", res[0], sh(B, T, H, D), 1e-14, o...)
}

// TestAttentionGrad checks attention_grad against central differences of
// L = Σ do ⊙ attention(q, k, v), with and without a per-head mask.
func TestAttentionGrad(t *testing.T) {
	const B, T, H, Hk, D = 1, 3, 2, 1, 2
	q := f64(sh(B, T, H, D), randF(1, B*T*H*D)...)
	k := f64(sh(B, T, Hk, D), randF(2, B*T*Hk*D)...)
	v := f64(sh(B, T, Hk, D), randF(3, B*T*Hk*D)...)
	do := f64(sh(B, T, H, D), randF(4, B*T*H*D)...)
	mask := f64(sh(1, H, T, T), randF(5, H*T*T)...)
	for _, withMask := range []bool{false, true} {
		attrs := ir.A("causal", true, "scale", 0.7)
		extra := []*tensor.Tensor{}
		if withMask {
			extra = append(extra, mask)
		}
		loss := func() float64 {
			o := eval1(t, ir.OpAttention, attrs, append([]*tensor.Tensor{q, k, v}, extra...)...)
			var s float64
			for i := range o.F {
				s += o.F[i] * do.F[i]
			}
			return s
		}
		fw := eval(t, ir.OpAttention, attrs, append([]*tensor.Tensor{q, k, v}, extra...)...)
		gs := eval(t, ir.OpAttentionGrad, attrs, append([]*tensor.Tensor{q, k, v, fw[0], fw[1], do}, extra...)...)
		for a, x := range []*tensor.Tensor{q, k, v} {
			for i := range x.F {
				old := x.F[i]
				x.F[i] = old + 1e-6
				up := loss()
				x.F[i] = old - 1e-6
				down := loss()
				x.F[i] = old
				num := (up - down) / 2e-6
				if math.Abs(num-gs[a].F[i]) > 1e-6 {
					t.Fatalf("mask=%v: d%c[%d] = %v, finite difference %v", withMask, "qkv"[a], i, gs[a].F[i], num)
				}
			}
		}
	}
}

func TestDilatedAttention(t *testing.T) {
	const B, T, H, D = 1, 8, 2, 2
	q := f64(sh(B, T, H, D), randF(1, B*T*H*D)...)
	k := f64(sh(B, T, H, D), randF(2, B*T*H*D)...)
	v := f64(sh(B, T, H, D), randF(3, B*T*H*D)...)
	// One branch with w ≥ T and r = 1 is exactly dense attention.
	dense := eval(t, ir.OpAttention, ir.A("causal", true, "scale", 0.5), q, k, v)
	dil := eval(t, ir.OpDilatedAttention, ir.A("segments", []int{16}, "dilations", []int{1},
		"causal", true, "scale", 0.5), q, k, v)
	wantF(t, "dilated = dense o", dil[0], sh(B, T, H, D), 1e-14, dense[0].F...)
	wantF(t, "dilated = dense lse", dil[1], sh(B, H, T), 1e-14, dense[1].F...)
	// Segments of 4, dilation 2, paper offsets: head h sees positions ≡ h (mod 2)
	// of its segment, so a row with (p mod 4) mod 2 ≠ h sees nothing.
	attrs := ir.A("segments", []int{4}, "dilations", []int{2}, "causal", true, "scale", 0.5)
	res := eval(t, ir.OpDilatedAttention, attrs, q, k, v)
	o, lse := naiveAttention(q, k, v, 0.5, func(b, h, tt, j int) float64 {
		if j > tt || tt/4 != j/4 || (tt%4)%2 != h || (j%4)%2 != h {
			return math.Inf(-1)
		}
		return 0
	})
	wantF(t, "dilated o", res[0], sh(B, T, H, D), 1e-14, o...)
	wantF(t, "dilated lse", res[1], sh(B, H, T), 1e-14, lse...)
	// The gradient op runs and matches a finite difference on one element.
	do := f64(sh(B, T, H, D), randF(4, B*T*H*D)...)
	gs := eval(t, ir.OpDilatedAttentionGrad, attrs, q, k, v, res[0], res[1], do)
	loss := func() float64 {
		o := eval1(t, ir.OpDilatedAttention, attrs, q, k, v)
		var s float64
		for i := range o.F {
			s += o.F[i] * do.F[i]
		}
		return s
	}
	for i := range q.F {
		old := q.F[i]
		q.F[i] = old + 1e-6
		up := loss()
		q.F[i] = old - 1e-6
		down := loss()
		q.F[i] = old
		if num := (up - down) / 2e-6; math.Abs(num-gs[0].F[i]) > 1e-6 {
			t.Fatalf("dq[%d] = %v, finite difference %v", i, gs[0].F[i], num)
		}
	}
	// Block offsets and a bad configuration.
	eval(t, ir.OpDilatedAttention, ir.A("segments", []int{4, 8}, "dilations", []int{1, 2},
		"offsets", "block", "causal", true), q, k, v)
	if _, err := EvalNode(&ir.Node{Op: ir.OpDilatedAttention, Attrs: ir.A("segments", []int{4},
		"dilations", []int{1}, "offsets", "nope")}, []*tensor.Tensor{q, k, v}, Options{}); err == nil {
		t.Error("offsets \"nope\": no error")
	}
}
