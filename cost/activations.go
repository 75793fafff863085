package cost

import (
	"strings"

	"github.com/lcc-dev/lcc/ir"
)

// GradPrefix is the prefix autodiff gives gradient outputs ("grad.<param>"); it is
// repeated here so that plan does not depend on the autodiff pass.
const GradPrefix = "grad."

// BackwardStart returns the index in f.Body of the first node of the backward of a
// function made by reverse-mode autodiff, whose body is the forward followed by the
// backward (passes/autodiff's invariant): the forward is everything the outputs
// that are not gradients depend on, and the offloads of its values. It returns len(f.Body) when f has no gradient
// output (no backward).
func BackwardStart(f *ir.Func) int {
	hasGrad := false
	need := make(map[*ir.Value]bool)
	for _, o := range f.Outputs {
		if strings.HasPrefix(o.Name, GradPrefix) {
			hasGrad = true
		} else {
			need[o.Value] = true
		}
	}
	if !hasGrad {
		return len(f.Body)
	}
	fwd := make([]bool, len(f.Body))
	for i := len(f.Body) - 1; i >= 0; i-- {
		n := f.Body[i]
		for _, r := range n.Results {
			fwd[i] = fwd[i] || need[r]
		}
		if fwd[i] {
			for _, a := range n.Args {
				need[a] = true
			}
		}
	}
	// An offload of a forward value belongs to the forward it follows.
	pos := make(map[*ir.Node]int, len(f.Body))
	for i, n := range f.Body {
		pos[n] = i
		if n.Op == ir.OpOffload && n.Args[0].Def != nil && fwd[pos[n.Args[0].Def]] {
			fwd[i] = true
		}
	}
	for i, isFwd := range fwd {
		if !isFwd {
			return i
		}
	}
	return len(f.Body)
}

// Saved returns the activations the backward keeps: the results of forward nodes
// (before BackwardStart) read by backward nodes, in body order. Views (reshapes)
// are reported as the value whose buffer they share, once.
func Saved(f *ir.Func) []*ir.Value {
	start := BackwardStart(f)
	seen := make(map[*ir.Value]bool)
	var out []*ir.Value
	pos := make(map[*ir.Node]int, len(f.Body))
	for i, n := range f.Body {
		pos[n] = i
	}
	for _, n := range f.Body[start:] {
		for _, a := range n.Args {
			r := Root(a)
			if r.Def == nil || pos[r.Def] >= start || seen[r] {
				continue
			}
			seen[r] = true
			out = append(out, r)
		}
	}
	return out
}

// Activations is the total size in bytes of the Saved activations of f: what the
// forward leaves alive for the backward, the quantity checkpointing reduces.
func Activations(f *ir.Func) int64 {
	var s int64
	for _, v := range Saved(f) {
		s += v.Type.Bytes()
	}
	return s
}

// FLOPs splits f's work into forward and backward by BackwardStart; recomputed
// forward nodes inserted into the backward by checkpointing count as backward.
func FLOPs(f *ir.Func) (forward, backward int64) {
	start := BackwardStart(f)
	for i, n := range f.Body {
		if i < start {
			forward += NodeFLOPs(n)
		} else {
			backward += NodeFLOPs(n)
		}
	}
	return forward, backward
}
