package interp

import (
	"fmt"

	"github.com/lcc-dev/lcc/interp/attention"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// The attention kernels are thin: package attention holds the algorithms
// (dense, dilated, their backwards and the merge), and this file only reads
// the node's operands and attributes and picks the variant. Options.rounding
// passes the GPU kernels' roundings in when the CPU emulates a bf16 run, so
// that a check compares like with like.
func init() {
	Register(ir.OpAttention, kernelAttention)
	Register(ir.OpAttentionGrad, kernelAttentionGrad)
	Register(ir.OpDilatedAttention, kernelDilated)
	Register(ir.OpDilatedAttentionGrad, kernelDilatedGrad)
}

// attnDims reads the sizes of q [B,T,Hq,D] and k [B,S,Hkv,D].
func attnDims(q, k *tensor.Tensor) attention.Dims {
	return attention.Dims{B: int(q.Shape[0]), T: int(q.Shape[1]), S: int(k.Shape[1]),
		Hq: int(q.Shape[2]), Hkv: int(k.Shape[2]), D: int(q.Shape[3])}
}

// floatsResult wraps float64 data as n's result i.
func floatsResult(n *ir.Node, i int, data []float64) *tensor.Tensor {
	t := n.Results[i].Type
	return &tensor.Tensor{DType: t.DType, Shape: append([]int64{}, t.Shape...), F: data}
}

// kernelAttention is softmax(scale·q·kᵀ + mask)·v per (batch, query head), with kv
// head h/(Hq/Hkv) (grouped-query attention). With causal, query t sees keys j ≤ t.
// The optional mask broadcasts to [B,H,T,S]: a bool (or integer) mask is true
// where a key is visible, a float mask is added to the scores. A row that sees no
// key gives o = 0 and lse = −Inf.
func kernelAttention(n *ir.Node, args []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
	q, k, v := args[0], args[1], args[2]
	d := attnDims(q, k)
	scale := ir.AttentionScale(n)
	causal := n.AttrBool("causal")
	var o, lse []float64
	// Three forms, as the op allows: packed documents (a doc-starts operand, the
	// mask derived from positions), no mask (causal or full), or an explicit
	// mask, which package attention takes one [T,S] block at a time.
	if starts := attnStarts(n, args, d); starts != nil {
		o, lse = attention.DenseDocs(q.F, k.F, v.F, d, starts, 0, 0, scale, opts.rounding(n))
	} else if len(args) == 3 {
		o, lse = attention.DenseRounded(q.F, k.F, v.F, d, causal, scale, opts.rounding(n))
	} else {
		m := newMask(args[3], d, causal, ir.Window(n))
		// Every block writes a disjoint part of o and lse; together they cover both.
		o, lse = make([]float64, len(q.F)), make([]float64, d.B*d.Hq*d.T)
		m.each(d, func(sub attention.Dims, b, h int, mask []float64) {
			qs, ks, vs := m.sliceQ(q.F, d, b, h), m.sliceKV(k.F, d, b, h), m.sliceKV(v.F, d, b, h)
			os, ls := attention.DenseMasked(qs, ks, vs, sub, mask, scale)
			m.putQ(o, os, d, b, h)
			m.putLSE(lse, ls, d, b, h)
		})
	}
	return []*tensor.Tensor{floatsResult(n, 0, o), floatsResult(n, 1, lse)}, nil
}

// kernelAttentionGrad is the exact gradient of attention given its inputs, its
// outputs o and lse, and the output gradient do (the mask gets none).
func kernelAttentionGrad(n *ir.Node, args []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
	q, k, v, o, lse, do := args[0], args[1], args[2], args[3], args[4], args[5]
	d := attnDims(q, k)
	scale := ir.AttentionScale(n)
	causal := n.AttrBool("causal")
	var dq, dk, dv []float64
	// The backward recomputes the probabilities from lse (FlashAttention-2's
	// backward), so it takes the forward's outputs, not its softmax.
	if starts := attnStarts(n, args, d); starts != nil {
		dq, dk, dv = attention.DenseDocsBackward(q.F, k.F, v.F, o.F, lse.F, do.F, d, starts, 0, 0, scale,
			opts.rounding(n))
	} else if len(args) == 6 {
		dq, dk, dv = attention.DenseBackwardRounded(q.F, k.F, v.F, o.F, lse.F, do.F, d, causal, scale,
			opts.rounding(n))
	} else {
		m := newMask(args[6], d, causal, ir.Window(n))
		// dk and dv start at zero: the blocks of a kv head's query heads add into them.
		dq, dk, dv = make([]float64, len(q.F)), make([]float64, len(k.F)), make([]float64, len(v.F))
		m.each(d, func(sub attention.Dims, b, h int, mask []float64) {
			gq, gk, gv := attention.DenseMaskedBackward(m.sliceQ(q.F, d, b, h),
				m.sliceKV(k.F, d, b, h), m.sliceKV(v.F, d, b, h), m.sliceQ(o.F, d, b, h),
				m.sliceLSE(lse.F, d, b, h), m.sliceQ(do.F, d, b, h), sub, mask, scale)
			m.putQ(dq, gq, d, b, h)
			m.addKV(dk, gk, d, b, h)
			m.addKV(dv, gv, d, b, h)
		})
	}
	return []*tensor.Tensor{floatsResult(n, 0, dq), floatsResult(n, 1, dk), floatsResult(n, 2, dv)}, nil
}

// dilatedConfig reads a dilated attention's attributes.
func dilatedConfig(n *ir.Node, d attention.Dims) (attention.DilatedConfig, error) {
	seg, dil := n.AttrInts("segments"), n.AttrInts("dilations")
	cfg := attention.DilatedConfig{Causal: n.AttrBool("causal")}
	for i := range seg {
		cfg.Branches = append(cfg.Branches, attention.Branch{Segment: int(seg[i]), Dilation: int(dil[i])})
	}
	switch o := n.AttrString("offsets"); o {
	case "paper":
		cfg.Offsets = attention.Paper
	case "block":
		cfg.Offsets = attention.Block
	default:
		return cfg, fmt.Errorf("offsets %q: want paper or block", o)
	}
	// Dilated segments cut queries and keys at the same positions; a cross
	// attention (S ≠ T) has no such alignment.
	if d.S != d.T {
		return cfg, fmt.Errorf("dilated attention needs as many keys as queries, got T=%d, S=%d", d.T, d.S)
	}
	return cfg, cfg.Validate()
}

// kernelDilated is LongNet dilated attention (docs/design.md §3) via package attention.
func kernelDilated(n *ir.Node, args []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
	q, k, v := args[0], args[1], args[2]
	d := attnDims(q, k)
	cfg, err := dilatedConfig(n, d)
	if err != nil {
		return nil, err
	}
	var o, lse []float64
	if starts := docStarts(n, args); starts != nil {
		o, lse = attention.DilatedDocs(q.F, k.F, v.F, d, cfg, starts, ir.AttentionScale(n), opts.rounding(n))
	} else {
		o, lse = attention.DilatedRounded(q.F, k.F, v.F, d, cfg, ir.AttentionScale(n), opts.rounding(n))
	}
	return []*tensor.Tensor{floatsResult(n, 0, o), floatsResult(n, 1, lse)}, nil
}

// kernelDilatedGrad is the exact gradient of dilated attention.
func kernelDilatedGrad(n *ir.Node, args []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
	q, k, v, o, lse, do := args[0], args[1], args[2], args[3], args[4], args[5]
	d := attnDims(q, k)
	cfg, err := dilatedConfig(n, d)
	if err != nil {
		return nil, err
	}
	var dq, dk, dv []float64
	if starts := docStarts(n, args); starts != nil {
		dq, dk, dv = attention.DilatedDocsBackward(q.F, k.F, v.F, o.F, lse.F, do.F, d, cfg, starts,
			ir.AttentionScale(n), opts.rounding(n))
	} else {
		dq, dk, dv = attention.DilatedBackwardRounded(q.F, k.F, v.F, o.F, lse.F, do.F, d, cfg,
			ir.AttentionScale(n), opts.rounding(n))
	}
	return []*tensor.Tensor{floatsResult(n, 0, dq), floatsResult(n, 1, dk), floatsResult(n, 2, dv)}, nil
}

// attnMask is an attention mask broadcast to [B,H,T,S] and folded with causality
// into additive [T,S] blocks. Package attention takes one [T,S] mask per call, so
// the call is split per batch element when the mask varies over batch, and per
// (batch, head) when it varies over heads.
type attnMask struct {
	t       *tensor.Tensor
	st      []int // strides of the mask over [B,H,T,S], 0 where broadcast
	causal  bool
	window  int  // a sliding window (ir/window.go), 0 for none
	perB    bool // the mask varies over batch
	perH    bool // the mask varies over heads
	isFloat bool
}

// attnStarts is the first visible key of each query of dense attention n when
// it is a document mask, a sliding window (ir/window.go), or both (the later
// start), [B·T]; nil when n has neither. Both are "causal and j ≥ start[t]",
// which is the form package attention's DenseDocs takes.
func attnStarts(n *ir.Node, args []*tensor.Tensor, d attention.Dims) []int64 {
	docs, w := docStarts(n, args), ir.Window(n)
	operands := 3 // q, k, v; then o, lse, do for the gradient, then the doc starts
	if n.Op == ir.OpAttentionGrad {
		operands = 6
	}
	if docs != nil {
		operands++
	}
	if w <= 0 || len(args) > operands {
		return docs // no window, or a window with an explicit mask (attnMask takes it)
	}
	starts := make([]int64, d.B*d.T)
	for b := range d.B {
		for t := range d.T {
			s := ir.WindowStart(int64(t), w)
			if docs != nil {
				s = max(s, docs[b*d.T+t])
			}
			starts[b*d.T+t] = s
		}
	}
	return starts
}

// newMask reads an explicit mask broadcast to [B, Hq, T, S] through strides, so
// a [1,1,T,S] mask is never expanded per head; perB and perH record which axes
// it really varies over, since each sub-call below costs a separate attention.
func newMask(t *tensor.Tensor, d attention.Dims, causal bool, window int64) *attnMask {
	full := []int64{int64(d.B), int64(d.Hq), int64(d.T), int64(d.S)}
	st := bcastStrides(t.Shape, full)
	return &attnMask{t: t, st: st, causal: causal, window: int(window), perB: st[0] != 0 && d.B > 1,
		perH: st[1] != 0 && d.Hq > 1, isFloat: t.DType.IsFloat()}
}

// block returns the additive [T,S] mask of batch b, head h.
func (m *attnMask) block(d attention.Dims, b, h int) []float64 {
	out := make([]float64, d.T*d.S)
	base := b*m.st[0] + h*m.st[1]
	for t := 0; t < d.T; t++ {
		for j := 0; j < d.S; j++ {
			off := base + t*m.st[2] + j*m.st[3]
			var v float64
			switch {
			// Causality wins over the mask: a float mask of 0 above the diagonal still
			// hides the key.
			case m.causal && j > t, m.window > 0 && j <= t-m.window:
				v = negInf
			case m.isFloat:
				v = m.t.F[off]
			// A bool or integer mask is true where a key is visible; false becomes −Inf
			// in the additive block.
			case m.t.I[off] == 0:
				v = negInf
			}
			out[t*d.S+j] = v
		}
	}
	return out
}

// each calls fn once per mask block with the dims of the sub-call: all of q when
// the mask is shared, batch b when it varies over batch, (b, h) with one query
// and one kv head when it varies over heads.
func (m *attnMask) each(d attention.Dims, fn func(sub attention.Dims, b, h int, mask []float64)) {
	switch {
	// Ordered from the finest split: a mask varying over heads must run per
	// (batch, head), whether or not it also varies over batch.
	case m.perH:
		sub := attention.Dims{B: 1, T: d.T, S: d.S, Hq: 1, Hkv: 1, D: d.D}
		for b := 0; b < d.B; b++ {
			for h := 0; h < d.Hq; h++ {
				fn(sub, b, h, m.block(d, b, h))
			}
		}
	case m.perB:
		sub := d
		sub.B = 1
		for b := 0; b < d.B; b++ {
			fn(sub, b, -1, m.block(d, b, 0))
		}
	default:
		// One mask for every batch element and head: one call over all of q.
		fn(d, -1, -1, m.block(d, 0, 0))
	}
}

// sliceQ extracts the part of a [B,T,Hq,D] tensor that block (b, h) covers;
// b < 0 means every batch element, h < 0 every head.
func (m *attnMask) sliceQ(x []float64, d attention.Dims, b, h int) []float64 {
	return sliceBTHD(x, d.B, d.T, d.Hq, d.D, b, h)
}

// sliceKV is sliceQ for a [B,S,Hkv,D] key or value: query head h reads kv head
// h / (Hq/Hkv) under grouped-query attention.
func (m *attnMask) sliceKV(x []float64, d attention.Dims, b, h int) []float64 {
	if h >= 0 {
		h /= d.Hq / d.Hkv
	}
	return sliceBTHD(x, d.B, d.S, d.Hkv, d.D, b, h)
}

// sliceLSE is the [B,Hq,T] log-sum-exp rows block (b, h) covers; the layout
// puts a batch element's heads, and a head's rows, next to each other.
func (m *attnMask) sliceLSE(x []float64, d attention.Dims, b, h int) []float64 {
	switch {
	case b < 0:
		return x
	case h < 0:
		return x[b*d.Hq*d.T : (b+1)*d.Hq*d.T]
	}
	i := (b*d.Hq + h) * d.T
	return x[i : i+d.T]
}

// putQ writes a block's [.,T,.,D] result back where sliceQ took its query.
func (m *attnMask) putQ(dst, src []float64, d attention.Dims, b, h int) {
	scatterBTHD(dst, src, d.B, d.T, d.Hq, d.D, b, h, false)
}

// putLSE writes a block's log-sum-exp rows back where sliceLSE finds them.
func (m *attnMask) putLSE(dst, src []float64, d attention.Dims, b, h int) {
	copy(m.sliceLSE(dst, d, b, h), src)
}

// addKV accumulates a kv-gradient block: under grouped-query attention several
// query heads' blocks add into one kv head, in head order.
func (m *attnMask) addKV(dst, src []float64, d attention.Dims, b, h int) {
	if h >= 0 {
		h /= d.Hq / d.Hkv
	}
	scatterBTHD(dst, src, d.B, d.S, d.Hkv, d.D, b, h, true)
}

// sliceBTHD copies x[b, :, h, :] of a [B,T,H,D] tensor; a negative b or h keeps
// the whole dim. Whole tensors are returned without a copy.
func sliceBTHD(x []float64, B, T, H, D, b, h int) []float64 {
	if b < 0 {
		return x
	}
	bx := x[b*T*H*D : (b+1)*T*H*D]
	if h < 0 {
		return bx
	}
	// Heads are interleaved along T ([B,T,H,D]): one head is T strided rows.
	out := make([]float64, T*D)
	for t := 0; t < T; t++ {
		copy(out[t*D:(t+1)*D], bx[(t*H+h)*D:(t*H+h+1)*D])
	}
	return out
}

// scatterBTHD is the inverse of sliceBTHD, adding instead of copying with add.
func scatterBTHD(dst, src []float64, B, T, H, D, b, h int, add bool) {
	var region []float64
	if b < 0 {
		region = dst
	} else {
		region = dst[b*T*H*D : (b+1)*T*H*D]
	}
	if h < 0 {
		if add {
			for i, v := range src {
				region[i] += v
			}
		} else {
			copy(region, src)
		}
		return
	}
	// One head of a [B,T,H,D] region is T rows of D, H·D apart.
	for t := 0; t < T; t++ {
		row := region[(t*H+h)*D : (t*H+h+1)*D]
		for i := range row {
			if add {
				row[i] += src[t*D+i]
			} else {
				row[i] = src[t*D+i]
			}
		}
	}
}
