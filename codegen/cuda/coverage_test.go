package cuda

import (
	"testing"

	"github.com/lcc-dev/lcc/ir"
)

// TestEveryOpLowers fails when an op in the table has neither a lowering nor an
// elementwise expression, so a new op cannot silently miss the GPU backend.
func TestEveryOpLowers(t *testing.T) {
	for _, op := range ir.AllOps() {
		info := op.Info()
		if info.Elementwise {
			_, f := floatExpr[op]
			_, i := intExpr[op]
			_, b := boolExpr[op]
			if !f && !i && !b && op != ir.OpCast {
				t.Errorf("elementwise op %s has no C expression", op)
			}
			continue
		}
		if lowering[op] == nil {
			t.Errorf("op %s has no GPU lowering", op)
		}
	}
}
