package ir

// VJP rules of the composite ops, written in primitive ops (GoMLX takes a fused
// op's gradient from its decomposition the same way), except attention, whose
// backward is its own op so that it never materialises the [T, S] scores.

// softmax: dx = y ⊙ (dy − Σ_axis dy ⊙ y)
func gradSoftmax(b *Builder, n *Node, dys []*Value) []*Value {
	y, dy := n.Result(), dys[0]
	axes := []int64{n.AttrInt("axis")}
	s := b.reduce(OpReduceSum, b.Mul(dy, y), axes)
	return []*Value{b.Mul(y, b.Sub(dy, s))}
}

// log_softmax: dx = dy − exp(y) ⊙ Σ_axis dy
func gradLogSoftmax(b *Builder, n *Node, dys []*Value) []*Value {
	y, dy := n.Result(), dys[0]
	axes := []int64{n.AttrInt("axis")}
	s := b.reduce(OpReduceSum, dy, axes)
	return []*Value{b.Sub(dy, b.Mul(b.Unary(OpExp, y), s))}
}

// normAxes lists the normalised dims axis..rank-1 of a norm node.
func normAxes(n *Node) []int64 {
	r := n.Args[0].Type.Rank()
	ax, _ := AxisIndex(n.AttrInt("axis"), r)
	var axes []int64
	for i := ax; i < r; i++ {
		axes = append(axes, int64(i))
	}
	return axes
}

// layer_norm(x, γ, β): x̂ = (x − μ)·r with r = 1/√(var + eps) (biased variance)
// over the normalised dims (N elements), y = γ ⊙ x̂ + β. With g = γ ⊙ dy:
//
//	dx = r·(g − mean(g) − x̂ ⊙ mean(g ⊙ x̂)),  dγ = Σ dy ⊙ x̂,  dβ = Σ dy
//
// where dγ and dβ sum over every dim γ and β were broadcast along.
func gradLayerNorm(b *Builder, n *Node, dys []*Value) []*Value {
	x, dy := n.Args[0], dys[0]
	axes := normAxes(n)
	// The fused backward when scale (and bias) span the normalised dims.
	spans := len(n.Args) > 1
	for _, p := range n.Args[1:] {
		spans = spans && p.Type.DType == x.Type.DType && T(p.Type.DType, x.Type.Shape[axes[0]:]...).SameShape(p.Type)
	}
	if spans {
		return b.Apply(OpLayerNormGrad, n.Attrs.Clone(), append(append([]*Value{}, n.Args...), dy)...)
	}
	eps := b.like(x, n.AttrFloat("eps"))
	mu := b.reduce(OpReduceMean, x, axes)
	xc := b.Sub(x, mu)
	r := b.Unary(OpRsqrt, b.Add(b.reduce(OpReduceMean, b.Mul(xc, xc), axes), eps))
	xhat := b.Mul(xc, r)
	g := dy
	if len(n.Args) > 1 {
		g = b.Mul(dy, n.Args[1])
	}
	mg := b.reduce(OpReduceMean, g, axes)
	mgx := b.reduce(OpReduceMean, b.Mul(g, xhat), axes)
	out := []*Value{b.Mul(r, b.Sub(b.Sub(g, mg), b.Mul(xhat, mgx)))}
	if len(n.Args) > 1 {
		out = append(out, b.SumTo(b.Mul(dy, xhat), n.Args[1].Type.Shape))
	}
	if len(n.Args) > 2 {
		out = append(out, b.SumTo(dy, n.Args[2].Type.Shape))
	}
	return out
}

// rms_norm(x, γ): x̂ = x·r with r = 1/√(mean(x²) + eps), y = γ ⊙ x̂. With g = γ ⊙ dy:
//
//	dx = r·(g − x̂ ⊙ mean(g ⊙ x̂)),  dγ = Σ dy ⊙ x̂
func gradRMSNorm(b *Builder, n *Node, dys []*Value) []*Value {
	x, dy := n.Args[0], dys[0]
	axes := normAxes(n)
	// The fused backward when the scale (if any) spans the normalised dims.
	if len(n.Args) == 1 {
		return b.Apply(OpRMSNormGrad, n.Attrs.Clone(), x, dy)
	}
	if s := n.Args[1]; s.Type.DType == x.Type.DType && T(s.Type.DType, x.Type.Shape[axes[0]:]...).SameShape(s.Type) {
		return b.Apply(OpRMSNormGrad, n.Attrs.Clone(), x, s, dy)
	}
	eps := b.like(x, n.AttrFloat("eps"))
	r := b.Unary(OpRsqrt, b.Add(b.reduce(OpReduceMean, b.Mul(x, x), axes), eps))
	xhat := b.Mul(x, r)
	g := dy
	if len(n.Args) > 1 {
		g = b.Mul(dy, n.Args[1])
	}
	mgx := b.reduce(OpReduceMean, b.Mul(g, xhat), axes)
	out := []*Value{b.Mul(r, b.Sub(g, b.Mul(xhat, mgx)))}
	if len(n.Args) > 1 {
		out = append(out, b.SumTo(b.Mul(dy, xhat), n.Args[1].Type.Shape))
	}
	return out
}

// attention(q, k, v, [mask]) → (o, lse): attention_grad(q, k, v, o, lse, do, [mask])
// gives dq, dk, dv (the FlashAttention-2 backward). The mask (or the doc starts) gets
// no cotangent.
func gradAttention(b *Builder, n *Node, dys []*Value) []*Value {
	var mask *Value
	if len(n.Args) == 4 {
		mask = n.Args[3]
	}
	d := b.attentionGrad(OpAttentionGrad, n, dys, mask)
	return append(d, make([]*Value, len(n.Args)-3)...)
}

