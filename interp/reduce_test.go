package interp

import (
	"math"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

func TestReduce(t *testing.T) {
	x := f64(sh(2, 3), 1, 2, 3, 4, 5, 6)
	wantF(t, "sum all", eval1(t, ir.OpReduceSum, nil, x), sh(), 0, 21)
	wantF(t, "sum -1", eval1(t, ir.OpReduceSum, ir.A("axes", []int{-1}), x), sh(2), 0, 6, 15)
	wantF(t, "sum 0 keep", eval1(t, ir.OpReduceSum, ir.A("axes", []int{0}, "keepdims", true), x),
		sh(1, 3), 0, 5, 7, 9)
	wantF(t, "mean", eval1(t, ir.OpReduceMean, ir.A("axes", []int{1}), x), sh(2), 0, 2, 5)
	wantF(t, "max", eval1(t, ir.OpReduceMax, ir.A("axes", []int{0}), x), sh(3), 0, 4, 5, 6)
	wantF(t, "min keep all", eval1(t, ir.OpReduceMin, ir.A("keepdims", true), x), sh(1, 1), 0, 1)
	wantF(t, "max nan", eval1(t, ir.OpReduceMax, nil, f64(sh(3), 1, math.NaN(), 2)), sh(), 0, math.NaN())
	wantI(t, "int sum", eval1(t, ir.OpReduceSum, ir.A("axes", []int{1}), i64(sh(2, 2), 1, 2, 3, 4)), sh(2), 3, 7)
	wantI(t, "int mean", eval1(t, ir.OpReduceMean, nil, i64(sh(2), 1, 2)), sh(), 1)
	// Over an empty range, max and min give the dtype's least and greatest values.
	wantI(t, "empty bool max", eval1(t, ir.OpReduceMax, ir.A("axes", []int{1}), boolT(sh(2, 0))), sh(2), 0, 0)
	wantI(t, "empty bool min", eval1(t, ir.OpReduceMin, ir.A("axes", []int{1}), boolT(sh(2, 0))), sh(2), 1, 1)
	i32 := i64(sh(0))
	i32.DType = tensor.I32
	wantI(t, "empty i32 max", eval1(t, ir.OpReduceMax, nil, i32), sh(), math.MinInt32)
	wantI(t, "empty i32 min", eval1(t, ir.OpReduceMin, nil, i32), sh(), math.MaxInt32)
	// Middle axis of a rank-3 tensor.
	y := f64(sh(2, 2, 2), 1, 2, 3, 4, 5, 6, 7, 8)
	wantF(t, "sum mid", eval1(t, ir.OpReduceSum, ir.A("axes", []int{-2}), y), sh(2, 2), 0, 4, 6, 12, 14)
}

func TestSoftmax(t *testing.T) {
	x := f64(sh(2, 3), 1, 2, 3, 1000, 1000, 1000)
	e := []float64{math.Exp(-2), math.Exp(-1), 1}
	s := e[0] + e[1] + e[2]
	wantF(t, "softmax", eval1(t, ir.OpSoftmax, ir.A("axis", -1), x), sh(2, 3), 1e-15,
		e[0]/s, e[1]/s, e[2]/s, 1.0/3, 1.0/3, 1.0/3)
	ls := math.Log(s)
	wantF(t, "log_softmax", eval1(t, ir.OpLogSoftmax, ir.A("axis", 1), x), sh(2, 3), 1e-15,
		-2-ls, -1-ls, -ls, -math.Log(3), -math.Log(3), -math.Log(3))
	// Over axis 0 of [2,2].
	wantF(t, "softmax axis 0", eval1(t, ir.OpSoftmax, ir.A("axis", 0), f64(sh(2, 2), 0, 1, 0, 1)),
		sh(2, 2), 0, 0.5, 0.5, 0.5, 0.5)
}

func TestNorms(t *testing.T) {
	x := f64(sh(2, 2), 1, 3, 2, 2)
	// Row 1: mean 2, var 1 → ±1/sqrt(1+eps); row 2: all equal → 0.
	eps := 1e-5
	inv := 1 / math.Sqrt(1+eps)
	wantF(t, "layer_norm", eval1(t, ir.OpLayerNorm, ir.A("axis", -1, "eps", eps), x), sh(2, 2), 1e-15,
		-inv, inv, 0, 0)
	g, bb := f64(sh(2), 2, 3), f64(sh(2), 10, 20)
	wantF(t, "layer_norm scale bias", eval1(t, ir.OpLayerNorm, ir.A("axis", -1, "eps", eps), x, g, bb),
		sh(2, 2), 1e-15, 10-2*inv, 20+3*inv, 10, 20)
	// Over the last two dims, with a scale [1,2] broadcast over them.
	y := f64(sh(1, 2, 2), 1, 2, 3, 4)
	v := 1.25 // population variance of 1..4
	r := 1 / math.Sqrt(v+eps)
	wantF(t, "layer_norm 2 dims", eval1(t, ir.OpLayerNorm, ir.A("axis", 1, "eps", eps), y, f64(sh(1, 2), 1, 2)),
		sh(1, 2, 2), 1e-14, -1.5*r, -0.5*2*r, 0.5*r, 1.5*2*r)
	ms := (1.0 + 9) / 2
	wantF(t, "rms_norm", eval1(t, ir.OpRMSNorm, ir.A("axis", -1, "eps", eps), f64(sh(1, 2), 1, 3), g),
		sh(1, 2), 1e-15, 2/math.Sqrt(ms+eps), 9/math.Sqrt(ms+eps))
}

func TestCumSum(t *testing.T) {
	x := f64(sh(2, 3), 1, 2, 3, 4, 5, 6)
	wantF(t, "cumsum", eval1(t, ir.OpCumSum, ir.A("axis", 1), x), sh(2, 3), 0, 1, 3, 6, 4, 9, 15)
	wantF(t, "exclusive", eval1(t, ir.OpCumSum, ir.A("axis", -1, "exclusive", true), x), sh(2, 3), 0,
		0, 1, 3, 0, 4, 9)
	wantF(t, "reverse", eval1(t, ir.OpCumSum, ir.A("axis", 1, "reverse", true), x), sh(2, 3), 0,
		6, 5, 3, 15, 11, 6)
	wantF(t, "exclusive reverse axis 0",
		eval1(t, ir.OpCumSum, ir.A("axis", 0, "exclusive", true, "reverse", true), x), sh(2, 3), 0,
		4, 5, 6, 0, 0, 0)
	wantI(t, "int", eval1(t, ir.OpCumSum, ir.A("axis", 0), i64(sh(3), 1, 1, 1)), sh(3), 1, 2, 3)
}
