package onnx

// nn.Embedding's padding_idx.
//
// PyTorch's embedding backward leaves the padding_idx row without the gradient of
// the positions that look it up (Gemma's and BERT's embeddings pad with token 0),
// while the forward reads it as any row. ONNX's Gather has no such attribute; the
// exporter's provenance keeps it, as the FX node's third argument
// (aten.embedding.default(%weight, %ids, 0)). The lowering gives those positions
// the row through stop_gradient, so the row trains only through its other uses (a
// tied head), as in PyTorch.

import (
	"regexp"
	"strconv"

	"github.com/lcc-dev/lcc/ir"
)

// embeddingRE reads an FX embedding's padding_idx: "aten.embedding.default](args =
// (%w, %ids, 0)".
var embeddingRE = regexp.MustCompile(`aten\.embedding\.default\]\(args = \(%[A-Za-z0-9_]+, %[A-Za-z0-9_]+, (-?[0-9]+)`)

// paddingIdx returns the padding_idx of n's FX embedding, if it has one.
func paddingIdx(n *Node) (int64, bool) {
	mm := embeddingRE.FindStringSubmatch(n.Metadata[fxNode])
	if mm == nil {
		return 0, false
	}
	p, err := strconv.ParseInt(mm[1], 10, 64)
	return p, err == nil && p >= 0
}

// withPadding is rows = gather(w, ids) with the positions whose id is padding_idx
// read through stop_gradient, when n is an embedding with one; else rows.
func (c *nodeCtx) withPadding(rows, w, ids *ir.Value) *ir.Value {
	p, ok := paddingIdx(c.n)
	if !ok || w.Param == nil || !ids.Type.DType.IsInt() || rows.Type.Rank() != ids.Type.Rank()+1 {
		return rows
	}
	b := c.b
	pad := b.Apply1(ir.OpEq, nil, ids, b.Scalar(ids.Type.DType, float64(p)))
	pad = b.Reshape(pad, append(append([]int64(nil), ids.Type.Shape...), 1)...)
	frozen := b.Apply1(ir.OpStopGradient, nil, rows)
	return b.Apply1(ir.OpWhere, nil, pad, frozen, rows)
}
