package interp

import (
	"math"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

func TestUnary(t *testing.T) {
	x := f64(sh(4), -2, -0.5, 0, 1.5)
	s := func(v float64) float64 { return 1 / (1 + math.Exp(-v)) }
	cases := []struct {
		op   ir.Op
		fn   func(float64) float64
		attr ir.Attrs
	}{
		{ir.OpNeg, func(v float64) float64 { return -v }, nil},
		{ir.OpExp, math.Exp, nil},
		{ir.OpTanh, math.Tanh, nil},
		{ir.OpErf, math.Erf, nil},
		{ir.OpSigmoid, s, nil},
		{ir.OpRelu, func(v float64) float64 { return math.Max(v, 0) }, nil},
		{ir.OpAbs, math.Abs, nil},
		{ir.OpCos, math.Cos, nil},
		{ir.OpSin, math.Sin, nil},
		{ir.OpSilu, func(v float64) float64 { return v * s(v) }, nil},
		{ir.OpGelu, func(v float64) float64 { return 0.5 * v * (1 + math.Erf(v/math.Sqrt2)) }, nil},
		{ir.OpGelu, func(v float64) float64 {
			return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
		}, ir.A("tanh", true)},
	}
	for _, c := range cases {
		var want []float64
		for _, v := range x.F {
			want = append(want, c.fn(v))
		}
		wantF(t, c.op.String(), eval1(t, c.op, c.attr, x), sh(4), 1e-15, want...)
	}
	p := f64(sh(3), 4, 0.25, 0)
	wantF(t, "sqrt", eval1(t, ir.OpSqrt, nil, p), sh(3), 0, 2, 0.5, 0)
	wantF(t, "rsqrt", eval1(t, ir.OpRsqrt, nil, p), sh(3), 0, 0.5, 2, math.Inf(1))
	wantF(t, "recip", eval1(t, ir.OpRecip, nil, p), sh(3), 0, 0.25, 4, math.Inf(1))
	wantF(t, "log", eval1(t, ir.OpLog, nil, p), sh(3), 1e-15, math.Log(4), math.Log(0.25), math.Inf(-1))
	// Known values of GELU (PyTorch): gelu(1) = 0.8413447, tanh form 0.8411920.
	wantF(t, "gelu(1)", eval1(t, ir.OpGelu, nil, f64(sh(), 1)), sh(), 1e-7, 0.8413447460685429)
	wantF(t, "gelu_tanh(1)", eval1(t, ir.OpGelu, ir.A("tanh", true), f64(sh(), 1)), sh(), 1e-7, 0.8411919906082768)
	// Sigmoid saturates without overflow.
	wantF(t, "sigmoid", eval1(t, ir.OpSigmoid, nil, f64(sh(2), -1000, 1000)), sh(2), 0, 0, 1)
}

func TestBinaryBroadcast(t *testing.T) {
	a := f64(sh(2, 3), 1, 2, 3, 4, 5, 6)
	row := f64(sh(3), 10, 20, 30)
	col := f64(sh(2, 1), 100, 200)
	wantF(t, "add row", eval1(t, ir.OpAdd, nil, a, row), sh(2, 3), 0, 11, 22, 33, 14, 25, 36)
	wantF(t, "sub col", eval1(t, ir.OpSub, nil, a, col), sh(2, 3), 0, -99, -98, -97, -196, -195, -194)
	// [2,1] x [3] broadcasts both ways to [2,3].
	wantF(t, "mul outer", eval1(t, ir.OpMul, nil, col, row), sh(2, 3), 0, 1000, 2000, 3000, 2000, 4000, 6000)
	wantF(t, "div scalar", eval1(t, ir.OpDiv, nil, a, f64(sh(), 2)), sh(2, 3), 0, 0.5, 1, 1.5, 2, 2.5, 3)
	wantF(t, "pow", eval1(t, ir.OpPow, nil, row, f64(sh(1), 2)), sh(3), 0, 100, 400, 900)
	nan := math.NaN()
	x, y := f64(sh(3), 1, nan, 3), f64(sh(3), 2, 0, nan)
	wantF(t, "max nan", eval1(t, ir.OpMax, nil, x, y), sh(3), 0, 2, nan, nan)
	wantF(t, "min nan", eval1(t, ir.OpMin, nil, x, y), sh(3), 0, 1, nan, nan)
	// Integer arithmetic stays integral: division truncates toward zero.
	ia, ib := i64(sh(4), 7, -7, 2, 3), i64(sh(4), 2, 2, 10, 0)
	wantI(t, "int add", eval1(t, ir.OpAdd, nil, ia, ib), sh(4), 9, -5, 12, 3)
	wantI(t, "int div", eval1(t, ir.OpDiv, nil, ia, i64(sh(1), 2)), sh(4), 3, -3, 1, 1)
	wantI(t, "int pow", eval1(t, ir.OpPow, nil, ia, ib), sh(4), 49, 49, 1024, 1)
	wantI(t, "int max", eval1(t, ir.OpMax, nil, ia, ib), sh(4), 7, 2, 10, 3)
	// i32 wraps.
	big := tensor.FromInts(tensor.I32, sh(1), []int64{math.MaxInt32})
	wantI(t, "i32 wrap", eval1(t, ir.OpAdd, nil, big, tensor.FromInts(tensor.I32, sh(1), []int64{1})),
		sh(1), math.MinInt32)
}

func TestIntDivByZeroIsError(t *testing.T) {
	_, err := EvalNode(&ir.Node{Op: ir.OpDiv, Name: "d"}, []*tensor.Tensor{i64(sh(1), 1), i64(sh(1), 0)}, Options{})
	if err == nil {
		t.Fatal("integer division by zero: no error")
	}
}

func TestCompareLogicWhere(t *testing.T) {
	a, b := f64(sh(3), 1, 2, 3), f64(sh(), 2)
	wantI(t, "eq", eval1(t, ir.OpEq, nil, a, b), sh(3), 0, 1, 0)
	wantI(t, "lt", eval1(t, ir.OpLt, nil, a, b), sh(3), 1, 0, 0)
	wantI(t, "le", eval1(t, ir.OpLe, nil, a, b), sh(3), 1, 1, 0)
	wantI(t, "gt", eval1(t, ir.OpGt, nil, a, b), sh(3), 0, 0, 1)
	wantI(t, "ge", eval1(t, ir.OpGe, nil, a, b), sh(3), 0, 1, 1)
	wantI(t, "int lt", eval1(t, ir.OpLt, nil, i64(sh(2, 1), 0, 5), i64(sh(2), 1, 6)), sh(2, 2), 1, 1, 0, 1)
	p, q := boolT(sh(4), 0, 0, 1, 1), boolT(sh(4), 0, 1, 0, 1)
	wantI(t, "and", eval1(t, ir.OpAnd, nil, p, q), sh(4), 0, 0, 0, 1)
	wantI(t, "or", eval1(t, ir.OpOr, nil, p, q), sh(4), 0, 1, 1, 1)
	wantI(t, "xor", eval1(t, ir.OpXor, nil, p, q), sh(4), 0, 1, 1, 0)
	wantI(t, "not", eval1(t, ir.OpNot, nil, p), sh(4), 1, 1, 0, 0)
	wantI(t, "isnan", eval1(t, ir.OpIsNaN, nil, f64(sh(3), 1, math.NaN(), math.Inf(1))), sh(3), 0, 1, 0)
	// where broadcasts its condition over a [2,2] and a scalar.
	c := boolT(sh(2), 1, 0)
	wantF(t, "where", eval1(t, ir.OpWhere, nil, c, f64(sh(2, 2), 1, 2, 3, 4), f64(sh(), -1)),
		sh(2, 2), 0, 1, -1, 3, -1)
}

func TestCast(t *testing.T) {
	x := f64(sh(5), -2.7, -0.5, 0, 0.5, 2.7)
	wantI(t, "f→i64 truncates", eval1(t, ir.OpCast, ir.A("to", tensor.I64), x), sh(5), -2, 0, 0, 0, 2)
	wantI(t, "f→bool", eval1(t, ir.OpCast, ir.A("to", tensor.Bool), x), sh(5), 1, 1, 0, 1, 1)
	b := boolT(sh(2), 1, 0)
	wantF(t, "bool→f32", eval1(t, ir.OpCast, ir.A("to", tensor.F32), b), sh(2), 0, 1, 0)
	wantI(t, "i64→u8 wraps", eval1(t, ir.OpCast, ir.A("to", tensor.U8), i64(sh(2), 257, -1)), sh(2), 1, 255)
	// Rounding to bf16 and f16 happens under the default precision.
	v := f64(sh(1), 1+1.0/512)
	res, err := EvalNode(&ir.Node{Op: ir.OpCast, Attrs: ir.A("to", tensor.BF16)}, []*tensor.Tensor{v}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	wantF(t, "f64→bf16", res[0], sh(1), 0, 1)
	res, err = EvalNode(&ir.Node{Op: ir.OpCast, Attrs: ir.A("to", tensor.F16)}, []*tensor.Tensor{v}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	wantF(t, "f64→f16", res[0], sh(1), 0, 1+1.0/512)
}
