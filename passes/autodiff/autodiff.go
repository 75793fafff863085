// Package autodiff appends the backward pass to an lcc function by reverse-mode
// automatic differentiation.
//
// Reverse mode (Griewank and Walther, "Evaluating Derivatives", 2nd ed., SIAM 2008;
// Baydin et al., "Automatic Differentiation in Machine Learning: a Survey", JMLR 18,
// 2018) seeds the objective with cotangent 1 and walks the forward body in reverse
// topological order. Each node's vector-Jacobian product comes from its op's rule in
// the op table (ir.OpInfo.Grad, a registry in the style of GoMLX's
// core/graph/rev_autodiff.go); a value read by several nodes gets the sum of their
// contributions.
//
// Invariants of the result of Grad:
//   - The forward body comes first, unchanged except that nodes reaching no kept
//     output are deleted; the backward follows it, so a later checkpointing pass
//     sees every saved activation as a forward value read by backward code.
//     Backward nodes carry their forward node's name plus "/grad".
//   - Backward code exists only for nodes on a path from a differentiated parameter
//     to the objective, and only for the cotangents the objective needs: the rules
//     emit code for every floating-point argument, and dead code is deleted after.
//   - Integer and boolean values never carry cotangents; a NoGrad op stops the
//     gradient (zero); an op with neither a rule nor NoGrad on the path is an error
//     naming the node.
//   - Every gradient output "grad.<param>" has exactly its parameter's type, zeros
//     (a full node) when the objective does not depend on it.
//   - The input function is never modified.
package autodiff

import (
	"fmt"
	"maps"
	"slices"

	"github.com/lcc-dev/lcc/ir"
)

// GradPrefix prefixes the name of each gradient output: "grad.<param name>".
const GradPrefix = "grad."

// Options says what to differentiate.
type Options struct {
	// Loss names a scalar floating-point output to differentiate (seeded with 1).
	Loss string
	// Seeds maps output names to the names of new input parameters that hold their
	// cotangents, for objectives Σ out ⊙ dy (vector-Jacobian products of any
	// output). Seeds and Loss may be combined; their objectives add.
	Seeds map[string]string
	// WRT selects the parameters to differentiate with respect to; nil means every
	// floating-point weight that is not Frozen. Selecting a non-float parameter is
	// an error.
	WRT func(*ir.Param) bool
	// KeepOutputs keeps every original output. Otherwise only the objective's
	// outputs (the loss and the seeded outputs) precede the gradients, and forward
	// code that fed only the dropped outputs is deleted.
	KeepOutputs bool
}

// DefaultWRT is the parameter selection used when Options.WRT is nil: trainable
// floating-point weights.
func DefaultWRT(p *ir.Param) bool {
	return p.Role == ir.RoleWeight && !p.Frozen && p.Value.Type.DType.IsFloat()
}

