package ir

import "fmt"

// Fused linear cross-entropy: the output projection and the loss as one op, so the
// [tokens, vocab] logits are never stored (docs/design.md §4). Kernels compute it chunk
// by chunk over the rows (tokens): the logits of one chunk of rows, then an online
// log-sum-exp per row (Milakov and Gimelshein, "Online normalizer calculation for
// softmax", arXiv 1805.02867). The backward recomputes each chunk of logits instead
// of saving them, turns it in place into the gradient of the logits, and
// accumulates dh and dw from it (Liger Kernel's FLCE, arXiv 2410.10989; Apple's Cut
// Cross-Entropy, arXiv 2411.09009), so the extra memory is one chunk.
//
//	%loss = fused_linear_cross_entropy(%h, %w, %labels) {transpose_w, ignore_index=-100,
//	            reduction="mean", chunk_rows=8192} : f32[]
//
// equals softmax_cross_entropy(matmul(%h, %w) {transpose_b=transpose_w}, %labels)
// with the same ignore_index and reduction: h is [N, d], w is [d, V] ([V, d] with
// transpose_w), labels are integers [N]. chunk_rows is the number of rows whose
// [chunk_rows, V] logits a kernel holds at once; 0 or absent lets the backend
// choose (the GPU from a byte budget, codegen/cuda.CEChunkBytes). It never changes
// the result beyond rounding.
//
//	%dh, %dw = fused_linear_cross_entropy_grad(%h, %w, %labels, %dloss) {…same attrs}
//
// is its vector-Jacobian product: dloss has the loss's type, dh and dw the types of
// h and w. With p = softmax(h·w) per row and the row weight c_i (dloss, divided by
// the count of rows not ignored for the mean, zero on ignored rows),
// G = c ⊙ (p − onehot(labels)), dh = G·wᵀ and dw = hᵀ·G, accumulated chunk by chunk.

var flceAttrs = []AttrSpec{{"transpose_w", AttrBool}, {"ignore_index", AttrInt},
	{"reduction", AttrString}, {"chunk_rows", AttrInt}}

func init() {
	def(OpFusedLinearCrossEntropy, OpInfo{Name: "fused_linear_cross_entropy", MinArgs: 3,
		MaxArgs: 3, Attrs: flceAttrs, Defaults: lossDefaults, Infer: inferFLCE})
	def(OpFusedLinearCrossEntropyGrad, OpInfo{Name: "fused_linear_cross_entropy_grad",
		MinArgs: 4, MaxArgs: 4, Attrs: flceAttrs, Defaults: lossDefaults, Infer: inferFLCEGrad,
		NoGrad: true})
}

// FLCEDims returns the rows N, hidden size d and vocabulary size V of a
// fused_linear_cross_entropy(_grad) node's arguments, or an error naming them.
func FLCEDims(h, w, labels Type, transposeW bool) (n, d, v int64, err error) {
	if h.Rank() != 2 || w.Rank() != 2 || !h.DType.IsFloat() || h.DType != w.DType {
		return 0, 0, 0, fmt.Errorf("needs h [N,d] and w of one floating-point dtype, got %v and %v", h, w)
	}
	n, d = h.Shape[0], h.Shape[1]
	wd, v := w.Shape[0], w.Shape[1]
	if transposeW {
		wd, v = v, wd
	}
	if wd != d {
		return 0, 0, 0, fmt.Errorf("h %v does not fit w %v (transpose_w=%v)", h, w, transposeW)
	}
	if labels.Rank() != 1 || !labels.DType.IsInt() || labels.Shape[0] != n {
		return 0, 0, 0, fmt.Errorf("needs integer labels [%d], got %v", n, labels)
	}
	return n, d, v, nil
}

func inferFLCE(n *Node) ([]Type, error) {
	h, w, l := n.Args[0].Type, n.Args[1].Type, n.Args[2].Type
	rows, _, _, err := FLCEDims(h, w, l, n.AttrBool("transpose_w"))
	if err != nil {
		return nil, err
	}
	if c := n.AttrInt("chunk_rows"); c < 0 {
		return nil, fmt.Errorf("chunk_rows %d must be >= 0", c)
	}
	switch r := n.AttrString("reduction"); r {
	case "mean", "sum":
		return one(T(h.DType)), nil
	case "none":
		return one(T(h.DType, rows)), nil
	default:
		return nil, fmt.Errorf("reduction %q: want mean, sum or none", r)
	}
}

func inferFLCEGrad(n *Node) ([]Type, error) {
	fwd := &Node{Op: OpFusedLinearCrossEntropy, Args: n.Args[:3], Attrs: n.Attrs}
	ts, err := inferFLCE(fwd)
	if err != nil {
		return nil, err
	}
	if dl := n.Args[3].Type; !dl.Equal(ts[0]) {
		return nil, fmt.Errorf("dloss %v does not fit the loss %v", dl, ts[0])
	}
	return []Type{n.Args[0].Type, n.Args[1].Type}, nil
}

// fused_linear_cross_entropy: its own backward op, which recomputes the logits
// chunk by chunk; the labels get no cotangent.
func gradFLCE(b *Builder, n *Node, dys []*Value) []*Value {
	rs := b.Apply(OpFusedLinearCrossEntropyGrad, n.Attrs.Clone(), n.Args[0], n.Args[1],
		n.Args[2], dys[0])
	return []*Value{rs[0], rs[1], nil}
}
