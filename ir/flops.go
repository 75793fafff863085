package ir

// This file is the FLOPs column of the op table: how many floating-point
// operations one node does (a multiply-add counts two), for the report, the
// checkpoint planner's recompute cost and the pipeline's forward count. Data
// movement counts zero; elementwise ops count one per output element. def
// installs each op's rule; a table test requires every op to have one.

// FLOPsFunc counts the floating-point operations of node n.
type FLOPsFunc func(n *Node) int64

// FLOPs counts the floating-point operations of node n with its op's rule.
func (n *Node) FLOPs() int64 { return n.Op.Info().FLOPs(n) }

var flopRules = map[Op]FLOPsFunc{
	// Creation, data movement and casts move bytes and compute nothing.
	OpConstant: noFLOPs, OpFull: noFLOPs, OpRange: noFLOPs, OpCast: noFLOPs,
	OpReshape: noFLOPs, OpTranspose: noFLOPs, OpExpand: noFLOPs, OpSlice: noFLOPs,
	OpConcat: noFLOPs, OpSplit: noFLOPs, OpGather: noFLOPs, OpGatherElements: noFLOPs,
	OpGatherND: noFLOPs, OpTile: noFLOPs, OpOffload: noFLOPs, OpPrefetch: noFLOPs,
	OpStopGradient: noFLOPs,

	// One operation per output element (reductions: per element read).
	OpNeg: elementFLOPs, OpExp: elementFLOPs, OpLog: elementFLOPs, OpSqrt: elementFLOPs,
	OpRsqrt: elementFLOPs, OpRecip: elementFLOPs, OpTanh: elementFLOPs, OpErf: elementFLOPs,
	OpSigmoid: elementFLOPs, OpRelu: elementFLOPs, OpAbs: elementFLOPs, OpCos: elementFLOPs,
	OpSin: elementFLOPs, OpSilu: elementFLOPs, OpGelu: elementFLOPs, OpNot: elementFLOPs,
	OpIsNaN: elementFLOPs, OpAdd: elementFLOPs, OpSub: elementFLOPs, OpMul: elementFLOPs,
	OpDiv: elementFLOPs, OpPow: elementFLOPs, OpMax: elementFLOPs, OpMin: elementFLOPs,
	OpEq: elementFLOPs, OpLt: elementFLOPs, OpLe: elementFLOPs, OpGt: elementFLOPs,
	OpGe: elementFLOPs, OpAnd: elementFLOPs, OpOr: elementFLOPs, OpXor: elementFLOPs,
	OpWhere: elementFLOPs, OpReduceSum: elementFLOPs, OpReduceMean: elementFLOPs,
	OpReduceMax: elementFLOPs, OpReduceMin: elementFLOPs, OpCumSum: elementFLOPs,
	OpTrilu: elementFLOPs, OpScatterAdd: elementFLOPs,
	OpAllGather: elementFLOPs, OpReduceScatter: elementFLOPs, OpAllReduce: elementFLOPs,
	OpAllToAll: elementFLOPs, OpRingShift: elementFLOPs, OpShardPositions: elementFLOPs,

	OpMatMul: matmulFLOPs,
	// A fused group does what its ops do.
	OpFusedElementwise: fusedFLOPs,
	// Softmax and the norms: about five operations per element.
	OpSoftmax: perArgElement(5), OpLogSoftmax: perArgElement(5),
	OpLayerNorm: perArgElement(5), OpRMSNorm: perArgElement(5),
	// The fused backwards: statistics again, g, mean(g·x̂), dx and the column sums.
	OpRMSNormGrad: perArgElement(8), OpLayerNormGrad: perArgElement(10),
	OpSoftmaxCrossEntropy: perArgElement(4), OpNLLLoss: perArgElement(4),

	OpAttention: attentionFLOPs, OpAttentionGrad: attentionFLOPs,
	OpDilatedAttention: dilatedFLOPs, OpDilatedAttentionGrad: dilatedFLOPs,
	OpRingAttention: ringFLOPs, OpRingAttentionGrad: ringFLOPs,
	OpShardedDilatedAttention: shardedDilatedFLOPs, OpShardedDilatedAttentionGrad: shardedDilatedFLOPs,
	OpFusedLinearCrossEntropy: flceFLOPs, OpFusedLinearCrossEntropyGrad: flceFLOPs,
}

func noFLOPs(*Node) int64 { return 0 }

// elementFLOPs is one per floating-point output element, plus one per element of
// an argument larger than the only result (reductions read more than they write).
func elementFLOPs(n *Node) int64 {
	var total int64
	for _, r := range n.Results {
		if r.Type.DType.IsFloat() {
			total += r.Type.Numel()
		}
	}
	for _, a := range n.Args {
		if len(n.Results) == 1 && a.Type.Numel() > n.Results[0].Type.Numel() {
			total += a.Type.Numel()
		}
	}
	return total
}