// Grad returns a new function that computes f's forward and then the gradients of
// the objective opts describes, as outputs "grad.<param name>" appended after the
// kept outputs, one per differentiated parameter in parameter order. f is not
// modified. Errors (never panics) name the offending output, parameter or node.
func Grad(f *ir.Func, opts Options) (*ir.Func, error) {
	g := f.Clone()
	b := ir.Edit(g)

	// The seeds: output value → initial cotangent.
	type seed struct {
		out *ir.Value
		dy  func() *ir.Value
	}
	var seeds []seed
	if opts.Loss == "" && len(opts.Seeds) == 0 {
		return nil, fmt.Errorf("autodiff: func @%s: no objective: set Options.Loss or Options.Seeds", f.Name)
	}
	if opts.Loss != "" {
		loss := g.Output(opts.Loss)
		switch {
		case loss == nil:
			return nil, fmt.Errorf("autodiff: func @%s: no output named %q to use as the loss (outputs: %s)",
				f.Name, opts.Loss, outputNames(f))
		case !loss.Type.DType.IsFloat():
			return nil, fmt.Errorf("autodiff: func @%s: loss %q has type %v, want a floating-point scalar",
				f.Name, opts.Loss, loss.Type)
		case loss.Type.Numel() != 1:
			return nil, fmt.Errorf("autodiff: func @%s: loss %q has type %v, want a scalar",
				f.Name, opts.Loss, loss.Type)
		}
		seeds = append(seeds, seed{loss, func() *ir.Value { return b.Full(loss.Type, 1) }})
	}
	for _, out := range slices.Sorted(maps.Keys(opts.Seeds)) {
		pname := opts.Seeds[out]
		v := g.Output(out)
		switch {
		case v == nil:
			return nil, fmt.Errorf("autodiff: func @%s: seed for output %q: no such output (outputs: %s)",
				f.Name, out, outputNames(f))
		case !v.Type.DType.IsFloat():
			return nil, fmt.Errorf("autodiff: func @%s: seed for output %q: type %v is not floating-point",
				f.Name, out, v.Type)
		case pname == "" || g.Param(pname) != nil:
			return nil, fmt.Errorf("autodiff: func @%s: seed for output %q: parameter name %q is empty or taken",
				f.Name, out, pname)
		}
		t := ir.Type{DType: v.Type.DType, Shape: append([]int64{}, v.Type.Shape...)}
		dy := g.AddParam(pname, ir.RoleInput, t, nil)
		seeds = append(seeds, seed{v, func() *ir.Value { return dy }})
	}

	// The parameters to differentiate.
	wrt := opts.WRT
	if wrt == nil {
		wrt = DefaultWRT
	}
	var params []*ir.Param
	for _, p := range g.Params {
		if isSeedParam(p, opts.Seeds) || !wrt(p) {
			continue
		}
		if !p.Value.Type.DType.IsFloat() {
			return nil, fmt.Errorf("autodiff: func @%s: cannot differentiate with respect to %q of type %v",
				f.Name, p.Name, p.Value.Type)
		}
		if g.Output(GradPrefix+p.Name) != nil {
			return nil, fmt.Errorf("autodiff: func @%s: output %q already exists", f.Name, GradPrefix+p.Name)
		}
		params = append(params, p)
	}

	// active: float values that depend on a differentiated parameter (forward
	// sweep) and that some seeded output depends on (backward sweep).
	forward := len(g.Body)
	varied := make(map[*ir.Value]bool)
	for _, p := range params {
		varied[p.Value] = true
	}
	for _, n := range g.Body {
		dep := false
		for _, a := range n.Args {
			dep = dep || varied[a]
		}
		for _, r := range n.Results {
			varied[r] = dep && r.Type.DType.IsFloat()
		}
	}
	useful := make(map[*ir.Value]bool)
	for _, s := range seeds {
		useful[s.out] = varied[s.out]
	}
	for i := forward - 1; i >= 0; i-- {
		n := g.Body[i]
		need := false
		for _, r := range n.Results {
			need = need || useful[r]
		}
		if !need {
			continue
		}
		for _, a := range n.Args {
			if varied[a] {
				useful[a] = true
			}
		}
	}
	active := func(v *ir.Value) bool { return varied[v] && useful[v] }

	// Seed, then sweep backwards.
	cot := make(map[*ir.Value]*ir.Value)
	accumulate := func(v, d *ir.Value) {
		if c := cot[v]; c != nil {
			d = b.Add(c, d)
		}
		cot[v] = d
	}
	for _, s := range seeds {
		if active(s.out) {
			accumulate(s.out, s.dy())
		}
	}
	for i := forward - 1; i >= 0; i-- {
		n := g.Body[i]
		dys := make([]*ir.Value, len(n.Results))
		seeded := false
		for j, r := range n.Results {
			if active(r) {
				dys[j] = cot[r]
				seeded = seeded || dys[j] != nil
			}
		}
		if !seeded {
			continue
		}
		info := n.Op.Info()
		if info.Grad == nil {
			if info.NoGrad {
				continue // a gradient stop, by definition of the op
			}
			return nil, fmt.Errorf("autodiff: func @%s: node %d (%s) has no gradient rule",
				f.Name, i, n.Where())
		}
		if n.Name != "" {
			b.SetName(n.Name + "/grad") // backward code says where it came from
		}
		dxs, err := applyRule(b, info.Grad, n, dys)
		if err != nil {
			return nil, fmt.Errorf("autodiff: func @%s: gradient of node %d (%s): %w", f.Name, i, n, err)
		}
		for j, a := range n.Args {
			if dxs[j] == nil || !active(a) {
				continue
			}
			if !dxs[j].Type.Equal(a.Type) {
				return nil, fmt.Errorf("autodiff: func @%s: lcc: BUG: gradient rule of node %d (%s) "+
					"gives arg %d a cotangent %v, want %v", f.Name, i, n.Where(), j, dxs[j].Type, a.Type)
			}
			accumulate(a, dxs[j])
		}
		b.SetName("")
	}

	// Outputs.
	if !opts.KeepOutputs {
		var kept []ir.Output
		for _, o := range g.Outputs {
			if _, seeded := opts.Seeds[o.Name]; seeded || o.Name == opts.Loss {
				kept = append(kept, o)
			}
		}
		g.Outputs = kept
	}
	for _, p := range params {
		d := cot[p.Value]
		if d == nil {
			d = b.Full(p.Value.Type, 0)
		}
		g.Outputs = append(g.Outputs, ir.Output{Name: GradPrefix + p.Name, Value: d})
	}
	if err := b.Err(); err != nil {
		return nil, fmt.Errorf("autodiff: func @%s: %w", f.Name, err)
	}
	g.RemoveDeadNodes()
	if err := ir.Verify(g); err != nil {
		return nil, fmt.Errorf("autodiff: func @%s: lcc: BUG: result does not verify: %w", f.Name, err)
	}
	return g, nil
}

// applyRule runs one VJP rule, turning a panic or a recorded builder error into an
// error and checking the rule's arity.
func applyRule(b *ir.Builder, rule ir.GradFunc, n *ir.Node, dys []*ir.Value) (dxs []*ir.Value, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("rule panicked: %v", r)
		}
	}()
	dxs = rule(b, n, dys)
	if err := b.Err(); err != nil {
		return nil, err
	}
	if len(dxs) != len(n.Args) {
		return nil, fmt.Errorf("lcc: BUG: rule returned %d cotangents for %d args", len(dxs), len(n.Args))
	}
	return dxs, nil
}

func isSeedParam(p *ir.Param, seeds map[string]string) bool {
	for _, name := range seeds {
		if p.Name == name && p.Role == ir.RoleInput {
			return true
		}
	}
	return false
}

func outputNames(f *ir.Func) string {
	s := ""
	for i, o := range f.Outputs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%q", o.Name)
	}
	if s == "" {
		return "none"
	}
	return s
}
