package driver

// Gradients that are zero in exact arithmetic, found from the graph's structure.
//
// A bias added to attention's keys (BERT's key projection) shifts every score of
// a query's row by the same amount, q·b, and softmax ignores a shift common to a
// row; so the loss does not depend on the bias, and its gradient is zero. Computed,
// it is what the cancelling terms leave in the storage's rounding, and a check
// holds it to that floor (ZeroGradFloor) rather than to a relative error, which
// says nothing about noise. The rule is structural, so it holds at any size and in
// any model: a weight qualifies when each path from it reaches the keys of an
// attention only through ops that keep its contribution the same for every key
// (the add that applies it, reshapes that split its axis into heads, transposes,
// broadcasts, casts). RoPE, which rotates each key by its position, is not such
// an op: Qwen2's key bias has a real gradient.

import (
	"slices"

	"github.com/lcc-dev/lcc/ir"
)

// keySinks are the ops whose argument 1 is attention's keys [B, S, H, D]: a
// value varying only along H and D there shifts each score row by a constant.
var keySinks = map[ir.Op]bool{
	ir.OpAttention: true, ir.OpAttentionGrad: true, ir.OpDilatedAttention: true,
	ir.OpDilatedAttentionGrad: true, ir.OpRingAttention: true,
}

// exactZeroGrads returns the weights of f whose gradient is zero in exact
// arithmetic, each with the reason.
func exactZeroGrads(f *ir.Func) map[*ir.Param]string {
	uses := f.Uses()
	out := map[*ir.Param]string{}
	for _, p := range f.Params {
		if p.Role != ir.RoleWeight || p.Value.Type.Rank() == 0 {
			continue
		}
		all := make([]int, p.Value.Type.Rank())
		for i := range all {
			all[i] = i
		}
		if reached, ok := keyShift(f, uses, p.Value, all, 0); ok && reached {
			out[p] = "a bias of attention's keys: softmax ignores a shift common to every key"
		}
	}
	return out
}

// keyShift follows v, whose dependence on the weight varies only along axes,
// through its uses: ok when every path ends in attention's keys with the weight's
// part constant along batch and sequence (reached when one does), false when a
// path leaves the ops that keep it so.
func keyShift(f *ir.Func, uses map[*ir.Value][]*ir.Node, v *ir.Value, axes []int, depth int) (reached, ok bool) {
	if depth > 32 || f.IsOutput(v) {
		return false, false
	}
	for _, n := range uses[v] {
		if keySinks[n.Op] {
			if !readsOnlyAs(n, v, 1) || slices.Contains(axes, 0) || slices.Contains(axes, 1) {
				return false, false
			}
			reached = true
			continue
		}
		next, fine := followAxes(n, v, axes)
		if !fine {
			return false, false
		}
		r, ok := keyShift(f, uses, n.Result(), next, depth+1)
		if !ok {
			return false, false
		}
		reached = reached || r
	}
	return reached, true
}

// followAxes maps the axes along which v's part varies to n's result, when n keeps
// that part a function of those axes alone.
func followAxes(n *ir.Node, v *ir.Value, axes []int) ([]int, bool) {
	if len(n.Results) != 1 {
		return nil, false
	}
	y := n.Result()
	shift := func() []int { // right-aligned broadcast
		d := y.Type.Rank() - v.Type.Rank()
		out := make([]int, len(axes))
		for i, a := range axes {
			out[i] = a + d
		}
		return out
	}
	switch n.Op {
	case ir.OpAdd, ir.OpSub:
		// x + b: the other operand must not carry the weight too.
		if n.Args[0] == v && n.Args[1] == v {
			return nil, false
		}
		return shift(), true
	case ir.OpCast, ir.OpExpand:
		return shift(), true
	case ir.OpTranspose:
		perm := n.AttrInts("perm")
		var out []int
		for i, p := range perm {
			if slices.Contains(axes, int(p)) {
				out = append(out, i)
			}
		}
		return out, true
	case ir.OpReshape:
		// The axes before the first varying one must stay as they are; the rest may
		// split or merge (heads out of the projection's width).
		k := slices.Min(axes)
		if y.Type.Rank() < k || !slices.Equal(y.Type.Shape[:k], v.Type.Shape[:k]) {
			return nil, false
		}
		var out []int
		for i := k; i < y.Type.Rank(); i++ {
			out = append(out, i)
		}
		return out, true
	}
	return nil, false
}

// readsOnlyAs reports whether n reads v as its argument i and as no other.
func readsOnlyAs(n *ir.Node, v *ir.Value, i int) bool {
	for j, a := range n.Args {
		if (a == v) != (j == i) {
			return false
		}
	}
	return true
}
