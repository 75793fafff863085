// Package plan models what a function costs to run: FLOPs per node and memory
// over the schedule. Memory is simulated by liveness over the final body order:
// a value is allocated when its node runs and freed after its last reader, and a
// reshape is a view that keeps its source alive rather than a new buffer, in the
// IR's dtypes. For a GPU target the planned peak is not this simulation but the
// arena the executor allocates (see StepMemory); Simulate is the model of CPU
// targets and of steps without a GPU program.
package plan

import (
	"github.com/lcc-dev/lcc/ir"
)

// NodeFLOPs counts the floating-point operations of one node (multiply-adds count
// two). Data movement counts zero; elementwise ops count one per output element.
func NodeFLOPs(n *ir.Node) int64 {
	switch n.Op {
	case ir.OpMatMul:
		a, b := n.Args[0].Type, n.Args[1].Type
		batch, m, k, nn, err := ir.MatMulDims(a, b, n.AttrBool("transpose_a"), n.AttrBool("transpose_b"))
		if err != nil {
			return 0
		}
		return 2 * ir.T(0, batch...).Numel() * m * k * nn
	case ir.OpAttention, ir.OpAttentionGrad:
		return attentionFLOPs(n, n.AttrBool("causal"))
	case ir.OpDilatedAttention, ir.OpDilatedAttentionGrad:
		return dilatedFLOPs(n)
	case ir.OpRingAttention, ir.OpRingAttentionGrad:
		// This rank's L queries against all N·L keys: one rank's share of the
		// whole attention (the zigzag layout balances the causal half evenly).
		q := n.Args[0].Type
		f := 4 * q.Shape[0] * q.Shape[2] * q.Shape[1] * q.Shape[1] * n.AttrInt("ranks") * q.Shape[3]
		if n.AttrBool("causal") {
			f /= 2
		}
		if n.Op == ir.OpRingAttentionGrad {
			f = f * 5 / 2
		}
		return f
	case ir.OpShardedDilatedAttention, ir.OpShardedDilatedAttentionGrad:
		// The whole LongNet attention's useful work, split evenly over ranks.
		q := n.Args[0].Type
		ranks := n.AttrInt("ranks")
		whole := ir.T(q.DType, q.Shape[0], q.Shape[1]*ranks, q.Shape[2], q.Shape[3])
		fake := &ir.Node{Op: ir.OpDilatedAttention, Attrs: n.Attrs,
			Args: []*ir.Value{{Type: whole}, n.Args[1], n.Args[2]}}
		if n.Op == ir.OpShardedDilatedAttentionGrad {
			fake.Op = ir.OpDilatedAttentionGrad
		}
		return dilatedFLOPs(fake) / ranks
	case ir.OpReshape, ir.OpTranspose, ir.OpExpand, ir.OpSlice, ir.OpConcat, ir.OpSplit,
		ir.OpGather, ir.OpGatherElements, ir.OpGatherND, ir.OpTile, ir.OpConstant, ir.OpFull,
		ir.OpRange, ir.OpCast:
		return 0
	case ir.OpSoftmax, ir.OpLogSoftmax, ir.OpLayerNorm, ir.OpRMSNorm:
		return 5 * n.Args[0].Type.Numel()
	case ir.OpSoftmaxCrossEntropy, ir.OpNLLLoss:
		return 4 * n.Args[0].Type.Numel()
	case ir.OpFusedLinearCrossEntropy, ir.OpFusedLinearCrossEntropyGrad:
		return flceFLOPs(n)
	}
	var total int64
	for _, r := range n.Results {
		if r.Type.DType.IsFloat() {
			total += r.Type.Numel()
		}
	}
	for _, a := range n.Args {
		if len(n.Results) == 1 && a.Type.Numel() > n.Results[0].Type.Numel() {
			total += a.Type.Numel() // reductions read more than they write
		}
	}
	return total
}

// attentionFLOPs is 4·B·H·T·S·D for the forward (QKᵀ and PV), halved when causal;
// the backward costs 2.5× the forward (5 matmuls of the same size instead of 2).
func attentionFLOPs(n *ir.Node, causal bool) int64 {
	q, k := n.Args[0].Type, n.Args[1].Type
	f := 4 * q.Shape[0] * q.Shape[2] * q.Shape[1] * k.Shape[1] * q.Shape[3]
	if causal {
		f /= 2
	}
	if n.Op == ir.OpAttentionGrad {
		f = f * 5 / 2
	}
	return f
}