// dilated_attention(q, k, v, [docs]) → (o, lse): dilated_attention_grad(q, k, v, o, lse,
// do, [docs]), exact including the branch-merge weights (docs/design.md §3).
func gradDilatedAttention(b *Builder, n *Node, dys []*Value) []*Value {
	d := b.attentionGrad(OpDilatedAttentionGrad, n, dys, DocStarts(n))
	return append(d, make([]*Value, len(n.Args)-3)...)
}

// attentionGrad emits the backward op of an attention node. The kernels take only
// do; a cotangent of lse as well is folded in exactly by one extra head feature.
// The kernels compute D = Σ_i do_i·o_i and dS = P ⊙ (dP − D), while
// ∂lse_t/∂s_tj = P_tj adds dlse_t to every dS_tj. So they run on q' = [q, 0],
// k' = [k, 0], v' = [v, 0], o' = [o, 1], do' = [do, −dlse]: the zero column leaves
// scores and dP unchanged, and D' = D − dlse. The first D features of dq', dk', dv'
// are the answer. The scale is pinned because the head size changes.
func (b *Builder) attentionGrad(op Op, n *Node, dys []*Value, mask *Value) []*Value {
	q, k, v := n.Args[0], n.Args[1], n.Args[2]
	o, lse := n.Results[0], n.Results[1]
	do, dlse := dys[0], dys[1]
	if do == nil {
		do = b.Full(o.Type, 0)
	}
	attrs := n.Attrs.Clone()
	args := []*Value{q, k, v, o, lse, do}
	if dlse != nil {
		attrs = attrs.With("scale", AttentionScale(n))
		pad := func(x *Value, fill *Value) *Value {
			if fill == nil {
				fill = b.Full(withDim(x.Type, 3, 1), 0)
			}
			return b.Apply1(OpConcat, A("axis", int64(3)), x, fill)
		}
		sh := q.Type.Shape
		// dlse [B,H,T] → [B,T,H,1], negated, in q's dtype.
		dl := b.Cast(b.Neg(dlse), q.Type.DType)
		dl = b.Reshape(b.Transpose(dl, 0, 2, 1), sh[0], sh[1], sh[2], 1)
		args = []*Value{pad(q, nil), pad(k, nil), pad(v, nil),
			pad(o, b.Full(withDim(o.Type, 3, 1), 1)), lse, pad(do, dl)}
	}
	if mask != nil {
		args = append(args, mask)
	}
	grads := append([]*Value(nil), b.Apply(op, attrs, args...)[:3]...)
	if dlse != nil {
		for i, g := range grads {
			g4 := n.Args[i].Type.Shape
			grads[i] = b.Apply1(OpSlice, A("axes", []int64{3}, "starts", []int64{0},
				"ends", []int64{g4[3]}, "steps", []int64{1}), g)
		}
	}
	return grads
}

// lossWeights returns, for a loss node over logits [N, C] and labels [N], the
// per-row weight [N, 1] of the cotangent of each row's loss (zero on ignored rows,
// divided by the count of kept rows for the mean, as PyTorch) and the one-hot
// matrix of the labels [N, C] in the logits' dtype.
func (b *Builder) lossWeights(n *Node, dy *Value) (w, onehot *Value) {
	x, labels := n.Args[0], n.Args[1]
	nr, c := x.Type.Shape[0], x.Type.Shape[1]
	dt, lt := x.Type.DType, labels.Type.DType
	classes := b.Apply1(OpRange, A("start", 0.0, "delta", 1.0, "count", c, "dtype", lt))
	col := b.Reshape(labels, nr, 1)
	onehot = b.Cast(b.bin(OpEq, col, classes), dt)
	// Without ignore_index every row counts (the interpreter's and ONNX's rule).
	kept := b.Full(T(dt, nr), 1)
	if _, ok := n.Attrs.Get("ignore_index"); ok {
		ignore := b.Scalar(lt, float64(n.AttrInt("ignore_index")))
		kept = b.Cast(b.Unary(OpNot, b.bin(OpEq, labels, ignore)), dt)
	}
	switch n.AttrString("reduction") {
	case "none", "sum":
		w = b.Mul(kept, dy)
	default: // mean over the kept rows
		count := b.ReduceSum(kept, false)
		w = b.Mul(kept, b.Div(dy, count))
	}
	return b.Reshape(w, nr, 1), onehot
}

// softmax_cross_entropy: ℓ_i = logsumexp(x_i) − x_{i,y_i}, so
// dx_i = w_i·(softmax(x_i) − onehot(y_i)); the labels get none.
func gradCrossEntropy(b *Builder, n *Node, dys []*Value) []*Value {
	w, onehot := b.lossWeights(n, dys[0])
	p := b.Softmax(n.Args[0], 1)
	return []*Value{b.Mul(w, b.Sub(p, onehot)), nil}
}

// nll_loss: ℓ_i = −x_{i,y_i}, so dx_i = −w_i·onehot(y_i); the labels get none.
func gradNLLLoss(b *Builder, n *Node, dys []*Value) []*Value {
	w, onehot := b.lossWeights(n, dys[0])
	return []*Value{b.Neg(b.Mul(w, onehot)), nil}
}
