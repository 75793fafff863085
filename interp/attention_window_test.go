package interp

import (
	"math"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// TestAttentionWindow: a sliding window shows query t the keys t−W < j ≤ t,
// alone, with packed documents (the later start wins) and with an explicit mask
// (both must show a key), checked against the definition.
func TestAttentionWindow(t *testing.T) {
	const B, T, H, Hk, D, W = 2, 7, 4, 2, 3, 3
	q := f64(sh(B, T, H, D), randF(1, B*T*H*D)...)
	k := f64(sh(B, T, Hk, D), randF(2, B*T*Hk*D)...)
	v := f64(sh(B, T, Hk, D), randF(3, B*T*Hk*D)...)
	hide := math.Inf(-1)
	inWindow := func(t, j int) bool { return j <= t && j > t-W }
	starts := []int64{0, 0, 0, 3, 3, 3, 3, 0, 1, 1, 1, 1, 5, 5}
	mb := randF(4, T*T)
	cases := []struct {
		name  string
		attrs ir.Attrs
		extra *tensor.Tensor
		bias  func(b, h, t, j int) float64
	}{
		{"window", ir.A("causal", true, "window", int64(W)), nil, func(b, h, t, j int) float64 {
			if !inWindow(t, j) {
				return hide
			}
			return 0
		}},
		{"window+docs", ir.A("causal", true, "window", int64(W), "docs", true),
			tensor.FromInts(tensor.I64, []int64{B, T}, starts), func(b, h, t, j int) float64 {
				if !inWindow(t, j) || int64(j) < starts[b*T+t] {
					return hide
				}
				return 0
			}},
		{"window+mask", ir.A("causal", true, "window", int64(W)), f64(sh(T, T), mb...),
			func(b, h, t, j int) float64 {
				if !inWindow(t, j) {
					return hide
				}
				return mb[t*T+j]
			}},
		{"window wider than T", ir.A("causal", true, "window", int64(T+4)), nil, func(b, h, t, j int) float64 {
			if j > t {
				return hide
			}
			return 0
		}},
	}
	for _, c := range cases {
		args := []*tensor.Tensor{q, k, v}
		if c.extra != nil {
			args = append(args, c.extra)
		}
		res := eval(t, ir.OpAttention, c.attrs, args...)
		o, lse := naiveAttention(q, k, v, 1/math.Sqrt(D), c.bias)
		wantF(t, c.name+" o", res[0], sh(B, T, H, D), 1e-13, o...)
		wantF(t, c.name+" lse", res[1], sh(B, H, T), 1e-13, lse...)
	}
}

// TestAttentionWindowGrad: attention_grad with a window, alone and with packed
// documents, against central differences of L = Σ do ⊙ attention(q, k, v).
func TestAttentionWindowGrad(t *testing.T) {
	const B, T, H, Hk, D = 1, 6, 2, 1, 2
	q := f64(sh(B, T, H, D), randF(1, B*T*H*D)...)
	k := f64(sh(B, T, Hk, D), randF(2, B*T*Hk*D)...)
	v := f64(sh(B, T, Hk, D), randF(3, B*T*Hk*D)...)
	do := f64(sh(B, T, H, D), randF(4, B*T*H*D)...)
	starts := tensor.FromInts(tensor.I64, []int64{B, T}, []int64{0, 0, 2, 2, 2, 2})
	for _, docs := range []bool{false, true} {
		attrs := ir.A("causal", true, "scale", 0.7, "window", int64(2))
		var extra []*tensor.Tensor
		if docs {
			attrs = ir.A("causal", true, "scale", 0.7, "window", int64(3), "docs", true)
			extra = append(extra, starts)
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
					t.Fatalf("docs=%v: d%c[%d] = %v, finite difference %v", docs, "qkv"[a], i, gs[a].F[i], num)
				}
			}
		}
	}
}
