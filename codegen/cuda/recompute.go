package cuda

import (
	"slices"

	"github.com/lcc-dev/lcc/ir"
)

// Recomputation in the consumer: an elementwise value that only elementwise
// kernels read, and that a few elementwise ops compute from values that are
// stored anyway, is computed again by each kernel that reads it instead of being
// stored and loaded. SwiGLU is the case that matters: the backward reads
// sigmoid(gate) and silu(gate), and recomputing both from the gate (which it
// reads in place from the w13 projection anyway) saves storing two [T, FFN]
// activations per layer and reading them back (docs/design.md §10).

// maxRecompute caps the ops one recomputed value costs its readers.
const maxRecompute = 6

// planRecompute fills g.recompute. It runs after planViews and planResiduals: a
// value with a view (a placed concat operand) or one a norm's kernel reads or
// writes (residual.go) is never recomputed.
func (g *gen) planRecompute() {
	g.recompute = map[*ir.Value]bool{}
	// elementwiseUse: u reads its operands through an elementwise kernel.
	elementwiseUse := func(u *ir.Node) bool { return readsElementwise(u) && !g.absorbed[u] }
	// stored: some kernel writes b to its buffer (or b is a view of one): b is
	// not computed by an elementwise kernel, or something else reads it.
	stored := func(b *ir.Value) bool {
		if b.Def == nil || !b.Def.Op.Info().Elementwise || g.absorbed[b.Def] || g.outputs[b] {
			return true
		}
		for _, u := range g.uses[b] {
			if !elementwiseUse(u) {
				return true
			}
		}
		return false
	}
	size := map[*ir.Value]int{}
	for _, n := range g.f.Body {
		if !n.Op.Info().Elementwise || g.absorbed[n] || len(n.Results) != 1 {
			continue
		}
		v := n.Result()
		if _, view := g.views[v]; view || g.outputs[v] || len(g.uses[v]) == 0 {
			continue
		}
		ok := true
		for _, u := range g.uses[v] {
			// A fused group's results all have its one shape.
			ok = ok && elementwiseUse(u) && slices.Equal(u.Results[0].Type.Shape, v.Type.Shape)
		}
		// Every operand must be at hand in a reader's kernel: a literal, a
		// stored value, or itself recomputed.
		cost := 1
		for _, a := range n.Args {
			_, lit := inlinable(a)
			switch {
			case lit:
			case g.recompute[a]:
				cost += size[a]
			case !stored(a):
				ok = false
			}
		}
		if ok && cost <= maxRecompute {
			g.recompute[v], size[v] = true, cost
		}
	}
}
