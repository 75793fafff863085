package interp

import (
	"math"
	"slices"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

func init() { debugStacks = true }

// f32 builds an f32 tensor.
func f32(shape []int64, data ...float64) *tensor.Tensor {
	return tensor.FromFloats(tensor.F32, shape, data)
}

// f64 builds an f64 tensor.
func f64(shape []int64, data ...float64) *tensor.Tensor {
	return tensor.FromFloats(tensor.F64, shape, data)
}

// i64 builds an i64 tensor.
func i64(shape []int64, data ...int64) *tensor.Tensor {
	return tensor.FromInts(tensor.I64, shape, data)
}

// boolT builds a bool tensor from 0/1.
func boolT(shape []int64, data ...int64) *tensor.Tensor {
	return tensor.FromInts(tensor.Bool, shape, data)
}

func sh(d ...int64) []int64 { return d }

// eval runs one op through EvalNode and fails the test on error.
func eval(t *testing.T, op ir.Op, attrs ir.Attrs, args ...*tensor.Tensor) []*tensor.Tensor {
	t.Helper()
	res, err := EvalNode(&ir.Node{Op: op, Attrs: attrs}, args, Options{Precision: tensor.F64})
	if err != nil {
		t.Fatalf("%v: %v", op, err)
	}
	return res
}

// eval1 is eval for ops with one result.
func eval1(t *testing.T, op ir.Op, attrs ir.Attrs, args ...*tensor.Tensor) *tensor.Tensor {
	t.Helper()
	return eval(t, op, attrs, args...)[0]
}

// wantF checks a float tensor's shape and elements within tol (NaN matches NaN).
func wantF(t *testing.T, what string, got *tensor.Tensor, shape []int64, tol float64, want ...float64) {
	t.Helper()
	if !slices.Equal(got.Shape, shape) {
		t.Fatalf("%s: shape %v, want %v", what, got.Shape, shape)
	}
	if len(got.F) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got.F), len(want))
	}
	for i := range want {
		g, w := got.F[i], want[i]
		if math.IsNaN(w) && math.IsNaN(g) || g == w {
			continue
		}
		if !(math.Abs(g-w) <= tol*(1+math.Abs(w))) {
			t.Fatalf("%s: element %d = %v, want %v\ngot  %v\nwant %v", what, i, g, w, got.F, want)
		}
	}
}

// wantI checks an integer or bool tensor exactly.
func wantI(t *testing.T, what string, got *tensor.Tensor, shape []int64, want ...int64) {
	t.Helper()
	if !slices.Equal(got.Shape, shape) {
		t.Fatalf("%s: shape %v, want %v", what, got.Shape, shape)
	}
	if len(got.I) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got.I), len(want))
	}
	for i := range want {
		if got.I[i] != want[i] {
			t.Fatalf("%s: got %v, want %v", what, got.I, want)
		}
	}
}

// randF returns n deterministic pseudo-random floats in [-1, 1).
func randF(seed uint64, n int) []float64 {
	out := make([]float64, n)
	s := seed*0x9e3779b97f4a7c15 + 1
	for i := range out {
		s ^= s << 13
		s ^= s >> 7
		s ^= s << 17
		out[i] = float64(s>>11)/float64(1<<53)*2 - 1
	}
	return out
}
