package cuda

import (
	"testing"

	"github.com/lcc-dev/lcc/ir"
)

// notLowered lists the ops the GPU backend does not generate yet, with why. Build
// reports them as "no GPU lowering for op X"; any other op without a lowering
// fails TestEveryOpLowers, so a new op cannot silently miss the backend.
var notLowered = map[string]string{}

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
		if why, ok := notLowered[op.String()]; ok {
			if lowering[op] != nil {
				t.Errorf("op %s is lowered now: remove it from notLowered", op)
			}
			t.Logf("op %s not lowered yet: %s", op, why)
			continue
		}
		if lowering[op] == nil {
			t.Errorf("op %s has no GPU lowering", op)
		}
	}
}