func perArgElement(k int64) FLOPsFunc {
	return func(n *Node) int64 { return k * n.Args[0].Type.Numel() }
}

// matmulFLOPs is 2·batch·M·K·N.
func matmulFLOPs(n *Node) int64 {
	a, b := n.Args[0].Type, n.Args[1].Type
	batch, m, k, nn, err := MatMulDims(a, b, n.AttrBool("transpose_a"), n.AttrBool("transpose_b"))
	if err != nil {
		return 0
	}
	return 2 * T(0, batch...).Numel() * m * k * nn
}

// attentionFLOPs is 4·B·H·T·S·D for the forward (QKᵀ and PV), halved when causal;
// the backward costs 2.5× the forward (5 matmuls of the same size instead of 2).
func attentionFLOPs(n *Node) int64 {
	q, k := n.Args[0].Type, n.Args[1].Type
	f := 4 * q.Shape[0] * q.Shape[2] * q.Shape[1] * k.Shape[1] * q.Shape[3]
	if w := Window(n); w > 0 && w < k.Shape[1] {
		// Query t sees min(t+1, w) keys: Σ_t = T·w − w(w−1)/2 for T ≥ w.
		t := q.Shape[1]
		pairs := t*w - w*(w-1)/2
		if t < w {
			pairs = t * (t + 1) / 2
		}
		f = 4 * q.Shape[0] * q.Shape[2] * pairs * q.Shape[3]
	} else if n.AttrBool("causal") {
		f /= 2
	}
	if n.Op == OpAttentionGrad {
		f = f * 5 / 2
	}
	return f
}

// dilatedFLOPs counts the useful work of LongNet attention: per branch (w, r),
// (T/w) segments of (w/r) selected rows, each attending causally to half of them:
// Σ_i (T/w_i)·(w_i/r_i)²/2 · 4·H·D.
func dilatedFLOPs(n *Node) int64 {
	q := n.Args[0].Type
	b, t, h, d := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	seg, dil := n.AttrInts("segments"), n.AttrInts("dilations")
	var f int64
	for i := range seg {
		w := min(seg[i], t)
		rows := (w + dil[i] - 1) / dil[i]
		segs := (t + w - 1) / w
		per := rows * rows
		if n.AttrBool("causal") {
			per /= 2
		}
		f += segs * per * 4 * h * d * b
	}
	if n.Op == OpDilatedAttentionGrad || n.Op == OpShardedDilatedAttentionGrad {
		f = f * 5 / 2
	}
	return f
}

// ringFLOPs is this rank's L queries against all N·L keys: one rank's share of
// the whole attention (the zigzag layout balances the causal half evenly).
func ringFLOPs(n *Node) int64 {
	q := n.Args[0].Type
	f := 4 * q.Shape[0] * q.Shape[2] * q.Shape[1] * q.Shape[1] * n.AttrInt("ranks") * q.Shape[3]
	if n.AttrBool("causal") {
		f /= 2
	}
	if n.Op == OpRingAttentionGrad {
		f = f * 5 / 2
	}
	return f
}

// shardedDilatedFLOPs is the whole LongNet attention's useful work, split evenly
// over the ranks.
func shardedDilatedFLOPs(n *Node) int64 {
	q := n.Args[0].Type
	ranks := max(1, n.AttrInt("ranks"))
	whole := T(q.DType, q.Shape[0], q.Shape[1]*ranks, q.Shape[2], q.Shape[3])
	fake := &Node{Op: n.Op, Attrs: n.Attrs, Args: []*Value{{Type: whole}, n.Args[1], n.Args[2]}}
	return dilatedFLOPs(fake) / ranks
}

// flceFLOPs counts the logits matmul and the softmax over them (forward), and
// the two gradient matmuls with the logits recomputed (backward).
func flceFLOPs(n *Node) int64 {
	rows, d, v, err := FLCEDims(n.Args[0].Type, n.Args[1].Type, n.Args[2].Type,
		n.AttrBool("transpose_w"))
	if err != nil {
		return 0
	}
	if n.Op == OpFusedLinearCrossEntropyGrad {
		return 6*rows*d*v + 5*rows*v
	}
	return 2*rows*d*v + 4*rows*v
}

// fusedFLOPs is the sum over a fused_elementwise node's body.
func fusedFLOPs(n *Node) int64 {
	f, err := FusedBody(n)
	if err != nil {
		return 0
	}
	var total int64
	for _, m := range f.Body {
		total += m.FLOPs()
	}
	return total
}
