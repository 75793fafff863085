package interp

import (
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

func TestGather(t *testing.T) {
	x := f64(sh(3, 2), 0, 1, 2, 3, 4, 5)
	wantF(t, "rows", eval1(t, ir.OpGather, ir.A("axis", 0), x, i64(sh(2, 2), 2, 0, -1, 1)), sh(2, 2, 2), 0,
		4, 5, 0, 1, 4, 5, 2, 3)
	wantF(t, "cols", eval1(t, ir.OpGather, ir.A("axis", -1), x, i64(sh(1), 1)), sh(3, 1), 0, 1, 3, 5)
	wantF(t, "scalar index", eval1(t, ir.OpGather, ir.A("axis", 0), x, i64(sh(), 1)), sh(2), 0, 2, 3)
	wantF(t, "gather_elements", eval1(t, ir.OpGatherElements, ir.A("axis", 1), x,
		i64(sh(3, 1), 1, 0, -1)), sh(3, 1), 0, 1, 2, 5)
	wantF(t, "gather_elements axis 0", eval1(t, ir.OpGatherElements, ir.A("axis", 0), x,
		i64(sh(1, 2), 2, 1)), sh(1, 2), 0, 4, 3)
	// gather_nd: full index tuples, partial tuples, and batch_dims.
	wantF(t, "gather_nd", eval1(t, ir.OpGatherND, nil, x, i64(sh(2, 2), 0, 1, 2, 0)), sh(2), 0, 1, 4)
	wantF(t, "gather_nd rows", eval1(t, ir.OpGatherND, nil, x, i64(sh(2, 1), 2, 0)), sh(2, 2), 0, 4, 5, 0, 1)
	y := f64(sh(2, 2, 2), 0, 1, 2, 3, 4, 5, 6, 7)
	wantF(t, "gather_nd batch", eval1(t, ir.OpGatherND, ir.A("batch_dims", 1), y, i64(sh(2, 1), 1, 0)),
		sh(2, 2), 0, 2, 3, 4, 5)
	wantF(t, "gather_nd batch full", eval1(t, ir.OpGatherND, ir.A("batch_dims", 1), y,
		i64(sh(2, 2, 2), 0, 0, 1, 1, 1, 0, 0, 1)), sh(2, 2), 0, 0, 3, 6, 5)
	for _, c := range []struct {
		op   ir.Op
		idx  *tensor.Tensor
		attr ir.Attrs
	}{
		{ir.OpGather, i64(sh(1), -4), ir.A("axis", 0)},
		{ir.OpGatherElements, i64(sh(1, 1), 2), ir.A("axis", 1)},
		{ir.OpGatherND, i64(sh(1, 2), 0, 2), nil},
	} {
		_, err := EvalNode(&ir.Node{Op: c.op, Attrs: c.attr, Name: "n"}, []*tensor.Tensor{x, c.idx}, Options{})
		if err == nil || !strings.Contains(err.Error(), "out of range") || !strings.Contains(err.Error(), `"n"`) {
			t.Errorf("%v out of range: err = %v", c.op, err)
		}
	}
}

func TestScatterAdd(t *testing.T) {
	// The transpose of gather: repeated indices accumulate.
	upd := f64(sh(3, 2), 1, 2, 3, 4, 5, 6)
	wantF(t, "axis 0", eval1(t, ir.OpScatterAdd, ir.A("axis", 0, "size", 4), upd, i64(sh(3), 2, 0, 2)),
		sh(4, 2), 0, 3, 4, 0, 0, 6, 8, 0, 0)
	wantF(t, "axis 1", eval1(t, ir.OpScatterAdd, ir.A("axis", 1, "size", 3), upd, i64(sh(2), -1, 0)),
		sh(3, 3), 0, 2, 0, 1, 4, 0, 3, 6, 0, 5)
	// Indices of rank 2 cover two dims of the updates: [2,2] indices, updates [2,2,1].
	wantF(t, "rank-2 indices", eval1(t, ir.OpScatterAdd, ir.A("axis", 0, "size", 2),
		f64(sh(2, 2, 1), 1, 2, 3, 4), i64(sh(2, 2), 1, 1, 0, 1)), sh(2, 1), 0, 3, 7)
	_, err := EvalNode(&ir.Node{Op: ir.OpScatterAdd, Attrs: ir.A("axis", 0, "size", 2)},
		[]*tensor.Tensor{upd, i64(sh(3), 0, 1, 2)}, Options{})
	if err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("scatter_add out of range: err = %v", err)
	}
	// Scattering ones counts how often gather read each row.
	idx := i64(sh(4), 0, 2, 2, 1)
	ones := f64(sh(4, 2), 1, 1, 1, 1, 1, 1, 1, 1)
	wantF(t, "counts", eval1(t, ir.OpScatterAdd, ir.A("axis", 0, "size", 3), ones, idx), sh(3, 2), 0,
		1, 1, 1, 1, 2, 2)
}
