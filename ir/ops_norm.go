package ir

import "fmt"

// The fused RMSNorm backward. With x̂ = x·r, r = 1/√(mean(x²) + eps) over the
// normalised dims (axis..rank−1) and g = dy ⊙ scale (dy without a scale),
//
//	dx = r·(g − x̂ ⊙ mean(g ⊙ x̂)),   dscale = Σ_rows dy ⊙ x̂
//
//	%dx, %dscale = rms_norm_grad(%x, %scale, %dy) {axis=-1, eps=1e-06}
//	%dx = rms_norm_grad(%x, %dy) {axis=-1, eps=1e-06}
//
// scale has exactly the normalised dims (gradRMSNorm keeps the decomposed
// backward for a scale that broadcasts). Backends recompute r per row in fp32 and
// reduce dscale over rows in a fixed order, so one kernel (and a column reduction)
// replaces the decomposition's string of reductions.

// The fused LayerNorm backward, with x̂ = (x − μ)·r, r = 1/√(var + eps)
// (biased) and g = dy ⊙ scale:
//
//	dx = r·(g − mean(g) − x̂ ⊙ mean(g ⊙ x̂)),  dscale = Σ_rows dy ⊙ x̂,  dbias = Σ_rows dy
//
//	%dx, %dscale, %dbias = layer_norm_grad(%x, %scale, %bias, %dy) {axis=-1, eps=1e-05}
//	%dx, %dscale = layer_norm_grad(%x, %scale, %dy) {axis=-1, eps=1e-05}
//
// bias is read only for its type; scale and bias have exactly the normalised dims
// (gradLayerNorm keeps the decomposed backward otherwise, and without a scale).

func init() {
	def(OpLayerNormGrad, OpInfo{Name: "layer_norm_grad", MinArgs: 3, MaxArgs: 4,
		Attrs: normAt, Defaults: normDefaults, Infer: inferLayerNormGrad, NoGrad: true})
	def(OpRMSNormGrad, OpInfo{Name: "rms_norm_grad", MinArgs: 2, MaxArgs: 3,
		Attrs: normAt, Defaults: normDefaults, Infer: inferRMSNormGrad, NoGrad: true})
}

func inferRMSNormGrad(n *Node) ([]Type, error) {
	x, dy := n.Args[0].Type, n.Args[len(n.Args)-1].Type
	if !x.DType.IsFloat() || !dy.Equal(x) {
		return nil, fmt.Errorf("needs a floating-point x and dy of its type, got %v and %v", x, dy)
	}
	ax, err := AxisIndex(n.AttrInt("axis"), x.Rank())
	if err != nil {
		return nil, err
	}
	if len(n.Args) == 2 {
		return one(x), nil
	}
	s := n.Args[1].Type
	if s.DType != x.DType || !T(x.DType, x.Shape[ax:]...).SameShape(s) {
		return nil, fmt.Errorf("scale %v must have the normalised dims %v of x", s, x.Shape[ax:])
	}
	return []Type{x, s}, nil
}

func inferLayerNormGrad(n *Node) ([]Type, error) {
	x, dy := n.Args[0].Type, n.Args[len(n.Args)-1].Type
	if !x.DType.IsFloat() || !dy.Equal(x) {
		return nil, fmt.Errorf("needs a floating-point x and dy of its type, got %v and %v", x, dy)
	}
	ax, err := AxisIndex(n.AttrInt("axis"), x.Rank())
	if err != nil {
		return nil, err
	}
	out := []Type{x}
	for _, p := range n.Args[1 : len(n.Args)-1] {
		if p.Type.DType != x.DType || !T(x.DType, x.Shape[ax:]...).SameShape(p.Type) {
			return nil, fmt.Errorf("scale/bias %v must have the normalised dims %v of x", p.Type, x.Shape[ax:])
		}
		out = append(out, p.Type)
	}
	return out, nil
}
