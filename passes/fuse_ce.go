package passes

import "github.com/lcc-dev/lcc/ir"

// This file fuses the output projection with the loss (docs/design.md §4): the
// [tokens, vocab] logits of matmul(h, w) that feed only a cross-entropy become one
// fused_linear_cross_entropy node, whose kernels never store them. Run it before
// autodiff so the backward uses the op's chunked gradient too; it only fires when
// nothing else reads the logits, so a model whose logits are an output keeps them
// (drop that output first when only the loss is wanted, as in training).

// FuseCrossEntropy rewrites a linear layer followed by cross-entropy into
// fused_linear_cross_entropy.
var FuseCrossEntropy = Register(withDoc(Rewrite("fuse-cross-entropy", fuseCEPatterns, 0),
	"fuse matmul + cross-entropy into fused_linear_cross_entropy (no [tokens, vocab] logits)"))

func withDoc(p Pass, doc string) Pass { p.Doc = doc; return p }

var fuseCEPatterns = []Pattern{
	// softmax_cross_entropy(reshape*(matmul(h, w)), y) -> fused_linear_cross_entropy(h', w, y)
	{Name: "matmul-softmax-ce", Root: ir.OpSoftmaxCrossEntropy, Rewrite: fuseSoftmaxCE},
	// nll_loss(reshape*(log_softmax(reshape*(matmul(h, w)))), y) -> fused_linear_cross_entropy(h', w, y)
	{Name: "matmul-log-softmax-nll", Root: ir.OpNLLLoss, Rewrite: fuseLogSoftmaxNLL},
}

func fuseSoftmaxCE(e *Editor, n *ir.Node, b *ir.Builder) bool {
	return fuseCE(e, n, b, n.Args[0])
}

func fuseLogSoftmaxNLL(e *Editor, n *ir.Node, b *ir.Builder) bool {
	ls := throughRowReshapes(e, n.Args[0])
	if ls == nil || ls.Def == nil || ls.Def.Op != ir.OpLogSoftmax || !e.ReadOnce(ls) {
		return false
	}
	r := ls.Type.Rank()
	if ax, err := ir.AxisIndex(ls.Def.AttrInt("axis"), r); err != nil || ax != r-1 {
		return false
	}
	return fuseCE(e, n, b, ls.Def.Args[0])
}

// fuseCE replaces the loss node n, whose logits are x [N, V] up to row-preserving
// reshapes, by the fused op when x comes from a linear layer read only by n.
func fuseCE(e *Editor, n *ir.Node, b *ir.Builder, x *ir.Value) bool {
	y := throughRowReshapes(e, x)
	if y == nil || y.Def == nil || y.Def.Op != ir.OpMatMul || !e.ReadOnce(y) {
		return false
	}
	m := y.Def
	h, w := m.Args[0], m.Args[1]
	if m.AttrBool("transpose_a") || w.Type.Rank() != 2 || h.Type.Rank() < 2 {
		return false
	}
	rows, vocab := n.Args[0].Type.Shape[0], n.Args[0].Type.Shape[1]
	d := h.Type.Shape[h.Type.Rank()-1]
	if y.Type.Shape[y.Type.Rank()-1] != vocab || h.Type.Numel() != rows*d {
		return false // the matmul broadcast h over batch dims of w, or rows do not match
	}
	if h.Type.Rank() != 2 {
		h = b.Reshape(h, rows, d)
	}
	attrs := ir.A("transpose_w", m.AttrBool("transpose_b"),
		"reduction", n.AttrString("reduction"))
	if ig, ok := n.Attrs.Get("ignore_index"); ok {
		attrs = attrs.With("ignore_index", ig)
	}
	fused := b.Apply1(ir.OpFusedLinearCrossEntropy, attrs, h, w, n.Args[1])
	if b.Err() != nil {
		return true // the driver reports the builder's error
	}
	e.Replace(n.Result(), fused)
	return true
}

// throughRowReshapes follows v back through reshapes that keep the last dim (so
// rows map to rows in order) whose results are read only once; it returns the
// first value that is not such a reshape, or nil when a reshape's result is read
// elsewhere. The caller checks the returned value's uses.
func throughRowReshapes(e *Editor, v *ir.Value) *ir.Value {
	last := func(t ir.Type) int64 { return t.Shape[t.Rank()-1] }
	for v.Def != nil && v.Def.Op == ir.OpReshape {
		src := v.Def.Args[0]
		if src.Type.Rank() == 0 || v.Type.Rank() == 0 || last(src.Type) != last(v.Type) ||
			!e.ReadOnce(v) {
			return nil
		}
		v = src
	}
	return v
}