// dilatedFLOPs counts the useful work of LongNet attention: per branch (w, r),
// (T/w) segments of (w/r) selected rows, each attending causally to half of them:
// Σ_i (T/w_i)·(w_i/r_i)²/2 · 4·H·D.
func dilatedFLOPs(n *ir.Node) int64 {
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
	if n.Op == ir.OpDilatedAttentionGrad {
		f = f * 5 / 2
	}
	return f
}

// Memory is the result of a memory simulation.
type Memory struct {
	// PeakBytes is the most bytes live at once, weights and state included.
	PeakBytes int64
	// PeakAt is the index in Body at which the peak happens (-1: before the body).
	PeakAt int
	// WeightsBytes and StateBytes are the persistent parameters.
	WeightsBytes, StateBytes int64
	// InputBytes counts inputs and labels (live until their last use).
	InputBytes int64
}

// Root returns the value whose buffer v uses: reshapes are views of their input.
func Root(v *ir.Value) *ir.Value {
	for v.Def != nil && v.Def.Op == ir.OpReshape {
		v = v.Def.Args[0]
	}
	return v
}

// Simulate walks f's body in order, allocating each result when its node runs and
// freeing each buffer after its last use (outputs stay live to the end).
func Simulate(f *ir.Func) Memory {
	var m Memory
	last := make(map[*ir.Value]int)
	for i, n := range f.Body {
		for _, a := range n.Args {
			last[Root(a)] = i
		}
	}
	for _, o := range f.Outputs {
		last[Root(o.Value)] = len(f.Body)
	}
	var live int64
	for _, p := range f.Params {
		sz := p.Value.Type.Bytes()
		switch p.Role {
		case ir.RoleWeight:
			m.WeightsBytes += sz
		case ir.RoleState:
			m.StateBytes += sz
		default:
			m.InputBytes += sz
		}
		live += sz
	}
	m.PeakBytes, m.PeakAt = live, -1
	freeAt := make(map[int][]*ir.Value)
	for v, i := range last {
		if v.Param == nil || (v.Param.Role != ir.RoleWeight && v.Param.Role != ir.RoleState) {
			freeAt[i] = append(freeAt[i], v)
		}
	}
	for i, n := range f.Body {
		for _, r := range n.Results {
			if Root(r) == r {
				if _, used := last[r]; used {
					live += r.Type.Bytes()
				} else {
					// A result nobody reads is still written; count it for this step.
					live += r.Type.Bytes()
					freeAt[i] = append(freeAt[i], r)
				}
			}
		}
		if live > m.PeakBytes {
			m.PeakBytes, m.PeakAt = live, i
		}
		for _, v := range freeAt[i] {
			live -= v.Type.Bytes()
		}
	}
	return m
}

// flceFLOPs counts fused linear cross-entropy: the forward is the logits GEMM
// (2·N·d·V) plus the loss (4·N·V); the backward recomputes the logits and runs two
// more GEMMs (dh and dw), 6·N·d·V, plus the softmax (5·N·V).
func flceFLOPs(n *ir.Node) int64 {
	rows, d, v, err := ir.FLCEDims(n.Args[0].Type, n.Args[1].Type, n.Args[2].Type,
		n.AttrBool("transpose_w"))
	if err != nil {
		return 0
	}
	if n.Op == ir.OpFusedLinearCrossEntropyGrad {
		return 6*rows*d*v + 5*rows*v
	}
	return 2*rows*d*v + 4*rows*v
}

// SimulateStep is Simulate for a training step whose optimizer keeps
// optimizerBytes of persistent state (AdamW moments) that the step graph does
// not carry as parameters: the state is live throughout, so it adds to every
// point of the schedule and to the peak.
func SimulateStep(f *ir.Func, optimizerBytes int64) Memory {
	m := Simulate(f)
	m.PeakBytes += optimizerBytes
	m.StateBytes += optimizerBytes
	return m
}
