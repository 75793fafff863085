package llamagen

import (
	"testing"

	"github.com/lcc-dev/lcc/ir"
)

// TestFlagshipShape: the flagship's parameter count, and the ops llama_mini's
// import has after match-attention.
func TestFlagshipShape(t *testing.T) {
	c := Flagship(256)
	if c.Params() != 221275136 {
		t.Errorf("params %d", c.Params())
	}
	f, err := Build(c)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, p := range f.Params {
		if p.Role == ir.RoleWeight {
			n += p.Value.Type.Numel()
		}
	}
	ops := map[ir.Op]int{}
	for _, node := range f.Body {
		ops[node.Op]++
	}
	if n != c.Params() || ops[ir.OpAttention] != 12 || ops[ir.OpMatMul] != 12*4+1 || ops[ir.OpConcat] != 24 || ops[ir.OpSplit] != 24 {
		t.Errorf("%d parameters, ops %v", n, ops)
	}
	if o := f.Outputs[0].Value.Type; o.Shape[2] != 32768 || o.Shape[1] != 256 {
		t.Errorf("logits %v", o)
	}
}
