package interp

import (
	"math"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// The norms' backward ops are fused, as the GPU runs them
// (codegen/cuda/norm_grad.go): one row at a time, with no [rows, m]
// temporaries.
func init() {
	Register(ir.OpRMSNormGrad, kernelRMSNormGrad)
	Register(ir.OpLayerNormGrad, kernelLayerNormGrad)
}

// kernelRMSNormGrad is rms_norm_grad (ir/ops_norm.go): per row r = 1/√(mean(x²) +
// eps), x̂ = x·r, g = dy ⊙ scale, dx = r·(g − x̂·mean(g ⊙ x̂)); dscale sums dy ⊙ x̂
// over the rows in row order.
func kernelRMSNormGrad(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	// The scale operand is optional (args is x, [scale,] dy): dy is always last.
	x, dy := args[0], args[len(args)-1]
	axis := normAxis(n.AttrInt("axis"), len(x.Shape))
	eps := n.AttrFloat("eps")
	m := prod(x.Shape[axis:])
	dx := newResult(n, 0)
	var scale []float64
	var ds *tensor.Tensor
	if len(args) == 3 {
		scale, ds = args[1].F, newResult(n, 1)
	}
	// Empty rows: nothing to normalise, and the loops below would divide by m.
	if m == 0 {
		if ds != nil {
			return []*tensor.Tensor{dx, ds}, nil
		}
		return one(dx), nil
	}
	rows := len(x.F) / m
	// Rows are independent for dx: each goroutine owns whole rows. About 6 cheap
	// operations an element over the three sweeps.
	parallelRange(rows, 6*m, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, dyr, dxr := x.F[r*m:(r+1)*m], dy.F[r*m:(r+1)*m], dx.F[r*m:(r+1)*m]
			var ss float64
			for _, e := range xr {
				ss += e * e
			}
			// The forward's r, recomputed rather than saved: the op takes x, not the
			// forward's statistics.
			inv := 1 / math.Sqrt(ss/float64(m)+eps)
			var mgx float64
			for j, e := range xr {
				g := dyr[j]
				if scale != nil {
					g *= scale[j]
				}
				mgx += g * e * inv
			}
			// mean(g ⊙ x̂): the term that removes dx's component along x̂, which the
			// normalisation's Jacobian projects out.
			mgx /= float64(m)
			for j, e := range xr {
				g := dyr[j]
				if scale != nil {
					g *= scale[j]
				}
				dxr[j] = inv * (g - e*inv*mgx)
			}
		}
	})
	if ds == nil {
		return one(dx), nil
	}
	// dscale sums over rows into one vector: splitting rows would need partial
	// sums, whose combination order would depend on the core count.
	for r := 0; r < rows; r++ { // serial: a fixed order of summation
		xr, dyr := x.F[r*m:(r+1)*m], dy.F[r*m:(r+1)*m]
		var ss float64
		for _, e := range xr {
			ss += e * e
		}
		inv := 1 / math.Sqrt(ss/float64(m)+eps)
		for j, e := range xr {
			ds.F[j] += dyr[j] * e * inv
		}
	}
	return []*tensor.Tensor{dx, ds}, nil
}

// kernelLayerNormGrad is layer_norm_grad (ir/ops_norm.go): per row μ, r =
// 1/√(var + eps), x̂ = (x − μ)·r, g = dy ⊙ scale, dx = r·(g − mean(g) −
// x̂·mean(g ⊙ x̂)); dscale sums dy ⊙ x̂ and dbias sums dy over the rows in row order.
func kernelLayerNormGrad(n *ir.Node, args []*tensor.Tensor, _ Options) ([]*tensor.Tensor, error) {
	x, scale, dy := args[0], args[1].F, args[len(args)-1]
	axis := normAxis(n.AttrInt("axis"), len(x.Shape))
	eps := n.AttrFloat("eps")
	m := prod(x.Shape[axis:])
	out := []*tensor.Tensor{newResult(n, 0), newResult(n, 1)}
	if len(args) == 4 {
		out = append(out, newResult(n, 2))
	}
	if m == 0 {
		return out, nil
	}
	dx, ds := out[0], out[1]
	rows := len(x.F) / m
	// stats is the forward's per-row mean and 1/σ, shared by both sweeps; the
	// two-pass variance is the forward's too, so the bits agree.
	stats := func(xr []float64) (mu, inv float64) {
		for _, e := range xr {
			mu += e
		}
		mu /= float64(m)
		var v float64
		for _, e := range xr {
			v += (e - mu) * (e - mu)
		}
		return mu, 1 / math.Sqrt(v/float64(m)+eps)
	}
	// As for rms: whole rows per goroutine, about 8 operations an element.
	parallelRange(rows, 8*m, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, dyr, dxr := x.F[r*m:(r+1)*m], dy.F[r*m:(r+1)*m], dx.F[r*m:(r+1)*m]
			mu, inv := stats(xr)
			var mg, mgx float64
			for j, e := range xr {
				g := dyr[j] * scale[j]
				mg += g
				mgx += g * (e - mu) * inv
			}
			// mean(g) removes the component along the mean, which layer norm subtracts
			// and rms norm does not.
			mg /= float64(m)
			mgx /= float64(m)
			for j, e := range xr {
				dxr[j] = inv * (dyr[j]*scale[j] - mg - (e-mu)*inv*mgx)
			}
		}
	})
	for r := 0; r < rows; r++ { // serial: a fixed order of summation
		xr, dyr := x.F[r*m:(r+1)*m], dy.F[r*m:(r+1)*m]
		mu, inv := stats(xr)
		for j, e := range xr {
			ds.F[j] += dyr[j] * (e - mu) * inv
			if len(out) == 3 {
				out[2].F[j] += dyr[j]
			}
		}
	}
	return out, nil
}
