// Package gradcheck checks autodiff gradients against central finite differences
// on the CPU interpreter in float64 (docs/design.md §8: "each op's rule against central
// finite differences in f64").
//
// For an objective L(θ) = loss + Σ_o ⟨out_o, r_o⟩ over the differentiated weights θ,
// it compares autodiff.Grad's gradient with (L(θ + h·e_i) − L(θ − h·e_i)) / 2h for
// every element i of every weight. The central difference has truncation error
// O(h²) and rounding error O(ε·|L|/h), so with h ≈ 1e-6 in float64 both are near
// 1e-10 for objectives of order one: a relative error above 1e-6 is a wrong rule,
// not noise, provided the inputs keep away from kinks (relu at 0, ties of max).
package gradcheck

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/tensor"
)

// Objective is what to differentiate: a scalar output, cotangents of outputs, or both.
type Objective struct {
	// Loss names a scalar output added to the objective ("" for none).
	Loss string
	// Seeds maps output names to the tensors r_o of the term ⟨out_o, r_o⟩.
	Seeds map[string]*tensor.Tensor
}

// Result compares one weight's gradient.
type Result struct {
	Param string
	// AD is the autodiff gradient and FD the finite-difference one, row-major.
	AD, FD []float64
	// RelErr is ‖AD − FD‖₂ / max(‖FD‖₂, 1e-2): relative, except that a gradient
	// smaller than the floor is compared absolutely (finite differences of a
	// vanishing gradient are pure rounding noise).
	RelErr float64
}

var f64 = interp.Options{Precision: tensor.F64}

// Check differentiates f with respect to its trainable weights (autodiff's
// default) and compares with central differences of step h. inputs feeds the
// non-weight parameters; weights use their Data.
func Check(f *ir.Func, inputs map[string]*tensor.Tensor, obj Objective, h float64) ([]Result, error) {
	opts := autodiff.Options{Loss: obj.Loss, Seeds: map[string]string{}}
	gin := maps.Clone(inputs)
	for _, out := range slices.Sorted(maps.Keys(obj.Seeds)) {
		name := "seed." + out
		opts.Seeds[out] = name
		gin[name] = obj.Seeds[out]
	}
	g, err := autodiff.Grad(f, opts)
	if err != nil {
		return nil, err
	}
	grads, err := interp.Run(g, gin, f64)
	if err != nil {
		return nil, fmt.Errorf("gradcheck: running the gradient: %w\n%s", err, ir.Print(g))
	}
	objective := func(in map[string]*tensor.Tensor) (float64, error) {
		outs, err := interp.Run(f, in, f64)
		if err != nil {
			return 0, err
		}
		var l float64
		if obj.Loss != "" {
			l = outs[obj.Loss].F[0]
		}
		for name, r := range obj.Seeds {
			for i, v := range outs[name].F {
				l += v * r.F[i]
			}
		}
		return l, nil
	}
	var results []Result
	for _, p := range f.Params {
		if !autodiff.DefaultWRT(p) {
			continue
		}
		ad := grads[autodiff.GradPrefix+p.Name]
		if ad == nil {
			return nil, fmt.Errorf("gradcheck: no output %s%s", autodiff.GradPrefix, p.Name)
		}
		res := Result{Param: p.Name, AD: ad.F, FD: make([]float64, len(p.Data.F))}
		in := maps.Clone(inputs)
		for i := range p.Data.F {
			var l [2]float64
			for s, sign := range []float64{1, -1} {
				x := p.Data.Clone()
				x.F[i] += sign * h
				in[p.Name] = x
				if l[s], err = objective(in); err != nil {
					return nil, err
				}
			}
			res.FD[i] = (l[0] - l[1]) / (2 * h)
		}
		var num, den float64
		for i := range res.FD {
			num += (res.AD[i] - res.FD[i]) * (res.AD[i] - res.FD[i])
			den += res.FD[i] * res.FD[i]
		}
		res.RelErr = math.Sqrt(num) / max(math.Sqrt(den), 1e-2)
		results = append(results, res)
	}
	return results, nil
}
