// Package cudatest holds the graph that the GPU code generator and executor are
// tested on: a zoo that uses every kernel family once; and golden files for
// rendered kernels (Golden, with the -update flag). The shared models' training
// steps need the driver and live in driver/drivertest, above this package's level
// (docs/design.md §1); so does the NVRTC for sm_90a kernels (runtime/cuda/nvrtctest).
package cudatest

import (
	"math/rand/v2"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Zoo builds one function that uses every kernel family, each result an output,
// and random inputs for it (indices in range, floats normal, never all zero). Its
// outputs are named after the family they test. It fails t on an error.
func Zoo(t testing.TB, seed uint64) (*ir.Func, map[string]*tensor.Tensor) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	in := map[string]*tensor.Tensor{}
	b := ir.NewBuilder("zoo")
	fl := func(name string, shape ...int64) *ir.Value {
		x := tensor.New(tensor.F32, shape...)
		for i := range x.F {
			x.F[i] = rng.NormFloat64()
		}
		in[name] = x
		return b.Input(name, ir.T(tensor.F32, shape...))
	}
	ints := func(name string, bound int64, shape ...int64) *ir.Value {
		x := tensor.New(tensor.I64, shape...)
		for i := range x.I {
			x.I[i] = rng.Int64N(bound)
		}
		in[name] = x
		return b.Input(name, ir.T(tensor.I64, shape...))
	}
	out := func(name string, v *ir.Value) { b.Output(name, v) }
	one := func(op ir.Op, a ir.Attrs, args ...*ir.Value) *ir.Value { return b.Apply1(op, a, args...) }

	q, k, v, do := fl("q", 2, 9, 4, 16), fl("k", 2, 9, 2, 16), fl("v", 2, 9, 2, 16), fl("do", 2, 9, 4, 16)
	mask := b.Input("mask", ir.T(tensor.Bool, 9, 9))
	mt := tensor.New(tensor.Bool, 9, 9)
	for i := range mt.I {
		if i%9 <= i/9+1 || rng.IntN(3) == 0 {
			mt.I[i] = 1
		}
	}
	in["mask"] = mt
	// Packed documents of lengths 3, 1, 5 (row 0) and 9 (row 1): the doc starts.
	starts := b.Input("doc_starts", ir.T(tensor.I64, 2, 9))
	in["doc_starts"] = tensor.FromInts(tensor.I64, []int64{2, 9}, []int64{0, 0, 0, 3, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	for _, c := range []struct {
		name string
		op   ir.Op
		gop  ir.Op
		at   ir.Attrs
		mask bool
	}{
		{"attn_docs", ir.OpAttention, ir.OpAttentionGrad, ir.A("causal", true, "scale", 0.25, "docs", true), false},
		{"attn_causal", ir.OpAttention, ir.OpAttentionGrad, ir.A("causal", true, "scale", 0.25), false},
		{"attn_mask", ir.OpAttention, ir.OpAttentionGrad, ir.A("scale", 0.25), true},
		// Sliding windows (ir/window.go): alone, over the documents, and with the mask.
		{"attn_window", ir.OpAttention, ir.OpAttentionGrad, ir.A("causal", true, "scale", 0.25, "window", int64(3)), false},
		{"attn_window_docs", ir.OpAttention, ir.OpAttentionGrad, ir.A("causal", true, "scale", 0.25, "window", int64(4),
			"docs", true), false},
		{"attn_window_mask", ir.OpAttention, ir.OpAttentionGrad, ir.A("causal", true, "scale", 0.25, "window", int64(2)), true},
		{"dilated", ir.OpDilatedAttention, ir.OpDilatedAttentionGrad, ir.A("causal", true, "scale", 0.25,
			"segments", []int64{4, 9}, "dilations", []int64{1, 2}, "offsets", "paper"), false},
		{"dilated_block", ir.OpDilatedAttention, ir.OpDilatedAttentionGrad, ir.A("scale", 0.3,
			"segments", []int64{3, 8}, "dilations", []int64{1, 3}, "offsets", "block"), false},
	} {
		args := []*ir.Value{q, k, v}
		if c.mask {
			args = append(args, mask)
		}
		if ir.HasDocs(&ir.Node{Attrs: c.at}) {
			args = append(args, starts)
		}
		r := b.Apply(c.op, c.at, args...)
		gargs := append([]*ir.Value{q, k, v, r[0], r[1], do}, args[3:]...)
		gr := b.Apply(c.gop, c.at, gargs...)
		out(c.name+".o", r[0])
		out(c.name+".lse", r[1])
		out(c.name+".dq", gr[0])
		out(c.name+".dk", gr[1])
		out(c.name+".dv", gr[2])
	}

	emb := fl("emb", 10, 16)
	ids := ints("ids", 10, 2, 3)
	gat := one(ir.OpGather, ir.A("axis", 0), emb, ids)
	out("gather", gat)
	out("scatter_add", one(ir.OpScatterAdd, ir.A("axis", 0, "size", 10), gat, ids))
	// Many repeats of few rows (the sort's ragged tiles), a row of 40 (the 16-byte
	// path in f32 and bf16), an axis with outer dims and negative indices.
	upd := fl("upd", 2, 1500, 40)
	rows := ints("rows", 300, 1500)
	for i := range in["rows"].I {
		if i%11 == 0 {
			in["rows"].I[i] -= 300 // negative: counts from the end
		}
	}
	out("scatter_add_sorted", one(ir.OpScatterAdd, ir.A("axis", 1, "size", 300), upd, rows))
	logits, labels := fl("logits", 6, 10), ints("labels", 10, 6)
	out("sce_mean", one(ir.OpSoftmaxCrossEntropy, ir.A("ignore_index", 3, "reduction", "mean"), logits, labels))
	out("sce_sum", one(ir.OpSoftmaxCrossEntropy, ir.A("reduction", "sum"), logits, labels))
	out("nll_none", one(ir.OpNLLLoss, ir.A("reduction", "none"), logits, labels))

	hid := fl("hid", 6, 16)
	for _, c := range []struct {
		name string
		w    *ir.Value
		at   ir.Attrs
	}{
		{"flce", fl("wv", 16, 10), ir.A("ignore_index", 3, "reduction", "mean")},
		{"flce_t", fl("wt", 10, 16), ir.A("transpose_w", true, "reduction", "sum")},
		{"flce_none", fl("wn", 16, 10), ir.A("reduction", "none")},
		// Row chunks of 4 and 5 over 6 rows (the last one ragged), vocabularies
		// that take the 16-byte vector path.
		{"flce_chunk", fl("wc", 16, 40), ir.A("ignore_index", 3, "reduction", "mean", "chunk_rows", 4)},
		{"flce_chunk_t", fl("wct", 40, 16), ir.A("transpose_w", true, "reduction", "none", "chunk_rows", 5)},
		{"flce_chunk_sum", fl("wcs", 16, 24), ir.A("ignore_index", 5, "reduction", "sum", "chunk_rows", 1)},
	} {
		loss := one(ir.OpFusedLinearCrossEntropy, c.at, hid, c.w, labels)
		dl := fl("d"+c.name, loss.Type.Shape...)
		gr := b.Apply(ir.OpFusedLinearCrossEntropyGrad, c.at, hid, c.w, labels, dl)
		out(c.name, loss)
		out(c.name+".dh", gr[0])
		out(c.name+".dw", gr[1])
	}

	x, gm := fl("x", 2, 3, 40), fl("g", 40)
	out("layer_norm", one(ir.OpLayerNorm, ir.A("axis", -1, "eps", 1e-5), x, gm, gm))
	out("rms_norm", one(ir.OpRMSNorm, ir.A("axis", -1, "eps", 1e-5), x, gm))
	// The fused RMSNorm backward, with a scale (two-stage dscale) and without, over
	// rows of 40 and of the last two dims (120).
	dyn := fl("dyn", 2, 3, 40)
	rg := b.Apply(ir.OpRMSNormGrad, ir.A("axis", -1, "eps", 1e-5), x, gm, dyn)
	out("rms_norm_grad.dx", rg[0])
	out("rms_norm_grad.dscale", rg[1])
	out("rms_norm_grad_noscale", one(ir.OpRMSNormGrad, ir.A("axis", -2, "eps", 1e-6), x, dyn))
	lg := b.Apply(ir.OpLayerNormGrad, ir.A("axis", -1, "eps", 1e-5), x, gm, gm, dyn)
	out("layer_norm_grad.dx", lg[0])
	out("layer_norm_grad.dscale", lg[1])
	out("layer_norm_grad.dbias", lg[2])
	lg2 := b.Apply(ir.OpLayerNormGrad, ir.A("axis", -2, "eps", 1e-5), x, fl("g2", 3, 40), dyn)
	out("layer_norm_grad2.dx", lg2[0])
	out("layer_norm_grad2.dscale", lg2[1])
	out("softmax", one(ir.OpSoftmax, ir.A("axis", 1), x))
	out("log_softmax", one(ir.OpLogSoftmax, ir.A("axis", -1), x))
	out("reduce_sum", one(ir.OpReduceSum, ir.A("axes", []int64{0, 2}), x))
	out("reduce_max", one(ir.OpReduceMax, ir.A("axes", []int64{1}, "keepdims", true), x))
	out("reduce_mean", one(ir.OpReduceMean, ir.A("axes", []int64{-1}), x))
	out("reduce_min", one(ir.OpReduceMin, nil, x))
	out("transpose", one(ir.OpTranspose, ir.A("perm", []int64{2, 0, 1}), x))
	sl := one(ir.OpSlice, ir.A("axes", []int64{2}, "starts", []int64{30}, "ends", []int64{-1}, "steps", []int64{-3}), x)
	out("slice", sl)
	cat := one(ir.OpConcat, ir.A("axis", 2), x, sl)
	out("concat", cat)
	sp := b.Apply(ir.OpSplit, ir.A("axis", 2, "sizes", []int64{7, 44}), cat)
	out("split0", sp[0])
	out("split1", sp[1])
	out("tile", one(ir.OpTile, ir.A("repeats", []int64{1, 2, 1}), x))
	out("expand", one(ir.OpExpand, ir.A("shape", []int64{3, 40}), gm))
	out("cumsum", one(ir.OpCumSum, ir.A("axis", 1, "exclusive", true), x))
	out("cumsum_rev", one(ir.OpCumSum, ir.A("axis", 2, "reverse", true), x))
	out("trilu", one(ir.OpTrilu, ir.A("k", 1), x))
	out("gather_elements", one(ir.OpGatherElements, ir.A("axis", 2), x, ints("gidx", 40, 2, 3, 5)))
	out("range", one(ir.OpRange, ir.A("start", 1.0, "delta", 0.5, "count", 7, "dtype", tensor.F32), nil...))
	w := fl("w", 40, 8)
	out("matmul", b.MatMul(x, w, false, false))
	w2 := fl("w2", 2, 3, 8)
	out("matmul_bt", b.MatMul(x, w2, true, false))

	// One fused elementwise chain with broadcasting, an inlined scalar and full,
	// comparisons, where and casts.
	e := b.Unary(ir.OpExp, b.Mul(x, b.Scalar(tensor.F32, 0.5)))
	e = b.Mul(e, gm)
	e = one(ir.OpGelu, ir.A("tanh", true), e)
	s := b.Unary(ir.OpSigmoid, e)
	c := one(ir.OpGt, nil, s, x)
	wh := one(ir.OpWhere, nil, c, s, b.Full(ir.T(tensor.F32, 40), 2))
	f32 := b.Cast(c, tensor.F32)
	out("ew", b.Add(wh, f32))
	out("ew_mid", b.Unary(ir.OpTanh, e))
	f, err := b.Build()
	if err != nil {
		t.Fatalf("cudatest: zoo: %v", err)
	}
	return f, in
}
