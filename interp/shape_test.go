package interp

import (
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

func TestMovement(t *testing.T) {
	x := f64(sh(2, 3), 0, 1, 2, 3, 4, 5)
	wantF(t, "reshape", eval1(t, ir.OpReshape, ir.A("shape", []int{3, 2}), x), sh(3, 2), 0, 0, 1, 2, 3, 4, 5)
	wantF(t, "transpose", eval1(t, ir.OpTranspose, ir.A("perm", []int{1, 0}), x), sh(3, 2), 0, 0, 3, 1, 4, 2, 5)
	y := f64(sh(2, 2, 2), 0, 1, 2, 3, 4, 5, 6, 7)
	wantF(t, "transpose 3d", eval1(t, ir.OpTranspose, ir.A("perm", []int{2, 0, 1}), y), sh(2, 2, 2), 0,
		0, 2, 4, 6, 1, 3, 5, 7)
	wantF(t, "expand", eval1(t, ir.OpExpand, ir.A("shape", []int{2, 2, 3}), f64(sh(2, 1), 1, 2)),
		sh(2, 2, 3), 0, 1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2)
	wantF(t, "slice", eval1(t, ir.OpSlice, ir.A("axes", []int{1}, "starts", []int{1}, "ends", []int{3},
		"steps", []int{1}), x), sh(2, 2), 0, 1, 2, 4, 5)
	// Reverse with a negative step down to end −1 (the normalised form of "to the start").
	wantF(t, "slice reverse", eval1(t, ir.OpSlice, ir.A("axes", []int{-1, 0}, "starts", []int{2, 1},
		"ends", []int{-1, 2}, "steps", []int{-2, 1}), x), sh(1, 2), 0, 5, 3)
	wantF(t, "slice empty", eval1(t, ir.OpSlice, ir.A("axes", []int{1}, "starts", []int{3}, "ends", []int{3},
		"steps", []int{1}), x), sh(2, 0), 0)
	wantF(t, "concat", eval1(t, ir.OpConcat, ir.A("axis", -1), x, f64(sh(2, 1), 9, 8)), sh(2, 4), 0,
		0, 1, 2, 9, 3, 4, 5, 8)
	wantI(t, "concat ints", eval1(t, ir.OpConcat, ir.A("axis", 0), i64(sh(1), 1), i64(sh(2), 2, 3)), sh(3), 1, 2, 3)
	parts := eval(t, ir.OpSplit, ir.A("axis", 1, "sizes", []int{1, 2}), x)
	wantF(t, "split 0", parts[0], sh(2, 1), 0, 0, 3)
	wantF(t, "split 1", parts[1], sh(2, 2), 0, 1, 2, 4, 5)
	wantF(t, "tile", eval1(t, ir.OpTile, ir.A("repeats", []int{2, 1}), f64(sh(1, 2), 1, 2)), sh(2, 2), 0, 1, 2, 1, 2)
	wantF(t, "tile 2", eval1(t, ir.OpTile, ir.A("repeats", []int{1, 2}), f64(sh(2, 1), 1, 2)), sh(2, 2), 0, 1, 1, 2, 2)
}

func TestTrilu(t *testing.T) {
	x := f64(sh(3, 3), 1, 2, 3, 4, 5, 6, 7, 8, 9)
	wantF(t, "lower", eval1(t, ir.OpTrilu, nil, x), sh(3, 3), 0, 1, 0, 0, 4, 5, 0, 7, 8, 9)
	wantF(t, "upper", eval1(t, ir.OpTrilu, ir.A("upper", true), x), sh(3, 3), 0, 1, 2, 3, 0, 5, 6, 0, 0, 9)
	wantF(t, "upper k=1", eval1(t, ir.OpTrilu, ir.A("upper", true, "k", 1), x), sh(3, 3), 0,
		0, 2, 3, 0, 0, 6, 0, 0, 0)
	wantF(t, "lower k=-1", eval1(t, ir.OpTrilu, ir.A("k", -1), x), sh(3, 3), 0, 0, 0, 0, 4, 0, 0, 7, 8, 0)
	// Batched and non-square: [2, 2, 3].
	y := f64(sh(2, 2, 3), 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2)
	wantF(t, "batched", eval1(t, ir.OpTrilu, nil, y), sh(2, 2, 3), 0, 1, 0, 0, 1, 1, 0, 2, 0, 0, 2, 2, 0)
	wantI(t, "bool upper", eval1(t, ir.OpTrilu, ir.A("upper", true, "k", 1),
		tensor.FromInts(tensor.Bool, sh(2, 2), []int64{1, 1, 1, 1})), sh(2, 2), 0, 1, 0, 0)
}

func TestCreate(t *testing.T) {
	c := f32(sh(2), 1.5, 2.5)
	wantF(t, "constant", eval1(t, ir.OpConstant, ir.A("value", c)), sh(2), 0, 1.5, 2.5)
	wantF(t, "full", eval1(t, ir.OpFull, ir.A("value", 0.5, "shape", []int{2, 2})), sh(2, 2), 0, .5, .5, .5, .5)
	wantI(t, "full bool", eval1(t, ir.OpFull, ir.A("value", 1.0, "shape", []int{2}, "dtype", tensor.Bool)),
		sh(2), 1, 1)
	wantI(t, "range", eval1(t, ir.OpRange, ir.A("start", 2.0, "delta", -1.0, "count", 4)), sh(4), 2, 1, 0, -1)
	wantF(t, "range f32", eval1(t, ir.OpRange, ir.A("start", 0.0, "delta", 0.5, "count", 3, "dtype", tensor.F32)),
		sh(3), 0, 0, 0.5, 1)
}
